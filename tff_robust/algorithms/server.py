"""The server side of a round, as small components with one interface.

`process.build_process` wires these inside the server's TF computations. Each stateful
component (a method's server half, under `methods/`) owns one entry ``key`` of the server state
and answers:

  ``initial_state(w_0)``      its entry before round 1
  ``broadcast(entry)``        what it sends to the clients besides w_t and h_t (None: nothing),
                              in `round_protocol.Broadcast.extras` under its key
  ``update(entry, round_)``   its entry after the round and its metrics (unprefixed names)
  ``after_rejection(previous, rejected)``  (optional) its entry after a round the divergence
                              guard rejected (without it: ``previous``'s)

The round's client hyper-parameters h_t = (lr, steps) come from one `HparamSource`: `Schedule`
(seed 004's client schedules), or a server component that is one (AH's policy, `methods.ah`).
A component reads its client half's report, summed over the round's clients, by its own key
in ``Round.reports`` (``"train"``: the trainer's `client.TrainReport`).
`ServerOptimizer` applies SERVEROPT to the pseudo-gradient −Δ_t (seed 004, Algorithm 2).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Protocol, runtime_checkable

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import schedules
from tff_robust.algorithms import server_opt
from tff_robust.algorithms.client import TrainReport
from tff_robust.algorithms.round_protocol import RoundHparams

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ClientConfig, ServerConfig

ModelWeights = tff.learning.models.ModelWeights
LossFn = Callable[[ModelWeights], tf.Tensor]


# h_t as the round's `HparamSource` made it: a `round_protocol.RoundHparams`, or a NamedTuple
# with the same ``lr`` and ``steps`` and what the source keeps of its draw (AH's `SampledHparams`).
Hparams = Any


class Round(NamedTuple):
  """What a component sees after the clients' round t."""

  t: tf.Tensor  # the round's number, 1-based (int32)
  hparams: Hparams  # h_t as broadcast (and AH's sample)
  reports: Mapping[str, Any]  # the clients' typed reports summed, by client component key
  new_weights: ModelWeights  # w_{t+1}


class ServerComponent(Protocol):
  key: str

  def initial_state(self, weights: ModelWeights) -> Any: ...

  def broadcast(self, entry) -> Optional[Any]: ...

  def update(self, entry, round_: Round) -> tuple[Any, collections.OrderedDict]: ...


def hparam_source(components, client: "ClientConfig") -> HparamSource:
  """The round's source of h_t: the server component that is one (AH's policy), else `Schedule`."""
  sources = [c for c in components if isinstance(c, HparamSource)]
  if len(sources) > 1:
    raise ValueError(f"one source of the round's hyper-parameters, got {[c.key for c in sources]}")
  return sources[0] if sources else Schedule(client)


@runtime_checkable
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
