"""AH's two halves (seed 000 §3.2-3.3): the policy ψ on the server (`AdaptiveHparams`, the
round's `server.HparamSource`: h_t ~ P(·|ψ_t), eq. 7's update from r_t) and, when L_t comes from
the clients, their pre-evaluation of w_t (`PreTrainingLoss`); L(w) on the server's validation
sample for the first scheme (`server_loss_fn`)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import evaluation
from tff_robust.algorithms import server_state
from tff_robust.algorithms.client import Component, LocalResult, LocalRun
from tff_robust.algorithms.client_work import ModelSpec
from tff_robust.algorithms.methods.ah import hparam_grid
from tff_robust.algorithms.methods.ah import reinforce
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.server import Round

ModelWeights = tff.learning.models.ModelWeights
LossFn = Callable[[ModelWeights], tf.Tensor]
KEY = "ah"


def server_loss_fn(spec: ModelSpec, server_val: tuple[np.ndarray, ...]) -> LossFn:
  """L(w) on the server-held validation set (seed 000 §3.3, first scheme), for TF computations."""

  def server_loss(weights) -> tf.Tensor:
    model, loss_fn = spec.model_fn(), spec.loss_fn()

    @tf.function  # orders the weight assignment before the evaluation
    def run(trainable, non_trainable):
      evaluation.assign_weights(model, trainable, non_trainable)
      data = tf.data.Dataset.from_tensor_slices(server_val).batch(256)
      loss_sum, _, _, count = evaluation.evaluate(model, data, loss_fn, None)
      return loss_sum / tf.maximum(count, 1.0)

    return run(list(weights.trainable), list(weights.non_trainable))

  return server_loss


class SampledHparams(NamedTuple):
  """h_t ~ P(·|ψ_t) from the AH policy, with the policy state that drew it."""

  lr: tf.Tensor  # float32
  steps: tf.Tensor  # int32
  sample: reinforce.PolicyState  # ψ_t with h_t's grid index and score (what eq. 7 scores)



class AdaptiveHparams:
  """The AH policy ψ = (μ, A) (seed 000 §3.2): h_t ~ P(·|ψ_t), eq. 7's update from r_t.

  ``server_loss`` is L(w) on the server's validation set (§3.3, first scheme); ``None``
  means the clients report L_t of the received model before training (second scheme),
  which scores h_{t-1} one round late.
  """

  key = KEY

  def __init__(self, ah: AHConfig, seed: int, server_loss: Optional[LossFn]):
    self.policy = ah.policy_config()
    self.seed = seed
    self.server_loss = server_loss
    self._points = hparam_grid.normalized_grid(self.policy)
    self._values = hparam_grid.grid_values(self.policy)
    self._bounds = hparam_grid.bounds(self.policy)

  @classmethod
  def policy_state(cls, state) -> Optional[reinforce.PolicyState]:
    """ψ_t of a process' full server state (its `server_state`), or None without AH."""
    return server_state.entry(state, cls.key)

  def initial_state(self, weights: ModelWeights) -> reinforce.PolicyState:
    state = tf.nest.map_structure(tf.constant, reinforce.initial_state(self.policy))
    if self.server_loss is not None:  # L_1 <- Loss(w_1), Algorithm 1 line 2
      state = state._replace(last_loss=self.server_loss(weights))
    return state

  def round_hparams(self, state, t) -> SampledHparams:
    """h_t ~ P(·|ψ_t), seeded by (seed, t)."""
    seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(t, tf.int64)])
    index, sampled = reinforce.sample(state[self.key], self._points, seed)
    h = tf.gather(tf.constant(self._values), index)
    return SampledHparams(lr=tf.cast(h[0], tf.float32), steps=tf.cast(tf.round(h[1]), tf.int32),
                          sample=sampled)

  def broadcast(self, entry) -> None:
    return None

  def update(self, entry, round_: Round) -> tuple[reinforce.PolicyState, collections.OrderedDict]:
    """r_t = (L_t − L_{t+1}) / L_t and ψ's eq. 7 step; metrics: μ, marginals, r_t, r̂, L."""
    p = self.policy
    sampled = round_.hparams.sample
    if self.server_loss is None:
      # The clients evaluated w_t before training: L_t, the reward of h_{t-1} (one round
      # late). Update ψ with the previous round's score, then keep h_t's.
      pre = round_.reports[self.key]
      loss = tf.math.divide_no_nan(pre.loss_sum, pre.count)
      updated, _ = reinforce.observe_loss(entry, loss, p.hyper_lr, self._bounds, p.min_reward, p.baseline)
      state = updated._replace(last_index=sampled.last_index, last_score=sampled.last_score)
    else:  # L_{t+1} of the aggregate model on the server's validation set
      loss = self.server_loss(round_.new_weights)
      state, _ = reinforce.observe_loss(sampled, loss, p.hyper_lr, self._bounds, p.min_reward, p.baseline)
    metrics = reinforce.policy_metrics(p, state)
    metrics["loss"] = loss
    return state, metrics

  def after_rejection(self, previous, rejected) -> reinforce.PolicyState:
    """ψ keeps what it learnt from the rejected h_t's reward; with the server's loss source
    L_t stays the kept model's loss (the clients' source measured L_t on it already)."""
    state = reinforce.PolicyState(*rejected)
    if self.server_loss is not None:
      state = state._replace(last_loss=reinforce.PolicyState(*previous).last_loss)
    return state


class PreTrainingLoss(Component):
  """AH's client half for ``--ah_loss_source=clients`` (seed 000 §3.3, second scheme): each client
  evaluates the received w_t on ``batches`` batches of its data before training."""

  key = AdaptiveHparams.key

  def __init__(self, batches: int, batch_size: int):
    self.batches, self.batch_size = batches, batch_size

  def before_loop(self, run: LocalRun) -> None:
    loss_sum, _, _, count = evaluation.evaluate(
        run.model, run.inputs.data.batch(self.batch_size).take(self.batches), run.loss_fn, None)
    run.scratch[self.key] = PreLossReport(loss_sum, count)

  def after_loop(self, run: LocalRun, result: LocalResult) -> tuple[None, "PreLossReport"]:
    return None, run.scratch[self.key]


class PreLossReport(NamedTuple):
  loss_sum: tf.Tensor  # Σ loss of w_t over the examples evaluated
  count: tf.Tensor
