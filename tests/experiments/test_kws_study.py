"""The keyword study's naming as the page reads it (`tff_robust.experiments.kws_study`) agrees
with the study's own grammar (`studies/kws_rm_check.arm_spec`)."""

import pytest

from tff_robust.experiments import kws_study
from tff_robust.experiments.studies import kws_rm_check


@pytest.mark.parametrize("arm, weight", [("rm_authors_w1e-3_lr0.1", "1e-3"), ("rm_authors_w1e-4_lr0.05_steps2", "1e-4"),
                                         ("rm_authors_w0.001_lr0.01_steps40", "0.001")])
def test_an_rm_arm_is_read_on_the_fa_arm_the_study_pairs_it_with(arm, weight):
  fa_arm = kws_rm_check.arm_spec(arm)[2]
  assert kws_study.rm_weight(arm, fa_arm) == weight
  assert f"--rm_weight={weight}" in kws_rm_check.arm_spec(arm)[1]


def test_other_schedules_and_arms_are_not_read_as_rm_on_that_schedule():
  assert kws_study.rm_weight("rm_authors_w1e-3_lr0.1_steps2", "fa_lr0.1") is None  # 2 steps, not 20
  assert kws_study.rm_weight("rm_authors_w1e-3_lr0.15", "fa_lr0.1") is None
  assert kws_study.rm_weight("fa_lr0.1", "fa_lr0.1") is None
  assert kws_study.rm_weight("rm_top_none", "fa_lr0.05_steps2") is None
  assert kws_rm_check.arm_spec(kws_study.FAILING_FA)[1] == ("--client_lr=0.1",)  # the flagfiles' 20 steps
