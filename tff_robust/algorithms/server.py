"""The server side of a round, as small components with one interface.

`process.build_process` wires these inside the server's TF computations. Each stateful
component owns one entry ``key`` of the server state and answers four questions:

  ``initial_state(w_0)``      its entry before round 1
  ``broadcast(entry)``        what it sends to the clients besides w_t and h_t (a dict)
  ``update(entry, round_)``   its entry after the round and its metrics (unprefixed names)

The round's client hyper-parameters h_t = (lr, steps) come from one `HparamSource`:
`Schedule` (seed 004's client schedules) or `AdaptiveHparams` (seed 000 §3.2, h_t ~ P(·|ψ_t);
its client half, `PreTrainingLoss`, is a `client.Component`).
A component reads its client half's report, summed over the round's clients, by its own key
in ``Round.reports`` (``"train"``: the trainer's `client.TrainReport`).
`ServerOptimizer` applies SERVEROPT to the pseudo-gradient −Δ_t (seed 004, Algorithm 2);
`FedExServer` holds FedEx's θ over the k client configurations (seed 002).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Optional, Protocol, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import evaluation
from tff_robust.algorithms import fedex as fedex_lib
from tff_robust.algorithms import fedex_space
from tff_robust.algorithms import hparam_grid
from tff_robust.algorithms import reinforce
from tff_robust.algorithms import schedules
from tff_robust.algorithms import server_opt
from tff_robust.algorithms.client import Component, LocalResult, LocalRun, TrainReport
from tff_robust.algorithms.config import AHConfig, ClientConfig, ServerConfig

ModelWeights = tff.learning.models.ModelWeights
LossFn = Callable[[ModelWeights], tf.Tensor]


class RoundHparams(NamedTuple):
  """h_t from the client schedules: the round's client lr and local steps (0: epochs)."""

  lr: tf.Tensor  # float32
  steps: tf.Tensor  # int32


class SampledHparams(NamedTuple):
  """h_t ~ P(·|ψ_t) from the AH policy, with the policy state that drew it."""

  lr: tf.Tensor  # float32
  steps: tf.Tensor  # int32
  sample: reinforce.PolicyState  # ψ_t with h_t's grid index and score (what eq. 7 scores)


Hparams = Union[RoundHparams, SampledHparams]


class Round(NamedTuple):
  """What a component sees after the clients' round t."""

  t: tf.Tensor  # the round's number, 1-based (int32)
  hparams: Hparams  # h_t as broadcast (and AH's sample)
  reports: Mapping[str, Any]  # the clients' typed reports summed, by client component key
  new_weights: ModelWeights  # w_{t+1}


class ServerComponent(Protocol):
  key: str

  def initial_state(self, weights: ModelWeights) -> Any: ...

  def broadcast(self, entry) -> dict[str, Any]: ...

  def update(self, entry, round_: Round) -> tuple[Any, collections.OrderedDict]: ...


class HparamSource(Protocol):
  def round_hparams(self, state: Mapping[str, Any], t: tf.Tensor) -> Hparams: ...


class Schedule:
  """h_t from the client schedules: lr η_l(t) and K(t) local steps (0 = epochs, none broadcast)."""

  def __init__(self, client: ClientConfig):
    self.client = client

  def round_hparams(self, state, t) -> RoundHparams:
    c = self.client
    lr = schedules.client_lr(t, c.lr, c.lr_schedule, c.lr_decay_rate, c.lr_decay_every)
    if c.local_steps > 0:
      steps = schedules.local_steps(t, c.local_steps, c.steps_decay_rate, c.steps_decay_every,
                                    c.min_local_steps)
    else:
      steps = tf.constant(0, tf.int32)
    return RoundHparams(lr=tf.cast(lr, tf.float32), steps=tf.cast(steps, tf.int32))


class AdaptiveHparams:
  """The AH policy ψ = (μ, A) (seed 000 §3.2): h_t ~ P(·|ψ_t), eq. 7's update from r_t.

  ``server_loss`` is L(w) on the server's validation set (§3.3, first scheme); ``None``
  means the clients report L_t of the received model before training (second scheme),
  which scores h_{t-1} one round late.
  """

  key = "ah"

  def __init__(self, ah: AHConfig, seed: int, server_loss: Optional[LossFn]):
    self.policy = ah.policy_config()
    self.seed = seed
    self.server_loss = server_loss
    self._points = hparam_grid.normalized_grid(self.policy)
    self._values = hparam_grid.grid_values(self.policy)
    self._bounds = hparam_grid.bounds(self.policy)

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

  def broadcast(self, entry) -> dict[str, Any]:
    return {}

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


class FedExServer:
  """FedEx's θ over the k configurations: θ ← θ ⊙ exp(−η_t ∇̃), normalised (seed 002)."""

  key = "fedex"

  def __init__(self, options: fedex_space.FedExOptions, rows: Optional[int]):
    self.options = options
    self.rows = rows  # one θ row per hyper-parameter in the product space, else None

  def initial_state(self, weights: ModelWeights) -> collections.OrderedDict:
    return collections.OrderedDict(
        theta=tf.constant(fedex_lib.initial_theta(self.options.k, self.rows), tf.float32),
        baseline_num=tf.constant(0.0), baseline_den=tf.constant(0.0))

  def broadcast(self, entry) -> dict[str, Any]:
    return {"fedex_theta": entry["theta"]}

  def update(self, entry, round_: Round) -> tuple[collections.OrderedDict, collections.OrderedDict]:
    s = round_.reports[self.key]  # fedex.FedExReport, summed
    theta, num, den, fx_metrics = fedex_lib.server_update(
        entry["theta"], entry["baseline_num"], entry["baseline_den"], s.loss, s.count, s.total,
        tf.cast(round_.t, tf.float32), self.options)
    metrics = collections.OrderedDict((k, tf.cast(v, tf.float32)) for k, v in fx_metrics.items())
    metrics["theta_max"] = tf.reduce_max(theta)
    return collections.OrderedDict(theta=theta, baseline_num=num, baseline_den=den), metrics


class ServerOptimizer:
  """x_{t+1} = SERVEROPT(x_t, −Δ_t) (seed 004, Algorithm 2) with η_t = η γ^t when γ < 1.

  Not a `ServerComponent`: it makes the w_{t+1} that the components' `Round` carries, so it
  steps before them (``step``), and it broadcasts nothing.
  """

  def __init__(self, server: ServerConfig, trainable_specs: list[tf.TensorSpec]):
    self.config = server
    self.specs = trainable_specs
    self.optimizer = server.build_optimizer()

  def initial_state(self, weights: ModelWeights) -> Any:
    return self.optimizer.initialize(self.specs)

  def step(self, entry, trainable: list, mean_delta: list, any_update: tf.Tensor,
           completed_rounds: tf.Tensor) -> tuple[Any, list]:
    """(optimizer state, x_{t+1}); both unchanged when no client update survived."""
    opt_in = entry
    if self.config.lr_decay != 1.0:  # eta_t = eta gamma^t (seed 002's arms), t = completed rounds
      opt_in = collections.OrderedDict(entry)
      opt_in[server_opt.LEARNING_RATE_KEY] = tf.constant(self.config.lr, tf.float32) * tf.pow(
          tf.constant(self.config.lr_decay, tf.float32), tf.cast(completed_rounds, tf.float32))
    opt_state, new_trainable = self.optimizer.next(opt_in, trainable, [-d for d in mean_delta])
    new_trainable = [tf.where(any_update, n, o) for n, o in zip(new_trainable, trainable)]
    opt_state = tf.nest.map_structure(lambda n, o: tf.where(any_update, n, o), opt_state, entry)
    return opt_state, new_trainable


def round_metrics(train: TrainReport, hparams: Hparams, mean_delta: list) -> collections.OrderedDict:
  """The round's training metrics from the clients' summed `client.TrainReport`. ``client_lr`` and
  ``local_steps`` are the means over the round's clients of what they trained with (under FedEx
  each client's own configuration; the round's h_t if none came)."""
  count = tf.maximum(train.count, 1.0)
  clients = train.num_clients
  per_client = lambda total, default: tf.where(clients > 0, total / tf.maximum(clients, 1.0),
                                               tf.cast(default, tf.float32))
  return collections.OrderedDict(
      train_loss=train.loss_sum / count,
      train_accuracy=train.correct / tf.maximum(train.predictions, 1.0),
      client_lr=per_client(train.lr_sum, hparams.lr),
      local_steps=per_client(train.steps_sum, hparams.steps),
      num_clients=train.num_clients, nonfinite_clients=train.nonfinite,
      examples_trained=train.count,
      update_norm=tf.linalg.global_norm(mean_delta),
      client_drift=train.drift_sum / tf.maximum(train.num_clients - train.nonfinite, 1.0))


def prefixed(prefix: str, metrics: Mapping[str, tf.Tensor]) -> collections.OrderedDict:
  return collections.OrderedDict((f"{prefix}_{k}", tf.cast(v, tf.float32)) for k, v in metrics.items())
