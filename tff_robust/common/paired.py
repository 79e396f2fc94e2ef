"""The seed-paired difference of two methods: the mean of the per-seed differences A_s − B_s and
its standard error sd(A_s − B_s) / √n, the statistic every comparison of the project reports
(the results page's verdicts, the studies that choose settings)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
  """(mean of a_i − b_i, its standard error); the mean is NaN with no pairs, the SE with fewer
  than two."""
  diffs = [x - y for x, y in zip(a, b)]
  n = len(diffs)
  mean = statistics.fmean(diffs) if diffs else math.nan
  se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.nan
  return mean, se
