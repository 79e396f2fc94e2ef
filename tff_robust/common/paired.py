"""The seed-paired difference of two methods: the mean of the per-seed differences A_s − B_s and
its standard error sd(A_s − B_s) / √n, the statistic every comparison of the project reports
(the results page's verdicts, the studies that choose settings)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
  """(mean of a_i − b_i, its standard error); the mean is NaN with no pairs, the SE with fewer
  than two."""
  diffs = [x - y for x, y in zip(a, b)]
  n = len(diffs)
  mean = statistics.fmean(diffs) if diffs else math.nan
  se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.nan
  return mean, se


HELD, FAILED, NOISE = "held", "did not hold", "within noise"
TOO_FEW = "fewer than 2 paired seeds"


def verdict(d: float, se: float, n: int, margin: float = 0.0) -> str:
  """The results page's rule for the claim "difference > margin" on n paired seeds: held when
  d − margin > SE, did not hold when margin − d > SE, within noise otherwise."""
  if n < 2:
    return TOO_FEW
  if d - margin > se:
    return HELD
  if margin - d > se:
    return FAILED
  return NOISE


def kept_unless_beaten(scores: Mapping[str, Sequence[float]], candidates: Sequence[str]) -> str | None:
  """The rule that replaces a setting in force: the candidate with the best mean score, among
  those that beat the first of ``candidates`` (the setting in force) by more than one standard
  error of the paired difference (any margin with one pair); else the first. ``scores`` holds each
  candidate's paired values in the same order; ``None`` when the first has none."""
  first = candidates[0]
  if first not in scores:
    return None
  best = first
  for name in candidates[1:]:
    if name not in scores:
      continue
    gain, se = paired_difference(scores[name], scores[first])
    se = 0.0 if math.isnan(se) else se
    clears = gain > se and not math.isclose(gain, se, rel_tol=1e-9)  # {0, x}: mean = SE, a tie
    if clears and statistics.fmean(scores[name]) > statistics.fmean(scores[best]):
      best = name
  return best
