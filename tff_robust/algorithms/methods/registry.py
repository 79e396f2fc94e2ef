"""The methods, listed once: this registry drives the ``--algorithm`` choices, which client and
server components a configuration runs (and in which order), the checks of a configuration, the
console's ``method`` line and the run name's parts.

Order: the console names the methods and the run name takes their parts in `METHODS` order, the
server components' entries sit in the state in that order (``ah``, ``fedex``, then the
``--algorithm``'s: old checkpoints keep loading), and the client hooks run in that order within
each `Method.client_rank` (the byzantine attack after all of them). Adding a method is one module
and one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from tff_robust.algorithms import attacks
from tff_robust.algorithms import config as config_lib
from tff_robust.algorithms.client import Component
from tff_robust.algorithms.methods import ah, er, fedex, rm, scaffold, wd
from tff_robust.algorithms.methods.method import BuildContext, Method
from tff_robust.common import options
from tff_robust.common.options import option

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig
  from tff_robust.algorithms.server import ServerComponent

# Generalized FedAvg (seed 004 Algorithm 2): ``--algorithm=fedavg`` adds nothing.
FEDAVG = Method("fedavg", runs=lambda config: config.algorithm == "fedavg", by_name=True)

METHODS: tuple[Method, ...] = (rm.METHOD, er.METHOD, wd.METHOD, ah.METHOD, fedex.METHOD, FEDAVG,
                               scaffold.METHOD)


def algorithm_names() -> tuple[str, ...]:
  """The ``--algorithm`` choices."""
  return tuple(m.name for m in METHODS if m.by_name)


@dataclasses.dataclass(frozen=True)
class Selection:
  """The flag that chooses a method by name (`ProcessConfig.algorithm`)."""

  algorithm: str = option("fedavg", "algorithm",
                          "The method added to generalized FedAvg by name: " + ", ".join(algorithm_names()) + ".",
                          choices=algorithm_names())


def running(config: "ProcessConfig") -> list[Method]:
  """The methods ``config`` runs, in registry order."""
  return [m for m in METHODS if m.runs(config)]


def held_option_classes() -> tuple[type, ...]:
  """The options classes a `ProcessConfig` holds in ``methods``: those of the methods without a
  switch of their own (RM's, ER's, WD's), in registry order."""
  return tuple(cls for m in METHODS if m.switch is None for cls in m.options)


def check(config: "ProcessConfig") -> None:
  """``--algorithm`` is a registered name, ``config.methods`` holds only the registered methods'
  options, then each running method's check (ValueError naming the flag, the value and what is
  allowed; `config.ProcessConfig` calls it on construction)."""
  names = algorithm_names()
  options.check(config.algorithm in names, "algorithm", config.algorithm, "choose one of " + ", ".join(names))
  held = held_option_classes()
  for given in config.methods:
    if type(given) not in held:
      raise ValueError(f"ProcessConfig.methods holds {type(given).__name__}, not the options of a method "
                       f"without a switch ({', '.join(c.__name__ for c in held)})")
  for method in running(config):
    method.check(config)


def check_model(config: "ProcessConfig", model_fn: Callable[[], Any]) -> None:
  """Each running method's check against the task's model (``model_fn`` builds it), before any
  tracing; raises ValueError naming the flag (RM's matching layers)."""
  for method in running(config):
    method.check_model(config, model_fn)


def server_val_examples(config: "ProcessConfig") -> int:
  """The size of the server-held validation sample the running methods need (0: none)."""
  return max((m.server_val(config) for m in running(config)), default=0)


class Parts(NamedTuple):
  client: list[Component]  # in hook order
  server: list["ServerComponent"]  # in state order


def components(ctx: BuildContext) -> Parts:
  """The client and server components of ``ctx.config``, in order."""
  client, server = [], []
  for method in running(ctx.config):
    built = method.build(ctx)
    client += [(method.client_rank, len(client), c) for c in built.client]
    server += list(built.server)
  ordered = [c for _, _, c in sorted(client, key=lambda entry: entry[:2])]
  rob = ctx.config.robust
  if rob.byzantine_attack != "none":
    ordered.append(attacks.ByzantineAttack(rob.byzantine_attack, rob.byzantine_scale, rob.byzantine_sigma))
  return Parts(ordered, server)


def _fmt(v: float) -> str:
  return f"{v:.4g}"


def describe(config: "ProcessConfig") -> str:
  """The console's ``method`` line: the ``--algorithm`` (unless fedavg), the server optimizer,
  each running method's part, the methods that are off, the weighting."""
  s = config.server
  named = [m.describe(config).console for m in running(config) if m.by_name]
  parts = [p for p in named if p]
  parts += [f"server {s.opt} (lr {_fmt(s.lr)}"
            + (f", momentum {_fmt(s.momentum)}" if s.opt == "sgdm" else "")
            + (f", decay {_fmt(s.lr_decay)}/round" if s.lr_decay != 1.0 else "") + ")"]
  on = {m.name: m.describe(config).console for m in running(config) if not m.by_name}
  parts += [p for p in on.values() if p]
  labelled = [m for m in METHODS if m.label]
  if not any(on.get(m.name) for m in labelled):
    labels = [m.label for m in labelled]
    parts.append("no " + (", ".join(labels[:-1]) + " or " + labels[-1] if len(labels) > 1 else labels[0]))
  if config.weighting != "num_examples":
    parts.append(f"weights {config.weighting}")
  return ", ".join(parts)


def run_name_parts(config: "ProcessConfig") -> list[str]:
  """The running methods' parts of the default run name, in registry order."""
  return [p for p in (m.describe(config).run_name for m in running(config)) if p]


def option_classes() -> tuple[type, ...]:
  """The dataclasses whose fields are the methods' flags: `Selection`, then each method's options."""
  return (Selection,) + tuple(cls for m in METHODS for cls in m.options)


def find(name: str) -> Optional[Method]:
  return next((m for m in METHODS if m.name == name), None)


config_lib.install_check(check)  # every ProcessConfig checks its methods on construction
