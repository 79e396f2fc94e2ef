"""Local training on one client: SGD on the task's loss, composed with client components.

The client receives the global weights w_t with the round's learning rate and step count,
trains a copy w^i with K steps of SGD (Algorithm 2 of seed 004, CLIENTOPT = SGD) on the local
objective, and returns Δ^i = w^i − w_t with its aggregation weight and its report. Everything
a method adds — a term of the objective (RM, ER, the proximal term), a gradient correction
(SCAFFOLD, FedEx's heavy-ball), per-client state (RM's θ^i, SCAFFOLD's c_i), the client's
hyper-parameters (FedEx's c ~ θ), a pre-evaluation (AH) or an attack — is a `client.Component`;
the trainer calls their hooks in order. A client whose update or loss is not finite returns a
zero delta with weight 0, so it never reaches the global model, and its components keep the
state they received.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import evaluation
from tff_robust.algorithms.client import (ClientOutput, Component, Forward, LocalResult, LocalRun,
                                          StatefulClientOutput, Step, TrainReport, all_finite,
                                          kept_if)
from tff_robust.algorithms import client as client_lib
from tff_robust.algorithms import round_protocol
from tff_robust.algorithms.client_input import ClientInput, Unpacked
from tff_robust.algorithms.round_protocol import Broadcast, ClientHparams
from tff_robust.algorithms.config import ClientConfig
from tff_robust.tasks.base import AccuracyFn


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The pieces of a task the computations need (no data)."""

  model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  accuracy_fn: Optional[AccuracyFn]
  element_spec: object  # of one unbatched (x, y) example


def _weighting(kind: str, num_examples, train_acc, val_acc):
  if kind == "num_examples":
    return num_examples
  if kind == "uniform":
    return tf.constant(1.0)
  if kind == "val_accuracy":
    return val_acc
  if kind == "train_accuracy":
    return train_acc
  raise ValueError(f"--weighting={kind!r} is not valid")


class _Models(NamedTuple):
  """The Keras objects a client computation trains with."""

  model: tf.keras.Model  # w^i
  loss_fn: tf.keras.losses.Loss
  built: dict  # each component's variables, by key


class _LoopSums(NamedTuple):
  """Sums over the examples trained on (CE, accuracy counts, examples), the SGD steps taken and
  the components' `LossTerm.sums` (of those that sum something, in order)."""

  loss_sum: tf.Tensor
  correct: tf.Tensor
  predictions: tf.Tensor
  count: tf.Tensor
  steps: tf.Tensor
  parts: tuple


class ClientTrainer:
  """Builds the client computation for one task, client configuration and components.

  ``components`` (`client.Component`, in order) add to the local objective, transform the
  gradient, keep per-client state and report; ``has_val``: the client input carries held-out
  validation data even when no component needs it (``--weighting=val_accuracy``).
  """

  def __init__(self, spec: ModelSpec, config: ClientConfig, weighting: str,
               components: Sequence[Component] = (), *, has_val: bool = False):
    keys = [c.key for c in components]
    if len(set(keys)) != len(keys):
      raise ValueError(f"client components need distinct keys; got {keys}")
    self.spec = spec
    self.config = config
    self.weighting = weighting
    self.components = tuple(components)
    self.has_val = has_val or any(c.needs.val for c in components)
    self._summing = [i for i, c in enumerate(self.components) if c.sums_over_loop]

  def component(self, key: str) -> Optional[Component]:
    """The component of ``key``, or None."""
    return next((c for c in self.components if c.key == key), None)

  @property
  def stateful(self) -> bool:
    """Whether some component keeps per-client state (the driver then holds it)."""
    return bool(client_lib.stateful(self.components))

  @functools.cached_property
  def input(self) -> ClientInput:
    """This configuration's client input: its TFF type, packing and unpacking."""
    specs = client_lib.state_specs(self.components)
    return ClientInput(self.spec.element_spec, has_val=self.has_val,
                       has_seed=any(c.needs.seed for c in self.components),
                       has_byzantine=any(c.needs.byzantine for c in self.components),
                       state_specs=tuple(specs.items()) if specs is not None else None)

  def initial_state(self) -> Optional[collections.OrderedDict]:
    """The client state of a client seen for the first time (None: no component keeps any)."""
    return client_lib.initial_state(self.components) if self.stateful else None

  def input_type(self):
    """The client-placed input: a dataset, or a struct (data, val, seed, byzantine, state)."""
    return self.input.type

  def build(self, broadcast_type) -> tff.Computation:
    """``(broadcast, client_input) -> ClientOutput`` (`StatefulClientOutput` with client state);
    ``broadcast_type`` is the TFF type of the round's `round_protocol.Broadcast`."""

    @tff.tensorflow.computation(broadcast_type, self.input_type())
    def client_update(broadcast, client_input):
      return self._update(self._models(), broadcast, self.input.unpack(client_input))

    return client_update

  def local_trainer(self) -> Callable[..., Any]:
    """The client's local training outside TFF: ``fn(broadcast, data, val, state, seed)`` returns
    what a client would send (`ClientOutput`) for a `round_protocol.Broadcast`. Models are built once; wrap the call in a
    ``tf.function`` to trace it once (used for seed 002's "refine" evaluation)."""
    models = self._models()

    def fn(broadcast, data, val=None, state=None, seed=None):
      honest = tf.constant(False) if self.input.has_byzantine else None
      return self._update(models, broadcast, Unpacked(data, val, seed, honest, state))

    return fn

  def _models(self) -> _Models:
    model = self.spec.model_fn()  # made here, once, so a traced client update creates no variable
    built = {c.key: c.build(model) for c in self.components}
    return _Models(model, self.spec.loss_fn(), built)

  def _hparams(self, broadcast: Broadcast, inputs: Unpacked, scratch: dict) -> ClientHparams:
    """The client's SGD hyper-parameters: h_t and the configuration's other values, then as each
    component adjusts them (the proximal term's μ, FedEx's configuration c ~ θ)."""
    cfg = self.config
    hp = round_protocol.initial_client_hparams(broadcast.hparams, local_epochs=cfg.local_epochs,
                                               batch_size=cfg.batch_size, prox_mu=0.0)
    for c in self.components:
      hp = c.hparams(hp, broadcast, inputs, scratch)
    return hp

  def _update(self, models: _Models, broadcast, inputs: Unpacked):
    """One client's round: w^i ← w_t, the components' before-loop work, the local steps, the
    held-out evaluation, then the report."""
    cfg = self.config
    model = models.model
    weights = broadcast.model
    scratch: dict = {}
    hp = self._hparams(broadcast, inputs, scratch)

    @tf.function
    def run(data, val, state):
      evaluation.assign_weights(model, weights.trainable, weights.non_trainable)
      initial = [tf.identity(v) for v in model.trainable_variables]
      local = LocalRun(model, models.loss_fn, hp, broadcast, inputs._replace(data=data, val=val, state=state),
                       initial, state if state is not None else {}, models.built, dict(scratch))
      for c in self.components:
        c.before_loop(local)
      num_examples = evaluation.count_examples(data)  # not a pass over the data when known
      batch = tf.cast(hp.batch_size, tf.int64)
      if cfg.local_steps > 0:
        batches = data.repeat().batch(batch).take(tf.cast(hp.local_steps, tf.int64))
      else:
        batches = data.repeat(tf.cast(hp.local_epochs, tf.int64)).batch(batch)
      sums = self._train(local, batches)
      zero = tf.constant(0.0)
      val_sums = (zero, zero, zero, zero)
      if val is not None:
        val_sums = evaluation.evaluate(model, val.batch(max(cfg.batch_size, 64)), models.loss_fn,
                                       self.spec.accuracy_fn)
      return self._report(local, num_examples, sums, val_sums)

    return run(inputs.data, inputs.val, inputs.state)

  def _forward(self, run: LocalRun, x) -> Forward:
    """The first component's own forward pass (RM's, recording activations), else the model's."""
    for c in self.components:
      fwd = c.forward(run, x)
      if fwd is not None:
        return fwd
    return Forward(run.model(x, training=True))

  def _train(self, run: LocalRun, batches: tf.data.Dataset) -> _LoopSums:
    """The local loop: per batch, w^i's objective (CE + the components' terms), its gradient as
    the components transform it, and an SGD step w^i ← w^i − η g."""
    comps = self.components
    train_vars = run.model.trainable_variables
    own = any(c.trains_own for c in comps)
    acc_fn = self.spec.accuracy_fn

    def sgd_step(x, y):
      with (tf.GradientTape() if own else contextlib.nullcontext()) as own_tape:
        with tf.GradientTape() as tape:
          fwd = self._forward(run, x)
          task_loss = run.loss_fn(y, fwd.logits)
          total = task_loss
          terms = [c.loss(run, x, y, fwd) for c in comps]
          for term in terms:
            if term is not None:
              total += term.value
      grads = tape.gradient(total, train_vars)
      grads = [tf.zeros_like(v) if g is None else g for v, g in zip(train_vars, grads)]
      for c, term in zip(comps, terms):
        grads = c.gradients(run, grads, Step(own_tape, term))
      for var, grad in zip(train_vars, grads):
        var.assign_sub(run.hp.learning_rate * grad)
      return task_loss, fwd.logits, terms

    def accumulate(flat: tuple, batch) -> tuple:  # a flat tuple: (the five sums, *parts)
      sums = _LoopSums(*flat[:5], flat[5:])
      x, y = batch
      task_loss, logits, terms = sgd_step(x, y)
      n = tf.cast(tf.shape(logits)[0], tf.float32)
      c, p = acc_fn(y, logits) if acc_fn is not None else (0.0, 0.0)
      parts = tuple(s + terms[i].sums * n for s, i in zip(sums.parts, self._summing))
      return (sums.loss_sum + task_loss * n, sums.correct + c, sums.predictions + p,
              sums.count + n, sums.steps + 1.0) + parts

    # `Dataset.reduce`, as TFF's client loop: a `for` over the batches cost more (performance.md)
    zero = tf.constant(0.0)
    flat = batches.reduce((zero,) * 5 + tuple(comps[i].zero_sums() for i in self._summing), accumulate)
    return _LoopSums(*flat[:5], tuple(flat[5:]))

  def _report(self, run: LocalRun, num_examples, sums: _LoopSums, val_sums: tuple):
    """What the client sends: Δ^i and its aggregation weight (zeros, and ``nonfinite``, when the
    update, its loss or its held-out loss is not finite), the reports, and the new client state
    (each component keeps what it received when the round is dropped)."""
    val_loss, val_correct, val_predictions, val_count = val_sums
    delta = [v - w for v, w in zip(run.model.trainable_variables, run.initial)]
    finite = tf.logical_and(all_finite(delta), tf.math.is_finite(sums.loss_sum))
    finite = tf.logical_and(finite, tf.math.is_finite(val_loss))  # a diverged update fails here too
    train_acc = tf.math.divide_no_nan(sums.correct, sums.predictions)
    val_acc = tf.math.divide_no_nan(val_correct, val_predictions)

    kept = functools.partial(kept_if, finite)
    weight = kept(tf.cast(_weighting(self.weighting, num_examples, train_acc, val_acc), tf.float32))
    outgoing = [kept(d) for d in delta]
    for c in self.components:  # a byzantine client replaces its honest update (seed 003 faults)
      outgoing = c.outgoing(run, outgoing)
    train = TrainReport(
        loss_sum=kept(sums.loss_sum), correct=kept(sums.correct), predictions=kept(sums.predictions),
        count=kept(sums.count), num_examples=num_examples, val_loss_sum=kept(val_loss),
        val_correct=kept(val_correct), val_predictions=kept(val_predictions), val_count=kept(val_count),
        nonfinite=1.0 - tf.cast(finite, tf.float32), num_clients=tf.constant(1.0),
        drift_sum=kept(tf.linalg.global_norm(outgoing)),
        lr_sum=tf.cast(run.hp.learning_rate, tf.float32), steps_sum=sums.steps)
    report = collections.OrderedDict(train=train)
    state = collections.OrderedDict()
    loop_sums = dict(zip(self._summing, sums.parts))
    for i, c in enumerate(self.components):
      new_state, part = c.after_loop(run, LocalResult(delta, finite, train, loop_sums.get(i)))
      if part is not None:
        report[c.key] = part
      if c.state is not None:
        state[c.key] = new_state
    if state:
      return StatefulClientOutput(outgoing, weight, report, state)
    return ClientOutput(outgoing, weight, report)
