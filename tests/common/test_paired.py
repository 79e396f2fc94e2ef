"""The seed-paired difference (`common.paired`) against the formula, and the rule that replaces a
setting in force only when that difference clears one standard error."""

import math

from tff_robust.common.paired import kept_unless_beaten, paired_difference


def test_mean_and_standard_error_of_the_per_seed_differences():
  # differences 1, 2, 6: mean 3, sample sd sqrt(7), SE sqrt(7) / sqrt(3)
  mean, se = paired_difference([11.0, 12.0, 16.0], [10.0, 10.0, 10.0])
  assert math.isclose(mean, 3.0)
  assert math.isclose(se, math.sqrt(7.0) / math.sqrt(3.0))


def test_one_pair_has_no_standard_error_and_none_has_no_mean():
  mean, se = paired_difference([2.0], [0.5])
  assert mean == 1.5 and math.isnan(se)
  assert all(math.isnan(v) for v in paired_difference([], []))


def test_a_setting_in_force_is_replaced_only_by_more_than_one_standard_error():
  now = [10.0, 10.0, 10.0]
  # +1, +2, +6: mean 3 > SE 1.53 -> replaced; +0, +0, +9: mean 3 < SE 3 (not more) -> kept.
  assert kept_unless_beaten({"now": now, "a": [11.0, 12.0, 16.0]}, ["now", "a"]) == "a"
  assert kept_unless_beaten({"now": now, "b": [10.0, 10.0, 19.0]}, ["now", "b"]) == "now"
  # Among the candidates that clear it, the best mean; one missing is skipped; one pair: any margin.
  scores = {"now": now, "a": [11.0, 12.0, 16.0], "c": [13.0, 13.5, 14.0], "b": [10.0, 10.0, 19.0]}
  assert kept_unless_beaten(scores, ["now", "b", "a", "missing", "c"]) == "c"
  assert kept_unless_beaten({"now": [0.5], "a": [0.51]}, ["now", "a"]) == "a"
  assert kept_unless_beaten({"a": [1.0]}, ["now", "a"]) is None
