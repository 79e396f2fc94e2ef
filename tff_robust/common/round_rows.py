"""What a round's metrics row (one line of a run's metrics.csv, or the loop's dict) says about the
round: whether its update reached the model, and the update norms a guard's window holds."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


def updated_model(metrics: Mapping[str, float]) -> bool:
  """Whether a round's metrics show an update reaching the model: it was not skipped, and some
  client's update was neither non-finite on the client (``nonfinite_clients``) nor dropped by the
  aggregator's non-finite check (``agg_nonfinite_count``) — the server step's own condition.
  Rows without client counts (older records) are read as updated unless skipped."""
  if metrics.get("skipped_round", 0.0):
    return False
  if "num_clients" not in metrics:
    return True
  excluded = metrics.get("nonfinite_clients", 0.0) + metrics.get("agg_nonfinite_count", 0.0)
  return metrics["num_clients"] - excluded > 0


def accepted_update_norms(history: Iterable[Mapping[str, float]]) -> list[float]:
  """The ``update_norm`` of each accepted round of ``history`` (metrics rows in round order):
  rounds whose update reached the model (`updated_model`) and were not rejected."""
  out = []
  for row in history:
    norm = row.get("update_norm")
    if norm is None or not math.isfinite(norm) or not updated_model(row) or row.get("rejected_round", 0.0):
      continue
    out.append(float(norm))
  return out
