"""``--aggregation_norm=all`` (seed 000, Algorithm 1 line 13) as a wrapper of a weighted
aggregation: Δ_t = Σ_{S_t} n_k Δ_k / N with N the examples of all K clients, computed as the
wrapped aggregator's weighted mean over the round's clients S_t times Σ_{S_t} n_k / N, where n_k
counts only the clients whose update reaches the aggregate (finite). With the default
``--weighting=num_examples`` this is Algorithm 1's sum; the step shrinks by about C.

The wrapped factory aggregates ``<delta, examples>``: `client_value` makes that pair from a
client's Δ and its report; the wrapper's state and measurements are the wrapped aggregator's,
so a checkpoint's ``agg`` entry is the same with or without it.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


class AllClientsNorm(tff.aggregators.WeightedAggregationFactory):
  """The ``inner`` weighted mean of ``delta``, scaled by Σ ``examples`` / ``total_examples``."""

  def __init__(self, inner: tff.aggregators.WeightedAggregationFactory, total_examples: int):
    if not total_examples or total_examples <= 0:
      raise ValueError("aggregation_norm='all' (Algorithm 1 line 13) needs total_examples = N > 0")
    self._inner = inner
    self._inv_total = np.float32(1.0 / float(total_examples))

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    """``value_type``: ``<delta=Δ's type, examples=float32>`` (`value_type`)."""
    inner = self._inner.create(value_type.delta, weight_type)
    mean_type = inner.next.type_signature.result.result.member
    inv_total = self._inv_total

    @tff.tensorflow.computation(mean_type, np.float32)
    def scale_to_all(mean_delta, kept):
      """Algorithm 1 line 13 (seed 000): the weighted mean over S_t times Σ_{S_t} n_k / N."""
      return [d * kept * inv_total for d in mean_delta]

    @tff.federated_computation(inner.next.type_signature.parameter[0],
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      out = inner.next(state, value.delta, weight)
      kept = tff.federated_sum(value.examples)  # Σ_{S_t} n_k of the finite updates
      return tff.templates.MeasuredProcessOutput(
          state=out.state, result=tff.federated_map(scale_to_all, (out.result, kept)),
          measurements=out.measurements)

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


def value_type(delta_type) -> tff.StructWithPythonType:
  """The type the wrapper aggregates: a client's Δ and its kept n_k."""
  return tff.StructWithPythonType([("delta", delta_type), ("examples", tff.TensorType(np.float32))],
                                  collections.OrderedDict)


def client_value(delta_type, train_type) -> tff.Computation:
  """``(Δ, client.TrainReport) -> <delta=Δ, examples=n_k>``, n_k 0 when the update is not finite."""

  @tff.tensorflow.computation(delta_type, train_type)
  def with_examples(delta, train):
    finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(d)) for d in delta]))
    finite = tf.logical_and(finite, tf.equal(train.nonfinite, 0.0))
    kept = tf.where(finite, tf.cast(train.num_examples, tf.float32), tf.constant(0.0))
    return collections.OrderedDict(delta=delta, examples=kept)

  return with_examples
