"""Representation matching's client side (seed 000 §3.1, eqs. 1-2, Fig. 1b) as one client component.

A client trains w^i next to a frozen copy of the received w_t and its own matching layers θ^i
(`matching.RepresentationMatcher`); "θ^i and w^i are simultaneously trained": each step,
w^i takes its SGD step on CE + rm_weight · L_M^norm (+ the other components' terms), where
L_M^norm weights eq. 1's terms as ``rm_normalize`` says (`matching.normalized_matching_loss`);
θ^i takes an Adam step (learning rate ``rm_theta_lr``, moments started afresh each round and
never mixed with w's optimizer) on eq. 1's sum form. θ's step thus does not depend on the RM
weight or layer width, nor on the client lr unless ``rm_theta_lr_follows`` scales θ's rate with
the round's η_t (rm_theta_lr · η_t / client_lr).

With ``--rm_client_state=persist`` θ^i is per-client state (Algorithm 1 line 12): the driver
keeps it between the rounds a client is sampled in; a dropped round's θ^i is discarded with its
Δ^i (a NaN θ^i kept would drop that client in every later round). With ``reset`` every round
starts from the fresh θ.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import evaluation
from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.client import (Component, Forward, LocalResult, LocalRun, LossTerm, StateSpec,
                                          Step, TrainReport, all_finite)
from tff_robust.algorithms.methods.rm.options import RMConfig


def theta_specs(spec, seed: int, top_source: str = "logits", form: str = "authors") -> list[tf.TensorSpec]:
  """Shapes of the matching parameters θ for the model of ``spec`` (a `client_work.ModelSpec`)."""
  with tf.Graph().as_default():
    matcher = matching.RepresentationMatcher(spec.model_fn(), seed, top_source, form)
    return [tf.TensorSpec(v.shape, v.dtype) for v in matcher.theta]


def initial_theta(spec, seed: int, top_source: str = "logits", form: str = "authors") -> list[np.ndarray]:
  """Fresh θ for a client seen for the first time (deterministic for ``seed``)."""
  with tf.Graph().as_default():
    return matching.RepresentationMatcher(spec.model_fn(), seed, top_source, form).initial_theta()


class RMReport(NamedTuple):
  """Eq. 1's term j summed over the examples a client trained on, [M]."""

  terms: tf.Tensor


class _Built(NamedTuple):
  frozen: tf.keras.Model  # the received w_t, never trained
  matcher: matching.RepresentationMatcher  # θ^i
  slots: list  # θ's Adam state, a variable per leaf
  theta0: Optional[list]  # the fresh θ (reset: every round starts from it)


class _ThetaOptimizer(NamedTuple):
  optimizer: tff.learning.optimizers.Optimizer
  initial: Any  # its state at the start of every round


class RepresentationMatching(Component):
  """RM as a client component: its own forward pass (activations of both models), eq. 2's term,
  θ's Adam step, θ^i as per-client state when persisted, and eq. 1's terms as its report."""

  key = "rm"
  trains_own = True
  sums_over_loop = True

  def __init__(self, spec, config: RMConfig, client_lr: float, seed: int):
    """``config``: RM's options (θ^i persisted per client when ``config.persist``); ``client_lr``:
    the configured η_l (``--client_lr``) that ``theta_lr_follows`` divides by."""
    self.spec, self.config, self.client_lr, self.seed = spec, config, client_lr, seed
    self.persist = config.persist
    self._num_terms = None
    self.state = None
    if self.persist:
      args = (spec, seed, config.top_source, config.layers)
      self.state = StateSpec(tuple(theta_specs(*args)), lambda: initial_theta(*args))

  def _optimizer(self, matcher, client_lr) -> _ThetaOptimizer:
    """θ's Adam (lr ``rm_theta_lr``, or rm_theta_lr · η_t / client_lr when it follows the round's
    ``client_lr``) and its initial state (lr, betas, epsilon, step count, moments; all float32)."""
    cfg = self.config
    scale = tf.cast(client_lr, tf.float32) / self.client_lr if cfg.theta_lr_follows else 1.0
    opt = tff.learning.optimizers.build_adam(learning_rate=cfg.theta_lr * scale)
    return _ThetaOptimizer(opt, opt.initialize([tf.TensorSpec(v.shape, v.dtype) for v in matcher.theta]))

  def build(self, model: tf.keras.Model) -> _Built:
    cfg = self.config
    frozen = self.spec.model_fn()
    matcher = matching.RepresentationMatcher(model, self.seed, cfg.top_source, cfg.layers)
    self._num_terms = len(matcher.term_units)
    initial = self._optimizer(matcher, self.client_lr).initial
    slots = [tf.Variable(tf.cast(v, tf.float32), trainable=False) for v in tf.nest.flatten(initial)]
    theta0 = None if self.persist else [tf.identity(v) for v in matcher.theta]
    return _Built(frozen, matcher, slots, theta0)

  def zero_sums(self) -> tf.Tensor:
    return tf.zeros([self._num_terms])

  def before_loop(self, run: LocalRun) -> None:
    """The frozen copy ← w_t; θ^i ← the client's (persist) or the fresh one; θ's Adam afresh."""
    built = run.built[self.key]
    weights = run.broadcast.model
    evaluation.assign_weights(built.frozen, weights.trainable, weights.non_trainable)
    theta = run.state[self.key] if self.persist else built.theta0
    for var, value in zip(built.matcher.theta, theta):
      var.assign(value)
    opt = self._optimizer(built.matcher, run.hp.learning_rate)
    for slot, value in zip(built.slots, tf.nest.flatten(opt.initial)):
      slot.assign(tf.cast(value, tf.float32))
    run.scratch[self.key] = opt

  def forward(self, run: LocalRun, x) -> Forward:
    """Both models' activations of interest (the trainable one's max-pool argmaxes too)."""
    built = run.built[self.key]
    _, frozen_acts, _ = built.matcher.forward(built.frozen, x, training=False, record_argmax=False)
    logits, acts, argmax = built.matcher.forward(run.model, x, training=True, record_argmax=True)
    return Forward(logits, (acts, argmax, frozen_acts))

  def loss(self, run: LocalRun, x, y, fwd: Forward) -> LossTerm:
    """rm_weight · L_M^norm for w^i (eq. 2); eq. 1's sum for θ^i; the terms for the report."""
    built, cfg = run.built[self.key], self.config
    acts, argmax, frozen_acts = fwd.aux
    term_list = built.matcher.matching_terms(acts, argmax, frozen_acts)
    value = cfg.weight * matching.normalized_matching_loss(term_list, built.matcher.term_units,
                                                           cfg.normalize)
    terms = tf.stack(term_list)
    return LossTerm(value, sums=terms, own_loss=tf.reduce_sum(terms))

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    """θ^i's Adam step on eq. 1 (sum form), its own state; w^i's gradient unchanged."""
    built, opt = run.built[self.key], run.scratch[self.key]
    theta_grads = step.tape.gradient(step.term.own_loss, built.matcher.theta)
    state = tf.nest.pack_sequence_as(opt.initial, [s.read_value() for s in built.slots])
    state, new_theta = opt.optimizer.next(state, [tf.identity(v) for v in built.matcher.theta], theta_grads)
    for slot, value in zip(built.slots, tf.nest.flatten(state)):
      slot.assign(tf.cast(value, tf.float32))
    for var, value in zip(built.matcher.theta, new_theta):
      var.assign(value)
    return grads

  def after_loop(self, run: LocalRun, result: LocalResult) -> tuple[Optional[list], RMReport]:
    report = RMReport(result.kept(result.sums))
    if not self.persist:
      return None, report
    theta = [tf.identity(v) for v in run.built[self.key].matcher.theta]
    keep = tf.logical_and(result.finite, all_finite(theta))
    return [tf.where(keep, t, t0) for t, t0 in zip(theta, run.state[self.key])], report

  def metrics(self, report: RMReport, train: TrainReport) -> collections.OrderedDict:
    """Eq. 1 per example trained on: ``rm_loss`` and each layer's ``rm_loss_j``."""
    count = tf.maximum(train.count, 1.0)
    terms = tf.unstack(report.terms)
    out = collections.OrderedDict()
    if terms:
      out["rm_loss"] = tf.add_n(terms) / count
      for j, term in enumerate(terms):
        out[f"rm_loss_{j}"] = term / count
    return out
