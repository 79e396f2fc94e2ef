"""Aggregation of client deltas: weighted mean over the sampled clients (Δ_t = Σ_{S_t} n_i Δ_i /
Σ_{S_t} n_i, Reddi et al.'s form; seed 000's Algorithm 1 line 13 divides by N over all K
clients instead, which `process` applies on top with ``aggregation_norm="all"``) and
byzantine-robust alternatives.

Every factory built here is a `tff.aggregators.WeightedAggregationFactory` whose
``next(state, deltas@CLIENTS, weights@CLIENTS)`` returns the aggregated delta and a
*flat* ``OrderedDict`` of int32/float32 scalar measurements at SERVER.

Layers, outermost first:

1. non-finite guard (ours, with ``zeroing``): a client whose delta or weight holds
   NaN/Inf gets a zero delta and weight 0, so it is excluded from every aggregator.
   TFF's ``zeroing_factory`` alone does NOT catch NaN: it zeroes when
   ``‖Δ‖_∞ > norm`` and ``NaN > norm`` is false (Inf it does catch). Counted as
   ``nonfinite_count`` (counted, but left in place, when ``zeroing=False``). With
   ``check_nonfinite=False`` the guard is not built and ``nonfinite_count`` is a constant 0:
   for values that are finite by construction (`process` passes it when no client is
   byzantine: the client work already sends a non-finite update as a zero delta of weight 0),
   which saves a pass over every delta and an aggregation per round.
2. ``tff.aggregators.zeroing_factory`` (with ``zeroing``): zeroes a delta whose
   ‖·‖_∞ exceeds ``zeroing_norm`` (fixed, or TFF's adaptive default: twice the
   estimated 0.98-quantile of the norms plus one). The zeroed delta keeps its
   weight, as in TFF. Measurements ``zeroed_count``, ``zeroing_norm``.
3. the aggregator ``--aggregator``:
   * ``mean``: ``tff.aggregators.MeanFactory(no_nan_division=True)``; a round whose
     clients all carry weight 0 yields a zero delta instead of NaN.
   * ``median``: coordinate-wise median of the clients with weight > 0 (weights
     otherwise ignored) — Yin et al. 2018, "Byzantine-robust distributed learning",
     Def. 1. Measurement ``included_count``.
   * ``trimmed_mean``: coordinate-wise β-trimmed mean (Yin et al. 2018, Def. 2): per
     coordinate, of the m clients with weight > 0 drop the ⌊βm⌋ largest and the ⌊βm⌋
     smallest values and average the rest (β = ``trim_fraction`` < 0.5 per side).
   * ``norm_clip``: ``tff.aggregators.clipping_factory`` around the weighted mean:
     Δ_i ← Δ_i · min(1, C / ‖Δ_i‖_2) with fixed C = ``clip_norm``, or with C adapted
     to the 0.8-quantile of the clients' norms (``PrivateQuantileEstimationProcess.
     no_noise``, the geometric update of Andrew et al. 2021, TFF's robust_aggregator
     defaults) when ``clip_norm`` is None. Measurements ``clipped_count``,
     ``clipping_norm``. (Not ``tff.learning.robust_aggregator``: it offers no fixed
     norm, its mean divides by zero when every weight is 0, and its zeroing misses
     NaN.)
   * ``krum``, ``multi_krum``, ``bulyan``, ``geometric_median``: the Byzantine-robust rules of
     `robust_statistics` (Blanchard et al. 2017; El Mhamdi et al. 2018; Pillutla et al.'s RFA),
     on the stacked updates (`stacked_aggregation`), each with its assumption on the byzantine
     clients f it tolerates (``byzantine_f``). Measurement ``included_count``.

``median``, ``trimmed_mean`` and the rules of `robust_statistics` are `stacked_aggregation`'s
factory: they gather every participating delta at the server (memory
O(clients × model)) with one ``tff.federated_aggregate`` whose accumulator is the
stack of deltas (unknown leading dimension) and whose merge concatenates, so they
split across workers with TFF's mergeable execution context. Clients zeroed in
layer 2 still take part as zero vectors; clients excluded by the guard, or that
report NaN deltas through ``zeroing=False``, feed norm 0 / NaN to the adaptive
quantile estimators, which count them among the clients (a small bias).
"""

from __future__ import annotations

import collections
import math
import numbers
from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure

from tff_robust.algorithms import robust_statistics
from tff_robust.algorithms import stacked_aggregation

AGGREGATORS = ("mean", "median", "trimmed_mean", "norm_clip") + robust_statistics.RULES

# TFF's robust_aggregator defaults (tensorflow_federated/python/learning/
# model_update_aggregator.py).
_ADAPTIVE_ZEROING = dict(initial_estimate=10.0, target_quantile=0.98, learning_rate=math.log(10.0),
                         multiplier=2.0, increment=1.0)
_ADAPTIVE_CLIPPING = dict(initial_estimate=1.0, target_quantile=0.8, learning_rate=0.2)


def validate_aggregator(kind: str, trim_fraction: float = 0.2, clip_norm: Optional[float] = None,
                        zeroing_norm: Optional[float] = None) -> None:
  """Raises ``ValueError`` naming the flag, the bad value and the valid choices."""
  if kind not in AGGREGATORS:
    raise ValueError(f"--aggregator={kind!r} is not valid; choose one of: "
                     f"{', '.join(AGGREGATORS)}")
  if not isinstance(trim_fraction, numbers.Real) or not 0.0 <= trim_fraction < 0.5:
    raise ValueError(f"--trim_fraction={trim_fraction!r} is not valid; it is the fraction dropped "
                     "from each end per coordinate and must be in [0, 0.5)")
  for name, value in (("--clip_norm", clip_norm), ("--zeroing_norm", zeroing_norm)):
    if value is not None and (not isinstance(value, numbers.Real) or not math.isfinite(value)
                              or value <= 0):
      raise ValueError(f"{name}={value!r} is not valid; choose a finite number > 0, or None "
                       "for an adaptive norm (quantile estimate)")


def build_aggregator(kind: str = "mean", *, trim_fraction: float = 0.2,
                     clip_norm: Optional[float] = None, zeroing: bool = True,
                     zeroing_norm: Optional[float] = None, check_nonfinite: bool = True,
                     byzantine_f: int = 0, multi_krum_select: int = 0, rfa_iterations: int = 10,
                     rfa_nu: float = 1e-6, client_shares: bool = False,
                     ) -> tff.aggregators.WeightedAggregationFactory:
  """The aggregation factory for ``--aggregator`` (see the module docstring).

  Args:
    kind: one of `AGGREGATORS`.
    trim_fraction: β of ``trimmed_mean``, the fraction dropped at each end, in [0, 0.5).
    clip_norm: L2 clipping norm of ``norm_clip``; None = adaptive (0.8-quantile).
    zeroing: exclude non-finite deltas and zero deltas with ‖Δ‖_∞ > ``zeroing_norm``.
    zeroing_norm: fixed ∞-norm threshold; None = TFF's adaptive default.
    check_nonfinite: build the non-finite guard; False only for values finite by construction.
    byzantine_f, multi_krum_select, rfa_iterations, rfa_nu: f of the Krum family, Multi-Krum's
      q (0: m − f), RFA's Weiszfeld steps and ν (`robust_statistics`).
    client_shares: the stacked rules (median, trimmed mean and the Krum family) also measure ``client_shares``
      (`stacked_aggregation`); no effect on the mean and clipping, whose shares are w_i / Σ w.
  """
  validate_aggregator(kind, trim_fraction, clip_norm, zeroing_norm)
  if kind in robust_statistics.RULES or kind in ("median", "trimmed_mean"):
    inner = stacked_aggregation.StackedFactory(
        stacked_aggregation.rule(kind, byzantine_f=byzantine_f, multi_krum_select=multi_krum_select,
                                 rfa_iterations=rfa_iterations, rfa_nu=rfa_nu,
                                 trim_fraction=trim_fraction), report_shares=client_shares)
  elif kind == "mean":
    inner = tff.aggregators.MeanFactory(no_nan_division=True)
  else:
    norm = (float(clip_norm) if clip_norm is not None else
            tff.aggregators.PrivateQuantileEstimationProcess.no_noise(**_ADAPTIVE_CLIPPING))
    inner = tff.aggregators.clipping_factory(
        norm, tff.aggregators.MeanFactory(no_nan_division=True))
  if zeroing:
    norm = (float(zeroing_norm) if zeroing_norm is not None else
            tff.aggregators.PrivateQuantileEstimationProcess.no_noise(**_ADAPTIVE_ZEROING))
    inner = tff.aggregators.zeroing_factory(norm, inner)
  return GuardedFactory(inner, exclude_nonfinite=zeroing, check=check_nonfinite)


def _flatten_measurements(value, member_type, out: collections.OrderedDict) -> None:
  """Collects the tensor leaves of a SERVER struct by their own names (TFF's are unique)."""
  for name, sub in structure.iter_elements(member_type):
    if isinstance(sub, tff.StructType):
      _flatten_measurements(getattr(value, name), sub, out)
    else:
      if name in out:
        raise ValueError(f"Duplicate measurement name {name!r}.")
      out[name] = getattr(value, name)


class GuardedFactory(tff.aggregators.WeightedAggregationFactory):
  """Excludes non-finite client values (weight 0, value 0) and flattens measurements.

  Measurements: ``nonfinite_count`` (clients whose value or weight is not finite)
  followed by the inner factory's scalar measurements, keyed by their own names.
  With ``check=False`` the values go to the inner factory as they are and ``nonfinite_count``
  is 0 (for values finite by construction; see the module docstring).
  """

  def __init__(self, inner: tff.aggregators.WeightedAggregationFactory,
               exclude_nonfinite: bool = True, check: bool = True):
    self._inner = inner
    self._exclude = exclude_nonfinite
    self._check = check

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    value_type, weight_type = stacked_aggregation.check_types(value_type, weight_type)
    inner = self._inner.create(value_type, weight_type)
    exclude, check = self._exclude, self._check

    @tff.tensorflow.computation(value_type, weight_type)
    def guard(value, weight):
      leaves = tf.nest.flatten(value)
      finite = tf.math.is_finite(weight)
      for v in leaves:
        finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(v)))
      if exclude:
        leaves = [tf.where(finite, v, tf.zeros_like(v)) for v in leaves]
        weight = tf.where(finite, weight, tf.zeros_like(weight))
      return stacked_aggregation.pack(value_type, leaves), weight, tf.cast(tf.logical_not(finite), tf.int32)

    @tff.federated_computation
    def init_fn():
      return inner.initialize()

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      if check:
        guarded = tff.federated_map(guard, (value, weight))
        out = inner.next(state, guarded[0], guarded[1])
        count = tff.federated_sum(guarded[2])
      else:
        out = inner.next(state, value, weight)
        count = tff.federated_value(np.int32(0), tff.SERVER)
      flat = collections.OrderedDict(nonfinite_count=count)
      _flatten_measurements(out.measurements, out.measurements.type_signature.member, flat)
      return tff.templates.MeasuredProcessOutput(
          state=out.state, result=out.result, measurements=tff.federated_zip(flat))

    return tff.templates.AggregationProcess(init_fn, next_fn)
