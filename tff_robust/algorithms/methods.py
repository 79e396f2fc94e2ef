"""Which client and server components a configuration runs, and in which order: one place.

`process.build_process` wires what `components` returns; the trainer calls the client
components' hooks in this order: RM, ER, the proximal term, the ``--algorithm``'s own, FedEx's
sampling (its heavy-ball acts on the gradient the others made), AH's pre-evaluation, the attack
(on the Δ sent). A method added by name (``--algorithm``, `ALGORITHMS`) is one module with a
client and a server component; it registers its builder and its configuration check here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import tensorflow as tf

from tff_robust.algorithms import attacks
from tff_robust.algorithms import fedex as fedex_lib
from tff_robust.algorithms import fedex_space
from tff_robust.algorithms import matching_client
from tff_robust.algorithms import regularizers
from tff_robust.algorithms import scaffold
from tff_robust.algorithms import server
from tff_robust.algorithms.client import Component
from tff_robust.algorithms.config import ProcessConfig


class BuildContext(NamedTuple):
  """What a method's components may need to know at build time."""

  spec: Any  # client_work.ModelSpec
  config: ProcessConfig
  trainable_specs: list[tf.TensorSpec]  # of w's trainable leaves
  num_clients: Optional[int]  # K, every client of the task (None: not known to the builder)
  server_loss: Optional[server.LossFn]  # L(w) on the server's validation set (AH's first scheme)


class Parts(NamedTuple):
  client: list[Component]  # in hook order
  server: list  # `server.ServerComponent`s, in state order
  policy: Optional[server.AdaptiveHparams]  # also the round's `HparamSource` when set
  fedex: Optional[fedex_space.FedExClient]


class Method(NamedTuple):
  """A method added by ``--algorithm``: its components, and the check of a configuration that
  runs it (raises ValueError naming the flag; called before anything is traced)."""

  build: Callable[[BuildContext], tuple[Sequence[Component], Sequence[Any]]]
  check: Callable[[ProcessConfig], None] = lambda config: None


# name -> Method; "fedavg" adds nothing (generalized FedAvg, seed 004 Algorithm 2).
ALGORITHMS: dict[str, Method] = {"fedavg": Method(lambda ctx: ((), ())),
                                 "scaffold": Method(scaffold.build, scaffold.check)}


def check(config: ProcessConfig) -> None:
  """The ``--algorithm``'s check of ``config`` (`config.ProcessConfig` calls it on construction)."""
  ALGORITHMS[config.algorithm].check(config)


def fedex_client(config: ProcessConfig) -> fedex_space.FedExClient:
  """The k FedEx configurations, drawn around the centre (seed 002)."""
  fc, ccfg = config.fedex, config.client
  space = fc.space or fedex_space.SearchSpace()
  options = fc.options or fedex_space.FedExOptions(seed=config.seed)
  center = dict(fc.center) if fc.center else space.midpoint()
  if not fc.center:
    defaults = {"learning_rate": ccfg.lr, "batch_size": ccfg.batch_size, "prox_mu": ccfg.wd_mu,
                "local_steps": ccfg.local_steps, "local_epochs": ccfg.local_epochs}
    for name in space.names:
      spec = space.spec(name)
      value = defaults.get(name)
      if value is None:
        continue
      if isinstance(spec, tuple) and value in spec:
        center[name] = value
      elif isinstance(spec, fedex_space.Range) and spec.low <= value <= spec.high:
        center[name] = value
  configs = fedex_space.sample_configs(space, center, options.radius, options.k, options.seed)
  return fedex_space.FedExClient(space=space, options=options, configs=configs)


def components(ctx: BuildContext) -> Parts:
  """The client and server components of ``ctx.config``, in order."""
  cfg = ctx.config
  c, ah, rob = cfg.client, cfg.ah, cfg.robust
  fx = fedex_client(cfg) if cfg.fedex is not None else None
  client: list[Component] = []
  if c.rm_weight > 0:
    client.append(matching_client.RepresentationMatching(ctx.spec, c, cfg.seed,
                                                         persist=c.rm_client_state == "persist"))
  if c.er_h_min > 0:
    client.append(regularizers.EntropyTerm(c.er_h_min))
  if c.wd_mu > 0 or (fx is not None and fx.tunes("prox_mu")):
    client.append(regularizers.ProximalTerm())
  own_client, own_server = ALGORITHMS[cfg.algorithm].build(ctx)
  client += list(own_client)
  if fx is not None:
    client.append(fedex_lib.FedExSampling(fx))
  client_loss = ah is not None and ah.loss_source == "clients"
  if client_loss:
    client.append(server.PreTrainingLoss(ah.client_eval_batches, c.batch_size))
  if rob.byzantine_attack != "none":
    client.append(attacks.ByzantineAttack(rob.byzantine_attack, rob.byzantine_scale, rob.byzantine_sigma))
  policy = None if ah is None else server.AdaptiveHparams(
      ah, cfg.seed, None if client_loss else ctx.server_loss)
  fedex_part = None if fx is None else server.FedExServer(
      fx.options, len(fx.space.names) if fx.options.product_space else None)
  servers = [p for p in (policy, fedex_part) if p is not None] + list(own_server)  # state: ah, fedex, ...
  return Parts(client, servers, policy, fx)
