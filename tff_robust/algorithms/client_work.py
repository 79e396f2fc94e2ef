"""Local training on one client: SGD on CE + RM + ER + WD (eqs. 1, 2, 8 of seed 000).

The client receives the global weights w_t with the round's learning rate and
step count, trains a copy w^i (and, with representation matching, its own
matching parameters θ^i against a frozen copy of w_t), and returns the delta
Δ^i = w^i − w_t with its aggregation weight and metric *sums*. A client whose
update or loss is not finite returns a zero delta with weight 0, so it never
reaches the global model, and the θ^i it received, so its persisted state stays finite.

With RM, each step has two parts (seed 000 Fig. 1b: "θ^i and w^i are
simultaneously trained"): w^i takes an SGD step on
CE + rm_weight · L_M^norm (+ ER, WD), where L_M^norm weights eq. 1's terms as
``rm_normalize`` says (`matching.normalized_matching_loss`); θ^i takes an Adam
step (learning rate ``rm_theta_lr``, moments started afresh each round and never
mixed with w's optimizer) on eq. 1's sum form. θ's step thus does not depend on
the RM weight or layer width, nor on the client lr unless ``rm_theta_lr_follows`` scales
θ's rate with the round's η_t (rm_theta_lr · η_t / client_lr).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import attacks
from tff_robust.algorithms import evaluation
from tff_robust.algorithms import fedex as fedex_lib
from tff_robust.algorithms import fedex_space
from tff_robust.algorithms import matching
from tff_robust.algorithms import regularizers
from tff_robust.algorithms.client_input import ClientInput, Unpacked
from tff_robust.algorithms.config import ClientConfig
from tff_robust.tasks.base import AccuracyFn

METRIC_KEYS = ("loss_sum", "correct", "predictions", "count", "num_examples", "val_loss_sum",
               "val_correct", "val_predictions", "val_count", "pre_loss_sum", "pre_count",
               "nonfinite", "num_clients", "drift_sum", "lr_sum", "steps_sum")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The pieces of a task the computations need (no data)."""

  model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  accuracy_fn: Optional[AccuracyFn]
  element_spec: object  # of one unbatched (x, y) example


def _batched_spec(element_spec):
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec([None] + list(s.shape), s.dtype), element_spec)


def theta_specs(spec: ModelSpec, seed: int, top_source: str = "logits",
                form: str = "authors") -> list[tf.TensorSpec]:
  """Shapes of the matching parameters θ for this task's model."""
  with tf.Graph().as_default():
    matcher = matching.RepresentationMatcher(spec.model_fn(), seed, top_source, form)
    return [tf.TensorSpec(v.shape, v.dtype) for v in matcher.theta]


def initial_theta(spec: ModelSpec, seed: int, top_source: str = "logits",
                  form: str = "authors") -> list[np.ndarray]:
  """Fresh θ for a client seen for the first time (deterministic for ``seed``)."""
  with tf.Graph().as_default():
    return matching.RepresentationMatcher(spec.model_fn(), seed, top_source, form).initial_theta()


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


def _all_finite(tensors) -> tf.Tensor:
  return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


class _Models(NamedTuple):
  """The Keras objects a client computation trains with."""

  model: tf.keras.Model  # w^i
  frozen: Optional[tf.keras.Model]  # the received w_t, never trained (RM only)
  matcher: Optional[matching.RepresentationMatcher]  # θ^i (RM only)
  loss_fn: tf.keras.losses.Loss
  velocity: list  # heavy-ball buffers (FedEx tunes momentum), else []
  theta_slots: list  # θ's Adam state, a variable per leaf (RM only), else []


class _ThetaOptimizer(NamedTuple):
  optimizer: Optional[tff.learning.optimizers.Optimizer]
  initial: object  # its state at the start of every round
  slots: list  # variables holding the state's leaves (made once, with the models)


class _TrainSums(NamedTuple):
  """Sums over the examples trained on: CE, accuracy counts, examples, eq. 1's terms [M]; and
  the number of SGD steps taken."""

  loss_sum: tf.Tensor
  correct: tf.Tensor
  predictions: tf.Tensor
  count: tf.Tensor
  rm_sums: tf.Tensor
  steps: tf.Tensor


class Objective(NamedTuple):
  total: tf.Tensor  # w^i's objective
  task_loss: tf.Tensor  # CE
  logits: tf.Tensor
  terms: tf.Tensor  # eq. 1's terms [M]; θ^i minimises their sum (zero-length without RM)


def local_objective(models: _Models, config: ClientConfig, prox_mu: Optional[tf.Tensor],
                    initial: list, x, y) -> Objective:
  """w^i's objective on one batch: CE + rm_weight · L_M^norm (eq. 2, eq. 1's terms weighted
  as ``rm_normalize`` says) + ER (eq. 8) + μ/2 ‖w^i − w_t‖² (WD); and eq. 1's terms."""
  model, matcher = models.model, models.matcher
  terms = tf.zeros([0])
  if matcher is not None:
    _, frozen_acts, _ = matcher.forward(models.frozen, x, training=False, record_argmax=False)
    logits, acts, argmax = matcher.forward(model, x, training=True, record_argmax=True)
    term_list = matcher.matching_terms(acts, argmax, frozen_acts)
    terms = tf.stack(term_list)
  else:
    logits = model(x, training=True)
  task_loss = models.loss_fn(y, logits)
  total = task_loss
  if matcher is not None:
    total += config.rm_weight * matching.normalized_matching_loss(term_list, matcher.term_units,
                                                                  config.rm_normalize)
  if config.er_h_min > 0:
    total += regularizers.entropy_regularizer(logits, config.er_h_min)
  if prox_mu is not None:
    total += prox_mu * regularizers.weight_divergence(model.trainable_variables, initial)
  return Objective(total, task_loss, logits, terms)


class ClientTrainer:
  """Builds the client computation for one task and configuration.

  ``has_val``: the client input carries a held-out validation dataset.
  ``theta_in``: the client input carries its persisted θ and returns it
  updated (``--rm_client_state=persist``); otherwise θ starts fresh each round.
  ``pre_eval_batches``: evaluate the received model on that many batches before
  training (the client-side loss source of seed 000 §3.3).
  """

  def __init__(self, spec: ModelSpec, config: ClientConfig, weighting: str, *,
               has_val: bool, theta_in: bool, pre_eval_batches: int = 0, seed: int = 0,
               fedex: Optional[fedex_space.FedExClient] = None, attack: Optional[tuple] = None):
    self.spec = spec
    self.config = config
    self.weighting = weighting
    self.has_val = has_val
    self.uses_rm = config.rm_weight > 0
    self.theta_in = theta_in and self.uses_rm
    self.pre_eval_batches = pre_eval_batches
    self.seed = seed
    self.fedex = fedex
    self.attack = attack  # (kind, scale, sigma) of byzantine clients, or None
    self.has_seed = fedex is not None or attack is not None
    if fedex is not None:
      self.has_val = True

  @functools.cached_property
  def input(self) -> ClientInput:
    """This configuration's client input: its TFF type, packing and unpacking."""
    return ClientInput(self.spec.element_spec, has_val=self.has_val, has_seed=self.has_seed,
                       has_byzantine=self.attack is not None,
                       theta_specs=tuple(theta_specs(self.spec, self.seed, self.config.rm_top_source,
                                                     self.config.rm_layers))
                       if self.theta_in else None)

  def initial_theta(self) -> list[np.ndarray]:
    """θ^i of a client seen for the first time (RM only)."""
    return initial_theta(self.spec, self.seed, self.config.rm_top_source, self.config.rm_layers)

  def input_type(self):
    """The client-placed input: a dataset, or a struct (data, val, seed, byzantine, theta)."""
    return self.input.type

  def build(self, broadcast_type) -> tff.Computation:
    """``(broadcast, client_input) -> OrderedDict(delta, weight, metrics[, theta])``."""

    @tff.tensorflow.computation(broadcast_type, self.input_type())
    def client_update(broadcast, client_input):
      return self._update(self._models(), broadcast, self.input.unpack(client_input))

    return client_update

  def local_trainer(self) -> Callable[..., collections.OrderedDict]:
    """The client's local training outside TFF: ``fn(broadcast, data, val, theta, seed)`` returns
    what a client would send (``delta``, ``weight``, ``metrics``). Models are built once; wrap the
    call in a ``tf.function`` to trace it once (used for seed 002's "refine" evaluation)."""
    models = self._models()

    def fn(broadcast, data, val=None, theta=None, seed=None):
      honest = tf.constant(False) if self.attack is not None else None
      return self._update(models, broadcast, Unpacked(data, val, seed, honest, theta))

    return fn

  def _models(self) -> _Models:
    model = self.spec.model_fn()
    frozen = self.spec.model_fn() if self.uses_rm else None
    matcher = (matching.RepresentationMatcher(model, self.seed, self.config.rm_top_source,
                                              self.config.rm_layers)
               if self.uses_rm else None)
    slots = []
    if matcher is not None:  # made once here, so a traced client update creates no variable
      initial = self._theta_optimizer(matcher, self.config.lr, []).initial
      slots = [tf.Variable(tf.cast(v, tf.float32), trainable=False) for v in tf.nest.flatten(initial)]
    return _Models(model, frozen, matcher, self.spec.loss_fn(),
                   self._velocity(model.trainable_variables), slots)

  def _hparams(self, broadcast, seed):
    """The client's SGD hyper-parameters as tensors: the round's lr and steps and the
    config's other values, overridden by the client's FedEx configuration c ~ θ."""
    cfg = self.config
    hp = {"learning_rate": broadcast["lr"], "local_steps": broadcast["steps"],
          "local_epochs": tf.constant(cfg.local_epochs, tf.int32),
          "batch_size": tf.constant(cfg.batch_size, tf.int32),
          "momentum": tf.constant(0.0), "weight_decay": tf.constant(0.0),
          "prox_mu": tf.constant(cfg.wd_mu, tf.float32)}
    index = None
    if self.fedex is not None:
      fx = self.fedex
      index = fedex_lib.effective_index(broadcast["fedex_theta"], fx.options.entropy_cutoff, seed)
      names = fx.space.names if fx.options.product_space else None
      for name, value in fedex_lib.gather_config(fx.configs, index, names).items():
        hp[name] = tf.cast(value, hp[name].dtype)
    return hp, index

  def _theta_optimizer(self, matcher, client_lr, slots: list) -> _ThetaOptimizer:
    """θ's own optimizer (Adam, lr ``rm_theta_lr``, or rm_theta_lr · η_t / client_lr when it
    follows the round's ``client_lr``), its initial state, and the ``slots`` holding the state's
    leaves (lr, betas, epsilon, step count, moments; all float32)."""
    if matcher is None:
      return _ThetaOptimizer(None, None, [])
    cfg = self.config
    scale = tf.cast(client_lr, tf.float32) / cfg.lr if cfg.rm_theta_lr_follows else 1.0
    opt = tff.learning.optimizers.build_adam(learning_rate=cfg.rm_theta_lr * scale)
    initial = opt.initialize([tf.TensorSpec(v.shape, v.dtype) for v in matcher.theta])
    return _ThetaOptimizer(opt, initial, slots)

  def _velocity(self, train_vars: list[tf.Variable]) -> list[tf.Variable]:
    """Heavy-ball buffers, one per trained variable (only when FedEx tunes momentum)."""
    if self.fedex is None or not self.fedex.tunes("momentum"):
      return []
    return [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in train_vars]

  def _update(self, models: _Models, broadcast, inputs: Unpacked) -> collections.OrderedDict:
    """One client's round: w^i ← w_t (and θ^i), the pre-training loss (AH's client source),
    the local steps, the held-out evaluation, then the report."""
    cfg = self.config
    model, matcher = models.model, models.matcher
    weights = broadcast["model"]
    hp, fedex_index = self._hparams(broadcast, inputs.seed)
    theta_opt = self._theta_optimizer(matcher, hp["learning_rate"], models.theta_slots)

    @tf.function
    def run(data, val, theta):
      evaluation.assign_weights(model, weights.trainable, weights.non_trainable)
      if models.frozen is not None:
        evaluation.assign_weights(models.frozen, weights.trainable, weights.non_trainable)
      if theta is not None:
        for var, value in zip(matcher.theta, theta):
          var.assign(value)
      initial = [tf.identity(v) for v in model.trainable_variables]
      zero = tf.constant(0.0)

      pre_loss, pre_count = zero, zero
      if self.pre_eval_batches > 0:
        pre_loss, _, _, pre_count = evaluation.evaluate(
            model, data.batch(cfg.batch_size).take(self.pre_eval_batches), models.loss_fn, None)

      num_examples = evaluation.count_examples(data)  # not a pass over the data when known
      batch = tf.cast(hp["batch_size"], tf.int64)
      if cfg.local_steps > 0:
        batches = data.repeat().batch(batch).take(tf.cast(hp["local_steps"], tf.int64))
      else:
        batches = data.repeat(tf.cast(hp["local_epochs"], tf.int64)).batch(batch)
      sums = self._train(models, hp, batches, initial, theta_opt)

      val_sums = (zero, zero, zero, zero)
      if val is not None:
        val_sums = evaluation.evaluate(model, val.batch(max(cfg.batch_size, 64)), models.loss_fn,
                                       self.spec.accuracy_fn)
      return self._report(models, initial, num_examples, (pre_loss, pre_count), sums, val_sums,
                          inputs, hp, fedex_index)

    return run(inputs.data, inputs.val, inputs.theta)

  def _train(self, models: _Models, hp: dict, batches: tf.data.Dataset, initial: list,
             theta_opt: _ThetaOptimizer) -> _TrainSums:
    """The local loop: per batch, an SGD step of w^i on the local objective (heavy-ball and
    weight decay when FedEx tunes them) and, with RM, an Adam step of θ^i on eq. 1."""
    cfg, fx = self.config, self.fedex
    model, matcher = models.model, models.matcher
    train_vars = model.trainable_variables
    uses_momentum = fx is not None and fx.tunes("momentum")
    uses_decay = fx is not None and fx.tunes("weight_decay")
    uses_prox = cfg.wd_mu > 0 or (fx is not None and fx.tunes("prox_mu"))
    prox_mu = hp["prox_mu"] if uses_prox else None
    units = matcher.term_units if matcher is not None else ()
    acc_fn = self.spec.accuracy_fn

    for m in models.velocity:
      m.assign(tf.zeros_like(m))
    for slot, value in zip(theta_opt.slots, tf.nest.flatten(theta_opt.initial)):
      slot.assign(tf.cast(value, tf.float32))  # θ's optimizer starts afresh each round

    def sgd_step(x, y) -> Objective:
      with tf.GradientTape() as theta_tape:
        with tf.GradientTape() as tape:
          objective = local_objective(models, cfg, prox_mu, initial, x, y)
        theta_loss = tf.reduce_sum(objective.terms)  # eq. 1 as printed
      grads = tape.gradient(objective.total, train_vars)
      grads = [tf.zeros_like(v) if g is None else g for v, g in zip(train_vars, grads)]
      if matcher is not None:  # θ^i: Adam on eq. 1 (sum form), its own state
        theta_grads = theta_tape.gradient(theta_loss, matcher.theta)
        state = tf.nest.pack_sequence_as(theta_opt.initial, [s.read_value() for s in theta_opt.slots])
        state, new_theta = theta_opt.optimizer.next(state, [tf.identity(v) for v in matcher.theta],
                                                    theta_grads)
        for slot, value in zip(theta_opt.slots, tf.nest.flatten(state)):
          slot.assign(tf.cast(value, tf.float32))
        for var, value in zip(matcher.theta, new_theta):
          var.assign(value)
      if uses_decay:
        grads = [g + hp["weight_decay"] * v for g, v in zip(grads, train_vars)]
      if uses_momentum:  # heavy-ball SGD: v <- μ v + g ; w <- w - η v
        grads = [m.assign(hp["momentum"] * m + g) for m, g in zip(models.velocity, grads)]
      for var, grad in zip(train_vars, grads):
        var.assign_sub(hp["learning_rate"] * grad)
      return objective

    def accumulate(sums: _TrainSums, batch) -> _TrainSums:
      x, y = batch
      objective = sgd_step(x, y)
      n = tf.cast(tf.shape(objective.logits)[0], tf.float32)
      c, p = acc_fn(y, objective.logits) if acc_fn is not None else (0.0, 0.0)
      return _TrainSums(sums.loss_sum + objective.task_loss * n, sums.correct + c,
                        sums.predictions + p, sums.count + n, sums.rm_sums + objective.terms * n,
                        sums.steps + 1.0)

    # `Dataset.reduce`, as TFF's client loop: a `for` over the batches cost more (performance.md)
    zero = tf.constant(0.0)
    return batches.reduce(_TrainSums(zero, zero, zero, zero, tf.zeros([len(units)]), zero),
                          accumulate)

  def _report(self, models: _Models, initial: list, num_examples, pre: tuple, sums: _TrainSums,
              val_sums: tuple, inputs: Unpacked, hp: dict, fedex_index) -> collections.OrderedDict:
    """What the client sends: Δ^i = w^i − w_t and its aggregation weight (zeros, and the
    ``nonfinite`` flag, when the update, its loss or its held-out loss is not finite), the
    metric sums, θ^i when it persists (the received θ^i when the round was dropped: a NaN θ^i
    kept would drop that client in every later round), and FedEx's sums."""
    model, matcher = models.model, models.matcher
    val_loss, val_correct, val_predictions, val_count = val_sums
    delta = [v - w for v, w in zip(model.trainable_variables, initial)]
    finite = tf.logical_and(_all_finite(delta), tf.math.is_finite(sums.loss_sum))
    finite = tf.logical_and(finite, tf.math.is_finite(val_loss))  # a diverged update fails here too
    train_acc = tf.math.divide_no_nan(sums.correct, sums.predictions)
    val_acc = tf.math.divide_no_nan(val_correct, val_predictions)

    def kept(value):  # a dropped client adds zeros (NaN * 0 would still be NaN)
      return tf.where(finite, value, tf.zeros_like(value))

    weight = kept(tf.cast(_weighting(self.weighting, num_examples, train_acc, val_acc), tf.float32))
    delta = [kept(d) for d in delta]
    if self.attack is not None:  # a byzantine client replaces its honest update (seed 003 faults)
      kind, scale, sigma = self.attack
      noise_seed = tf.bitwise.bitwise_xor(inputs.seed[0], inputs.seed[1])
      delta = attacks.maybe_attack(kind, delta, inputs.byzantine, noise_seed, scale=scale, sigma=sigma)
    metrics = collections.OrderedDict(
        loss_sum=kept(sums.loss_sum), correct=kept(sums.correct), predictions=kept(sums.predictions),
        count=kept(sums.count), num_examples=num_examples, val_loss_sum=kept(val_loss),
        val_correct=kept(val_correct), val_predictions=kept(val_predictions),
        val_count=kept(val_count),
        pre_loss_sum=pre[0], pre_count=pre[1],
        nonfinite=1.0 - tf.cast(finite, tf.float32), num_clients=tf.constant(1.0),
        drift_sum=kept(tf.linalg.global_norm(delta)),
        lr_sum=tf.cast(hp["learning_rate"], tf.float32), steps_sum=sums.steps)
    for j in range(len(matcher.term_units) if matcher is not None else 0):  # eq. 1's term j, summed
      metrics[f"rm_term{j}_sum"] = kept(sums.rm_sums[j])
    out = collections.OrderedDict(delta=delta, weight=weight, metrics=metrics)
    if self.theta_in:  # a dropped round's θ^i is discarded with its Δ^i: the client keeps its last θ
      theta = [tf.identity(v) for v in matcher.theta]
      keep = tf.logical_and(finite, _all_finite(theta))
      out["theta"] = [tf.where(keep, t, t0) for t, t0 in zip(theta, inputs.theta)]
    if self.fedex is not None:  # (|V| L onehot(c), |V| onehot(c), |V|) for seed 002's update
      if self.fedex.options.objective == "error":
        mean_val = kept(1.0 - val_acc)
      else:
        mean_val = kept(tf.math.divide_no_nan(val_loss, val_count))
      s_loss, s_count, s_total = fedex_lib.client_sums(fedex_index, mean_val, kept(val_count),
                                                       self.fedex.k)
      metrics["fedex_loss"], metrics["fedex_count"], metrics["fedex_total"] = s_loss, s_count, s_total
    return out
