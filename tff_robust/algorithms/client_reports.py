"""A round with its clients' own reports: what ``--client_metrics`` writes to ``clients.csv``
(`simulation.client_metrics`).

Built only when asked (`process.build_process`'s ``client_reports``), as a second federated
computation over the same round: the process' ``next`` traces nothing of it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure

from tff_robust.algorithms import stacked_aggregation
from tff_robust.algorithms.client import all_finite


class ClientRound(NamedTuple):
  """A round with its clients' reports (`RobustProcess.next_with_client_reports`).

  ``rows``: per client, in the order of the client inputs, an OrderedDict of scalars:
  examples n_k, local_loss and local_accuracy (over its local steps), update_norm (‖Δ‖ sent),
  aggregation_weight (the weight sent; 0 when the update is not finite), nonfinite (its own
  update was not finite and dropped). ``shares``: the aggregator's share of each client
  (`stacked_aggregation`), in the same order, or None when the aggregator is linear (the mean,
  clipping: the share is aggregation_weight / Σ). ``states``: as `next_with_client_states`.
  """

  output: tff.learning.templates.LearningProcessOutput
  rows: list
  shares: Optional[np.ndarray]
  states: Optional[list]


def build(round_fn: Callable, server_state_type: tff.Type, clients_type: tff.Type,
          client_out_type: tff.Type, agg_result_type: tff.Type,
          stateful: bool) -> Callable[..., ClientRound]:
  """``(state, client_inputs) -> ClientRound``: the round of ``round_fn`` (the process' round:
  ``(state, inputs) -> (output, client outputs, aggregator output)``, federated values) with its
  clients' rows, the aggregator's shares (when it measures them) and, when ``stateful``, the
  clients' states."""
  measurements_type = agg_result_type.measurements.member
  has_shares = stacked_aggregation.CLIENT_SHARES in [n for n, _ in structure.iter_elements(measurements_type)]

  @tff.tensorflow.computation(client_out_type.delta, client_out_type.weight, client_out_type.report.train)
  def client_row(delta, weight, train):
    finite = tf.logical_and(all_finite(delta), tf.math.is_finite(weight))
    nan = tf.constant(np.nan, tf.float32)
    return collections.OrderedDict(
        examples=tf.cast(train.num_examples, tf.float32),
        local_loss=tf.where(train.count > 0, tf.math.divide_no_nan(train.loss_sum, train.count), nan),
        local_accuracy=tf.where(train.predictions > 0,
                                tf.math.divide_no_nan(train.correct, train.predictions), nan),
        update_norm=tf.linalg.global_norm(delta),
        aggregation_weight=tf.where(finite, weight, tf.zeros_like(weight)),
        nonfinite=train.nonfinite)

  if has_shares:
    @tff.tensorflow.computation(measurements_type)
    def shares_of(measurements):
      return measurements[stacked_aggregation.CLIENT_SHARES]

  @tff.federated_computation(server_state_type, clients_type)
  def round_with_reports(state, client_inputs):
    output, outputs, agg_output = round_fn(state, client_inputs)
    out = [output, tff.federated_map(client_row, (outputs.delta, outputs.weight, outputs.report.train))]
    if has_shares:
      out.append(tff.federated_map(shares_of, agg_output.measurements))
    if stateful:
      out.append(outputs.state)
    return tuple(out)

  def next_with_client_reports(state, client_inputs) -> ClientRound:
    out = list(round_with_reports(state, client_inputs))
    shares = np.asarray(out.pop(2)) if has_shares else None
    return ClientRound(out[0], list(out[1]), shares, list(out[2]) if stateful else None)

  return next_with_client_reports
