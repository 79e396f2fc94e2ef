"""The keyword study's arms and its validation rule (`experiments/studies/kws_rm_check.py`)."""

import csv
import os

import pytest

from tff_robust.experiments.studies import kws_rm_check as k


def _run(root, name, val_by_round):
  os.makedirs(os.path.join(root, name))
  with open(os.path.join(root, name, "metrics.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, ["round", "client_drift", "val_accuracy", "test_accuracy"])
    w.writeheader()
    for t in range(1, max(12, *val_by_round) + 1):
      v = val_by_round.get(t, "")
      w.writerow({"round": t, "client_drift": 0.5, "val_accuracy": v, "test_accuracy": v})


def test_grid_arms_pair_with_fa_at_the_same_rate():
  label, flags, base = k.arm_spec("rm_authors_w1e-3_lr0.02")
  assert "--rm_weight=1e-3" in flags and "--client_lr=0.02" in flags and base == "fa_lr0.02"
  assert k.arm_spec("fa_lr0.02") == ("FA (lr 0.02)", ("--client_lr=0.02",), "fa")
  assert k.arm_spec("rm_authors_w1e-4_lr0.05")[2] == "fa"  # the flagfile's rate is the arm "fa"
  # A steps suffix sets --local_steps and pairs with FA at the same lr and steps.
  label, flags, base = k.arm_spec("rm_authors_w1e-3_lr0.01_steps40")
  assert flags[-3:] == ("--rm_weight=1e-3", "--client_lr=0.01", "--local_steps=40")
  assert base == "fa_lr0.01_steps40" and label.endswith("lr 0.01, 40 steps")
  assert k.arm_spec("fa_lr0.05_steps5") == ("FA (lr 0.05, 5 steps)", ("--client_lr=0.05", "--local_steps=5"), "fa")
  assert k.arm_spec("fa")[1] == ("--client_lr=0.05",)  # pinned: rmah_kws.cfg's rate has moved since
  with pytest.raises(ValueError, match="unknown arm 'rm_bogus'"):
    k.arm_spec("rm_bogus")


def _mark(table, label):
  return next(line for line in table.splitlines() if line.startswith(f"| {label} |")).split("|")[3]


def test_validation_rule_picks_the_rate_then_the_weight_at_that_rate(tmp_path):
  root = str(tmp_path)
  evals = lambda v: {8: v - 0.01, 10: v, 12: v + 0.01}  # noqa: E731  mean = v
  _run(root, "fa_s0", evals(0.12))
  _run(root, "fa_lr0.01_s0", evals(0.15))
  _run(root, "fa_lr0.02_s0", evals(0.14))
  _run(root, "rm_authors_w1e-3_lr0.01_s0", evals(0.18))
  _run(root, "rm_authors_w1e-2_lr0.01_s0", evals(0.10))
  _run(root, "rm_authors_w1e-3_s0", evals(0.30))  # at lr 0.05: not FA's chosen rate, never chosen
  table = k.validation_choice(root)
  assert "| FA (lr 0.01) | 15.00 | FA's rate and steps |" in table
  assert _mark(table, "FA+RM, authors' layers, 1e-3, lr 0.01").strip() == "RM's weight (FA = 0)"
  assert _mark(table, "FA+RM, authors' layers, 1e-3").strip() == ""


def test_validation_rule_keeps_fa_when_no_weight_beats_it(tmp_path):
  root = str(tmp_path)
  _run(root, "fa_lr0.01_s0", {8: 0.15, 10: 0.15, 12: 0.15})
  _run(root, "rm_authors_w1e-4_lr0.01_s0", {8: 0.14, 10: 0.15, 12: 0.15})
  _run(root, "fa_lr0.05_s0", {8: 0.10, 10: 0.11})  # round 12 not evaluated: left out
  table = k.validation_choice(root)
  assert _mark(table, "FA (lr 0.01)").strip() == "FA's rate and steps; RM's weight (FA = 0)"
  assert "lr 0.05" not in table


def test_validation_rule_searches_local_steps_with_the_rate(tmp_path):
  """FA's point is the best (lr, steps); RM's weight is then chosen at that point only."""
  root = str(tmp_path)
  _run(root, "fa_lr0.01_s0", {8: 0.15, 10: 0.15, 12: 0.15})
  _run(root, "fa_lr0.01_steps40_s0", {8: 0.17, 10: 0.17, 12: 0.17})
  _run(root, "rm_authors_w1e-3_lr0.01_steps40_s0", {8: 0.19, 10: 0.19, 12: 0.19})
  _run(root, "rm_authors_w1e-3_lr0.01_s0", {8: 0.25, 10: 0.25, 12: 0.25})  # at 20 steps: not FA's point
  table = k.validation_choice(root)
  assert _mark(table, "FA (lr 0.01, 40 steps)").strip() == "FA's rate and steps"
  assert _mark(table, "FA+RM, authors' layers, 1e-3, lr 0.01, 40 steps").strip() == "RM's weight (FA = 0)"
  assert _mark(table, "FA+RM, authors' layers, 1e-3, lr 0.01").strip() == ""


def test_validation_rule_picks_ahs_start_among_the_ah_arms_only(tmp_path):
  root = str(tmp_path)
  _run(root, "fa_lr0.05_steps2_s0", {8: 0.25, 10: 0.25, 12: 0.25})
  _run(root, "ah_kept_s0", {8: 0.20, 10: 0.20, 12: 0.20})
  _run(root, "ah_start_fa_point_s0", {8: 0.18, 10: 0.18, 12: 0.18})
  table = k.validation_choice(root)
  assert _mark(table, "FA (lr 0.05, 2 steps)").strip() == "FA's rate and steps; RM's weight (FA = 0)"
  assert _mark(table, k.arm_spec("ah_kept")[0]).strip() == "AH's start"
  assert _mark(table, k.arm_spec("ah_start_fa_point")[0]).strip() == ""
  assert "--ah_init_steps=2" in k.arm_spec("ah_start_fa_point")[1] and k.arm_spec("ah_kept")[2] == "fa_lr0.05_steps2"


def test_the_horizon_rule_averages_the_seeds_every_candidate_ran(tmp_path):
  """At rounds 26-30 over seeds 0-1: RM's weight is chosen on the seeds mean (seed 0 alone would
  pick 1e-4); a group with a candidate lacking seed 1 is compared on seed 0 only."""
  root = str(tmp_path)
  late = lambda v: {26: v, 28: v, 30: v}  # noqa: E731
  _run(root, "fa_lr0.05_steps2_s0", late(0.35))
  _run(root, "fa_lr0.05_steps2_s1", late(0.38))
  _run(root, "rm_authors_w1e-4_lr0.05_steps2_s0", late(0.36))
  _run(root, "rm_authors_w1e-4_lr0.05_steps2_s1", late(0.33))
  _run(root, "fa_lr0.02_steps2_s0", late(0.30))
  _run(root, "fa_lr0.1_steps2_s1", late(0.90))  # no seed 0: takes no part
  _run(root, "ah_kept_s0", late(0.20))
  _run(root, "ah_kept_s1", late(0.40))
  _run(root, "ah_start_fa_point_s0", late(0.25))
  _run(root, "rm_top_none_s0", late(0.37))
  _run(root, "rm_top_none_s1", late(0.39))
  table = k.validation_choice(root, k.HORIZON, (0, 1))
  assert table.splitlines()[0].endswith("FA's point chosen on seeds 0, RM's weight on 0, 1, AH's start on 0, "
                                        "RM's top term on 0, 1)")
  # No top term against the logits at the authors' weight: +1 and +6 points, +3.5 ± 2.5: replaced.
  assert _mark(table, k.arm_spec("rm_top_none")[0]).strip() == "RM's top term"
  assert _mark(table, "FA+RM, authors' layers, 1e-4, lr 0.05, 2 steps").strip() == ""
  assert _mark(table, "FA (lr 0.05, 2 steps)").strip() == "FA's rate and steps; RM's weight (FA = 0)"
  assert "| FA (lr 0.05, 2 steps) | 36.50 (s0 35.0, s1 38.0) |" in table
  assert _mark(table, k.arm_spec("ah_start_fa_point")[0]).strip() == "AH's start"  # 25 > 20 on seed 0
  assert "lr 0.1" not in table
  # +0 and +6 points (+3.0 ± 3.0): not more than one standard error, the logits stay.
  with open(os.path.join(root, "rm_top_none_s0", "metrics.csv")) as f:
    text = f.read()
  with open(os.path.join(root, "rm_top_none_s0", "metrics.csv"), "w") as f:
    f.write(text.replace("0.37", "0.36"))
  table = k.validation_choice(root, k.HORIZON, (0, 1))
  assert _mark(table, "FA+RM, authors' layers, 1e-4, lr 0.05, 2 steps").strip() == "RM's top term"
  assert _mark(table, k.arm_spec("rm_top_none")[0]).strip() == ""
  # The 8-12 rule on the same runs finds no arm evaluated there.
  assert len(k.validation_choice(root).splitlines()) == 4


def test_the_weight_can_be_chosen_at_a_given_schedule(tmp_path):
  root = str(tmp_path)
  evals = lambda v: {8: v, 10: v, 12: v}  # noqa: E731
  _run(root, "fa_lr0.05_steps2_s0", evals(0.30))  # FA's chosen point
  _run(root, "rm_authors_w1e-4_lr0.05_steps2_s0", evals(0.28))
  _run(root, "fa_lr0.1_s0", evals(0.10))  # a schedule where FA stays at chance
  _run(root, "rm_authors_w1e-4_lr0.1_s0", evals(0.11))
  _run(root, "rm_authors_w1e-3_lr0.1_s0", evals(0.19))
  at_point = k.validation_choice(root)
  assert _mark(at_point, "FA (lr 0.05, 2 steps)").strip() == "FA's rate and steps; RM's weight (FA = 0)"
  at_failing = k.validation_choice(root, rm_at="fa_lr0.1")
  assert _mark(at_failing, "FA+RM, authors' layers, 1e-3, lr 0.1").strip() == "RM's weight (FA = 0)"
  assert "RM's weight at FA (lr 0.1) on 0" in at_failing
  assert _mark(at_failing, "FA (lr 0.05, 2 steps)").strip() == "FA's rate and steps"
