"""The server's TF computations of a round, each typed, built from the server components.

``init`` (→ S, the ``core`` part of the saved state), ``round_hparams`` (S → h_t, from the round's
`server.HparamSource`), ``make_broadcast`` (⟨S, h_t⟩ → `round_protocol.Broadcast`) and
``update`` (⟨S, h_t, Δ_t, the summed reports, the aggregator's measurements⟩ → ⟨S', metrics⟩:
SERVEROPT's step, then each component's). `process` wires them around the client work and the
aggregator, and checks their types where they meet.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import round_protocol
from tff_robust.algorithms import server
from tff_robust.algorithms import server_state
from tff_robust.algorithms import stacked_aggregation
from tff_robust.algorithms.client import Component

ModelWeights = tff.learning.models.ModelWeights
MODEL, OPT, ROUND = server_state.MODEL, server_state.OPT, server_state.ROUND


class Before(NamedTuple):
  """The computations that come before the clients' work."""

  init: tff.Computation
  round_hparams: tff.Computation
  make_broadcast: tff.Computation

  @property
  def state_type(self) -> tff.Type:
    return self.init.type_signature.result

  @property
  def hparams_type(self) -> tff.Type:
    return self.round_hparams.type_signature.result

  @property
  def broadcast_type(self) -> tff.Type:
    return self.make_broadcast.type_signature.result


def build_before(w0: ModelWeights, opt: server.ServerOptimizer, components: Sequence[Any],
                 source: server.HparamSource) -> Before:
  """``init``, ``round_hparams`` and ``make_broadcast`` for the initial weights ``w0``."""

  @tff.tensorflow.computation
  def init():
    weights = ModelWeights(trainable=[tf.constant(v) for v in w0.trainable],
                           non_trainable=[tf.constant(v) for v in w0.non_trainable])
    state = collections.OrderedDict([(MODEL, weights), (OPT, opt.initial_state(weights)),
                                     (ROUND, tf.constant(0, tf.int32))])
    for part in components:
      state[part.key] = part.initial_state(weights)
    return state

  state_type = init.type_signature.result

  @tff.tensorflow.computation(state_type)
  def round_hparams(state):
    return source.round_hparams(state, state[ROUND] + 1)

  @tff.tensorflow.computation(state_type, round_hparams.type_signature.result)
  def make_broadcast(state, hparams):
    return round_protocol.make_broadcast(state[MODEL], hparams, components, state)

  return Before(init, round_hparams, make_broadcast)


def build_update(before: Before, mean_delta_type: tff.Type, reports_type: tff.Type,
                 measurements_type: tff.Type, opt: server.ServerOptimizer, components: Sequence[Any],
                 client_components: Sequence[Component], has_val: bool) -> tff.Computation:
  """⟨S, h_t, Δ_t, reports, measurements⟩ → ⟨S', metrics⟩: the optimizer's step (skipped when no
  client update survived), then each component's update and metrics."""

  @tff.tensorflow.computation(before.state_type, before.hparams_type, mean_delta_type, reports_type,
                              measurements_type)
  def update(state, hparams, mean_delta, reports, measurements):
    train = reports["train"]  # client.TrainReport, summed
    excluded = train.nonfinite + tf.cast(measurements["nonfinite_count"], tf.float32)
    any_update = train.num_clients - excluded > 0
    trainable = list(state[MODEL].trainable)
    opt_state, new_trainable = opt.step(state[OPT], trainable, mean_delta, any_update, state[ROUND])
    new_weights = ModelWeights(trainable=new_trainable, non_trainable=list(state[MODEL].non_trainable))
    new_state = collections.OrderedDict([(MODEL, new_weights), (OPT, opt_state), (ROUND, state[ROUND] + 1)])
    round_ = server.Round(t=state[ROUND] + 1, hparams=hparams, reports=reports, new_weights=new_weights)
    metrics = server.round_metrics(train, hparams, mean_delta)
    for part in client_components:  # the server's view of each client component's report
      if part.key in reports:
        metrics.update(part.metrics(reports[part.key], train))
    for part in components:
      new_state[part.key], part_metrics = part.update(state[part.key], round_)
      metrics.update(server.prefixed(part.key, part_metrics))
    metrics.update(server.prefixed("agg", {k: v for k, v in measurements.items()
                                           if k != stacked_aggregation.CLIENT_SHARES}))
    if has_val:
      metrics["client_val_accuracy"] = tf.math.divide_no_nan(train.val_correct, train.val_predictions)
    return new_state, metrics

  return update


def check_meet(producer: str, produced: tff.Type, consumer: str, expected: tff.Type) -> None:
  """Raises TypeError unless what ``producer`` makes can be what ``consumer`` takes (as TFF's
  ``compose_learning_process`` checks its parts)."""
  if not expected.is_assignable_from(produced):
    raise TypeError(f"{producer} makes {produced}, but {consumer} takes {expected}")


def float32_type() -> tff.TensorType:
  return tff.TensorType(np.float32)
