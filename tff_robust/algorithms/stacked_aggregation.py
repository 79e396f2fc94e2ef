"""An aggregation factory for rules of the whole stack of client updates (`robust_statistics`):
Krum, Multi-Krum, Bulyan, the geometric median, and the coordinate-wise median and trimmed mean
(Yin et al. 2018, Defs. 1-2).

It gathers every participating update at the server with one ``tff.federated_aggregate`` whose accumulator is the stack (unknown leading dimension)
and whose merge concatenates, so it splits across workers; the clients with weight 0 (excluded
by the non-finite guard, or dropped by their own client work) are left out. The rule sees the
stack flattened to X ∈ R^{m×D} (each leaf reshaped to [m, −1], concatenated in order) and the
weights w ∈ R^m; its result is cut back into the leaves. With m = 0 the result is zero.

Measurements: ``included_count`` (m), and with ``report_shares`` ``client_shares``: a float32
vector with one entry per client in the order the clients were accumulated (the order of the
round's clients in TFF's runtime), the rule's share for each included client and 0 for the
others. The process takes it out of the round's metrics (`process`, ``client_reports``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import robust_statistics as rs

# (X [m, D], w [m]) -> (aggregate [D], shares [m]), for m ≥ 1.
Rule = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
CLIENT_SHARES = "client_shares"


# ---- coordinate-wise statistics and the stack's types (TF, on a stack [m, ...] of m values) ----

def coordinate_median(stacked: tf.Tensor) -> tf.Tensor:
  """Coordinate-wise median over axis 0 (mean of the two middle values when m is even)."""
  m = tf.shape(stacked)[0]
  ordered = tf.sort(stacked, axis=0)
  lo, hi = (m - 1) // 2, m // 2
  return 0.5 * (tf.gather(ordered, lo) + tf.gather(ordered, hi))


def coordinate_trimmed_mean(stacked: tf.Tensor, beta: float) -> tf.Tensor:
  """Coordinate-wise mean after dropping the ⌊βm⌋ smallest and ⌊βm⌋ largest values."""
  m = tf.shape(stacked)[0]
  k = tf.cast(tf.floor(beta * tf.cast(m, tf.float64)), tf.int32)
  ordered = tf.sort(stacked, axis=0)
  return tf.reduce_mean(ordered[k:m - k], axis=0)


def leaf_specs(value_type) -> list[tf.TensorSpec]:
  return tf.nest.flatten(tff.types.type_to_tf_tensor_specs(value_type))


def pack(value_type, leaves):
  return tf.nest.pack_sequence_as(tff.types.type_to_tf_tensor_specs(value_type), leaves)


def check_types(value_type, weight_type):
  value_type = tff.types.to_type(value_type)
  weight_type = tff.types.to_type(weight_type)
  if not tff.types.is_structure_of_floats(value_type):
    raise TypeError(f"Client values must be floating-point tensors, got {value_type}.")
  if not (isinstance(weight_type, tff.TensorType) and np.issubdtype(weight_type.dtype, np.floating)
          and not weight_type.shape):
    raise TypeError(f"Client weights must be a float scalar, got {weight_type}.")
  return value_type, weight_type


def median_rule(x: tf.Tensor, w: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """`coordinate_median` with its shares (the middle rank, or the middle two)."""
  del w
  m = tf.shape(x)[0]
  return coordinate_median(x), rs.rank_range_shares(x, (m - 1) // 2, m // 2 + 1)


def trimmed_mean_rule(beta: float) -> Rule:
  """`coordinate_trimmed_mean` with its shares (ranks ⌊βm⌋..m−⌊βm⌋−1)."""

  def rule(x, w):
    del w
    m = tf.shape(x)[0]
    k = tf.cast(tf.floor(beta * tf.cast(m, tf.float64)), tf.int32)
    return coordinate_trimmed_mean(x, beta), rs.rank_range_shares(x, k, m - k)

  return rule


def rule(kind: str, *, byzantine_f: int = 0, multi_krum_select: int = 0, rfa_iterations: int = 10,
         rfa_nu: float = 1e-6, trim_fraction: float = 0.2) -> Rule:
  """The rule of ``--aggregator=kind`` on the stacked updates (`robust_statistics`)."""
  f = int(byzantine_f)
  rules = {
      "krum": lambda x, w: rs.krum(x, w, f),
      "multi_krum": lambda x, w: rs.multi_krum(x, w, f, int(multi_krum_select)),
      "bulyan": lambda x, w: rs.bulyan(x, w, f),
      "geometric_median": lambda x, w: rs.geometric_median(x, w, int(rfa_iterations), float(rfa_nu)),
      "median": median_rule,
      "trimmed_mean": trimmed_mean_rule(float(trim_fraction)),
  }
  if kind not in rules:
    raise ValueError(f"--aggregator={kind!r} is not a rule of the stacked updates; choose one of: "
                     f"{', '.join(rules)}")
  return rules[kind]


class StackedFactory(tff.aggregators.WeightedAggregationFactory):
  """``rule`` of the clients with weight > 0, on their stacked, flattened updates (see the
  module docstring); ``report_shares`` adds the ``client_shares`` measurement."""

  def __init__(self, rule_fn: Rule, report_shares: bool = False):
    self._rule = rule_fn
    self._report_shares = report_shares

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    value_type, weight_type = check_types(value_type, weight_type)
    specs = leaf_specs(value_type)
    shapes = [s.shape.as_list() for s in specs]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    dtype = specs[0].dtype
    rule_fn, report_shares = self._rule, self._report_shares
    acc_type = ([tff.TensorType(s.dtype.as_numpy_dtype, [None] + sh) for s, sh in zip(specs, shapes)],
                tff.TensorType(weight_type.dtype, [None]), tff.TensorType(np.int32, [None]))

    def empty(shape, dt):
      return tf.compat.v1.placeholder_with_default(tf.zeros([0] + shape, dt), [None] + shape)

    @tff.tensorflow.computation
    def zero():
      return ([empty(sh, s.dtype) for s, sh in zip(specs, shapes)],
              empty([], weight_type.dtype), empty([], tf.int32))

    @tff.tensorflow.computation(acc_type, (value_type, weight_type))
    def accumulate(acc, value_and_weight):
      stacks, weights, included = acc
      value, weight = value_and_weight
      keep = tf.cast(weight > 0, tf.int32)  # NaN weight -> excluded
      stacks = [tf.concat([a, tf.expand_dims(v, 0)[:keep]], axis=0)
                for a, v in zip(stacks, tf.nest.flatten(value))]
      return (stacks, tf.concat([weights, tf.expand_dims(weight, 0)[:keep]], axis=0),
              tf.concat([included, tf.expand_dims(keep, 0)], axis=0))

    @tff.tensorflow.computation(acc_type, acc_type)
    def merge(a, b):
      return ([tf.concat([x, y], axis=0) for x, y in zip(a[0], b[0])],
              tf.concat([a[1], b[1]], axis=0), tf.concat([a[2], b[2]], axis=0))

    @tff.tensorflow.computation(acc_type)
    def report(acc):
      stacks, weights, included = acc
      m = tf.shape(weights)[0]
      x = tf.concat([tf.reshape(s, [m, size]) for s, size in zip(stacks, sizes)], axis=1)

      def apply():
        flat, shares = rule_fn(x, tf.cast(weights, dtype))
        return tf.cast(flat, dtype), tf.cast(shares, tf.float32)

      flat, shares = tf.cond(m > 0, apply, lambda: (tf.zeros([sum(sizes)], dtype), tf.zeros([0], tf.float32)))
      leaves = [tf.reshape(p, sh) for p, sh in zip(tf.split(flat, sizes), shapes)]
      out = collections.OrderedDict(result=pack(value_type, leaves), included_count=m)
      if report_shares:
        where = tf.where(included > 0)
        out[CLIENT_SHARES] = tf.scatter_nd(where, shares, tf.shape(included, out_type=tf.int64))
      return out

    @tff.federated_computation
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      out = tff.federated_aggregate(tff.federated_zip((value, weight)), zero(), accumulate, merge,
                                    report)
      measured = collections.OrderedDict(included_count=out.included_count)
      if report_shares:
        measured[CLIENT_SHARES] = out[CLIENT_SHARES]
      return tff.templates.MeasuredProcessOutput(state=state, result=out.result,
                                                 measurements=tff.federated_zip(measured))

    return tff.templates.AggregationProcess(init_fn, next_fn)
