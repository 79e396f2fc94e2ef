"""Weighted aggregation of client deltas (Δ_t = Σ n_i Δ_i / Σ n_i, Algorithm 1 of seed 000)."""

from __future__ import annotations

import tensorflow_federated as tff

AGGREGATORS = ("mean",)


def build_aggregator(kind: str = "mean") -> tff.aggregators.WeightedAggregationFactory:
  """The aggregation factory for ``--aggregator``.

  ``mean``: TFF's weighted mean; a round whose clients all carry weight 0
  (all dropped as non-finite) yields a zero delta instead of NaN.
  """
  if kind not in AGGREGATORS:
    raise ValueError(f"--aggregator={kind!r} is not valid; choose one of: {', '.join(AGGREGATORS)}")
  return tff.aggregators.MeanFactory(no_nan_division=True)
