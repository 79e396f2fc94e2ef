"""The seed-paired difference (`common.paired`) against the formula."""

import math

from tff_robust.common.paired import paired_difference


def test_mean_and_standard_error_of_the_per_seed_differences():
  # differences 1, 2, 6: mean 3, sample sd sqrt(7), SE sqrt(7) / sqrt(3)
  mean, se = paired_difference([11.0, 12.0, 16.0], [10.0, 10.0, 10.0])
  assert math.isclose(mean, 3.0)
  assert math.isclose(se, math.sqrt(7.0) / math.sqrt(3.0))


def test_one_pair_has_no_standard_error_and_none_has_no_mean():
  mean, se = paired_difference([2.0], [0.5])
  assert mean == 1.5 and math.isnan(se)
  assert all(math.isnan(v) for v in paired_difference([], []))
