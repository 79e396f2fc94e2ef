"""What a method declares (`Method`), and what its builder is given (`BuildContext`).

A method is one module (or small sub-package) under `methods/` with one `Method`, listed once in
`registry.METHODS`. Its ``build`` returns its client components (`client.Component`) and server
components (`server.ServerComponent`); the process wires them (`registry.components`). Its
``check`` fails fast on a configuration it refuses; ``describe`` gives its part of the console's
``method`` line and of the run name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.client import Component
from tff_robust.algorithms.client_work import ModelSpec

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig
  from tff_robust.algorithms.server import ServerComponent


class BuildContext(NamedTuple):
  """What a method's components may need to know at build time."""

  spec: ModelSpec
  config: "ProcessConfig"
  trainable_specs: list[tf.TensorSpec]  # of w's trainable leaves
  num_clients: Optional[int]  # K, every client of the task (None: not known to the builder)
  server_val: Optional[tuple[np.ndarray, ...]]  # a server-held validation sample (`Method.server_val`)


class Built(NamedTuple):
  """A method's components: client ones in hook order, server ones in state order."""

  client: Sequence[Component] = ()
  server: Sequence["ServerComponent"] = ()


class Description(NamedTuple):
  """How a configuration that runs the method names it."""

  console: Optional[str] = None  # its part of the console's ``method`` line
  run_name: Optional[str] = None  # its part of the default run name


class Switch(NamedTuple):
  """A method turned on by a flag of its own, ``--<name>``, which fills `ProcessConfig.<name>`.

  ``text_flags``: its string flags besides its options' fields, ``(name, default, help)``.
  ``configure(options, text, on)``: its configuration, from ``options(cls, **given)`` (an
  options dataclass built from its flags), ``text`` (its string flags' values) and ``on`` (the
  names of the switched-on methods); raises ValueError naming the flag.
  """

  help: str
  configure: Callable[[Callable[..., Any], Mapping[str, str], frozenset], Any]
  text_flags: tuple[tuple[str, str, str], ...] = ()


def _nothing(config: "ProcessConfig") -> None:
  return None


def _any_model(config: "ProcessConfig", model_fn: Callable[[], Any]) -> None:
  return None


@dataclasses.dataclass(frozen=True)
class Method:
  """One method: when it runs, its check, its components and its description.

  ``by_name``: chosen with ``--algorithm=<name>`` (its ``runs`` is then ``config.algorithm ==
  name``); else it is turned on by its own options (``--rm_weight``, ``--ah``, ...).
  ``label``: named in the console's "no RM, AH or FedEx" when it is off.
  ``client_rank``: its client components run after the lower ranks' (registry order within a
  rank): FedEx's heavy-ball acts on the gradient the others made (1), AH's pre-evaluation (2).
  ``server_val``: the size of the server-held validation sample it needs (0: none).
  ``options``: the dataclasses whose `options.option` fields are its flags; ``switch``: the flag
  that turns it on, when it has one (`Switch`). Without a switch its options are held in
  ``ProcessConfig.methods`` and read as ``config.options_of(cls)`` (RM's weight > 0 turns RM on).
  ``check_model(config, model_fn)``: its check against the task's model, before any tracing
  (RM's matching layers).
  """

  name: str
  runs: Callable[["ProcessConfig"], bool]
  build: Callable[[BuildContext], Built] = lambda ctx: Built()
  check: Callable[["ProcessConfig"], None] = _nothing
  describe: Callable[["ProcessConfig"], Description] = lambda config: Description()
  by_name: bool = False
  label: str = ""
  client_rank: int = 0
  server_val: Callable[["ProcessConfig"], int] = lambda config: 0
  options: tuple[type, ...] = ()
  switch: Optional[Switch] = None
  check_model: Callable[["ProcessConfig", Callable[[], Any]], None] = _any_model
