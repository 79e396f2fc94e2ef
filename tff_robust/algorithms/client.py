"""The client side of a round, as small components with one interface (the mirror of `server`).

`client_work.ClientTrainer` runs local SGD on the task's loss and composes these inside the
client computation; a method's client half is one component, which answers:

  ``key``                           its entry in the client state, the report and the state store
  ``state``                         the per-client state it keeps (`StateSpec`: TFF type, initial value)
  ``needs``                         the optional parts of the client input it reads (`Needs`)
  ``build(model)``                  its variables, made once before the client update is traced
                                    (returned; the component reads them back as ``run.built[key]``)
  ``hparams(hp, broadcast, inputs, scratch)``  the client's SGD hyper-parameters
                                    (`round_protocol.ClientHparams`), adjusted (FedEx's c ~ θ)
  ``before_loop(run)``              before the local loop: load its state, reset its slots, pre-evaluate
  ``forward(run, x)``               w^i's forward pass when it needs one of its own (RM), else None
  ``loss(run, x, y, fwd)``          its term of w^i's local objective (`LossTerm`), or None
  ``gradients(run, grads, step)``   w^i's gradient transformed (SCAFFOLD, momentum); its own step
  ``after_loop(run, result)``       (its new state, its typed report) after the local loop
  ``outgoing(run, delta)``          the Δ^i sent (a byzantine client's attack)
  ``metrics(report, train)``        the server's view: round metrics from the summed reports

`Component` is the do-nothing base; a component overrides only what its method changes.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.client_input import Unpacked
from tff_robust.algorithms.round_protocol import Broadcast, ClientHparams


class StateSpec(NamedTuple):
  """Per-client state a component keeps across rounds (held by the driver's state store)."""

  specs: tuple[tf.TensorSpec, ...]  # its TFF type: one tensor per leaf
  initial: Callable[[], list[np.ndarray]]  # its value for a client seen for the first time


class Needs(NamedTuple):
  """The optional parts of the client input (`client_input.ClientInput`) a component reads."""

  val: bool = False  # the client's held-out validation examples
  seed: bool = False  # the client's own int64[2] seed
  byzantine: bool = False  # whether it misbehaves this round


class TrainReport(NamedTuple):
  """The trainer's own report: sums over one client's round (the server sums them over clients).
  A dropped (non-finite) client adds zeros and ``nonfinite`` = 1."""

  loss_sum: tf.Tensor  # Σ CE over the examples trained on
  correct: tf.Tensor
  predictions: tf.Tensor
  count: tf.Tensor  # examples trained on
  num_examples: tf.Tensor  # n_k
  val_loss_sum: tf.Tensor  # on the client's held-out validation examples
  val_correct: tf.Tensor
  val_predictions: tf.Tensor
  val_count: tf.Tensor
  nonfinite: tf.Tensor
  num_clients: tf.Tensor  # 1
  drift_sum: tf.Tensor  # ‖Δ^i‖
  lr_sum: tf.Tensor  # η the client trained with
  steps_sum: tf.Tensor  # SGD steps it took


class ClientOutput(NamedTuple):
  """What a client sends: Δ^i, its aggregation weight and its report (``train`` and one typed
  entry per reporting component, by key)."""

  delta: list
  weight: tf.Tensor
  report: collections.OrderedDict


class StatefulClientOutput(NamedTuple):
  """`ClientOutput` and the client's new state (by component key), which never leaves it."""

  delta: list
  weight: tf.Tensor
  report: collections.OrderedDict
  state: collections.OrderedDict


class LocalRun(NamedTuple):
  """What a component sees of one client's round (inside the traced client update)."""

  model: tf.keras.Model  # w^i
  loss_fn: tf.keras.losses.Loss
  hp: ClientHparams  # learning_rate, local_steps, batch_size, prox_mu, ...
  broadcast: Broadcast  # w_t, h_t and the server components' extras
  inputs: Unpacked
  initial: list  # w_t's trainable weights (w^i before the loop)
  state: Mapping[str, Any]  # the client state received, by component key
  built: Mapping[str, Any]  # what each component's `build` made, by key
  scratch: dict  # a component's tensors of this round, by key (e.g. RM's optimizer)


class Forward(NamedTuple):
  logits: tf.Tensor
  aux: Any = None  # what the component that made it needs again (RM's activations)


class LossTerm(NamedTuple):
  """A component's part of the local objective on one batch."""

  value: tf.Tensor  # added to w^i's objective
  sums: Optional[tf.Tensor] = None  # per-batch statistics, summed over the loop × batch size
  own_loss: Optional[tf.Tensor] = None  # what its own parameters descend (RM's eq. 1)


class Step(NamedTuple):
  """A component's view of one SGD step, in `gradients`."""

  tape: Optional[tf.GradientTape]  # recorded the objective (only when a component trains its own)
  term: Optional[LossTerm]  # its own term of this batch


class LocalResult(NamedTuple):
  """The local loop's outcome, as `after_loop` sees it."""

  delta: list  # w^i − w_t, before zeroing (check ``finite``)
  finite: tf.Tensor  # the update, its loss and its held-out loss are finite
  train: TrainReport  # already zeroed when not finite
  sums: Optional[tf.Tensor]  # this component's `LossTerm.sums` over the loop

  def kept(self, value):
    """``value`` where the round is kept, else zeros (`kept_if`)."""
    return kept_if(self.finite, value)


class Component:
  """A client-side component that changes nothing; subclasses override what they change."""

  key: str = ""
  state: Optional[StateSpec] = None
  needs: Needs = Needs()
  trains_own: bool = False  # its own parameters step on `LossTerm.own_loss` (needs `Step.tape`)
  sums_over_loop: bool = False  # its `LossTerm.sums` are summed over the loop (from `zero_sums`)

  def zero_sums(self) -> tf.Tensor:
    """The zero of its `LossTerm.sums` (only when ``sums_over_loop``)."""
    raise NotImplementedError

  def build(self, model: tf.keras.Model) -> Any:
    """Its variables (Keras models, slots), made once with w^i's model; None when it has none."""
    return None

  def hparams(self, hp: ClientHparams, broadcast: Broadcast, inputs: Unpacked,
              scratch: dict) -> ClientHparams:
    """The client's hyper-parameters as it changes them (``scratch``: what it keeps of this
    round for its other hooks, as ``run.scratch[key]``)."""
    return hp

  def before_loop(self, run: LocalRun) -> None:
    pass

  def forward(self, run: LocalRun, x) -> Optional[Forward]:
    return None

  def loss(self, run: LocalRun, x, y, fwd: Forward) -> Optional[LossTerm]:
    return None

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    return grads

  def after_loop(self, run: LocalRun, result: LocalResult) -> tuple[Any, Any]:
    """(its new client state or None, its report or None)."""
    return None, None

  def outgoing(self, run: LocalRun, delta: list) -> list:
    return delta

  def metrics(self, report, train: TrainReport) -> collections.OrderedDict:
    """Round metrics from its report summed over the round's clients (unprefixed names)."""
    return collections.OrderedDict()


def kept_if(finite: tf.Tensor, value):
  """``value`` where the client's round is kept (``finite``), else zeros: a dropped client adds
  nothing (NaN · 0 would still be NaN)."""
  return tf.where(finite, value, tf.zeros_like(value))


def all_finite(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
  return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


def stateful(components: Sequence[Component]) -> list[Component]:
  """The components that keep per-client state, in order."""
  return [c for c in components if c.state is not None]


def initial_state(components: Sequence[Component]) -> collections.OrderedDict:
  """The client state of a client seen for the first time: each stateful component's initial value."""
  return collections.OrderedDict((c.key, c.state.initial()) for c in stateful(components))


def state_specs(components: Sequence[Component]) -> Optional[collections.OrderedDict]:
  """The specs of the client state by component key; None when no component keeps any."""
  parts = stateful(components)
  if not parts:
    return None
  return collections.OrderedDict((c.key, tuple(c.state.specs)) for c in parts)
