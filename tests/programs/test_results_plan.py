"""The results page's seed-004 protocol (`tff_robust.experiments.page.plan`): the server lr is chosen per
optimizer on seed 0's validation accuracy once its grid is finished, and only then do the other
seeds run, at that lr."""

import json
import os

import pytest

from helpers.paths import ROOT

from tff_robust.experiments.page import plan as rp


def _finish(run, val, test):
  os.makedirs(run.output_dir, exist_ok=True)
  with open(run.done_path, "w") as f:
    json.dump({"val_accuracy": val, "test_accuracy": test}, f)


def test_choice_reads_seed0_validation_of_finished_grids_only(tmp_path):
  plan = rp.Plan(s004_server_lrs=(0.1, 1.0))
  grid = rp.fedopt_grid_runs(plan, str(tmp_path))
  assert {r.seed for r in grid} == {0}
  assert len(grid) == len(rp.FEDOPT_OPTS) * 2
  by = {(r.cell.row, r.cell.column): r for r in grid}
  # yogi: lr 1 wins on validation although lr 0.1 has the better test accuracy.
  _finish(by[("yogi", "lr0.1")], val=0.70, test=0.99)
  _finish(by[("yogi", "lr1")], val=0.80, test=0.50)
  # adam: one grid run unfinished, so no choice yet.
  _finish(by[("adam", "lr0.1")], val=0.90, test=0.90)
  chosen = rp.fedopt_choose(grid)
  assert chosen == {"yogi": "lr1"}

  final = rp.fedopt_final_runs(plan, str(tmp_path), chosen)
  assert [(r.cell.row, r.cell.column, r.seed) for r in final] == [("yogi", "lr1", 1), ("yogi", "lr1", 2)]
  assert "--server_lr=1" in final[0].flags() and "--seed=1" in final[0].flags()
  # Seed 0 of the chosen cell is the grid run itself: same directory naming, other seed.
  assert final[0].output_dir == by[("yogi", "lr1")].output_dir[:-1] + "1"


def test_one_seed_plans_have_no_second_stage(tmp_path):
  plan = rp.PLANS["reduced"]
  grid = rp.fedopt_grid_runs(plan, str(tmp_path))
  for r in grid:
    _finish(r, val=0.5, test=0.5)
  assert rp.fedopt_final_runs(plan, str(tmp_path), rp.fedopt_choose(grid)) == []


def test_fedex_budget_is_the_flagfiles_rounds_or_the_plans_override():
  with open(os.path.join(ROOT, "flags", "fedex_mnist_study.cfg")) as f:
    rounds = [ln.split("=", 1)[1].strip() for ln in f if ln.startswith("--rounds=")]
  assert rp.fedex_rounds(rp.PLANS["full"]) == rounds[-1]
  assert rp.fedex_rounds(rp.Plan(s002_extra=("--rounds=3", "--rs_arms=2"))) == "3"


def test_fedopt_paired_comparison_is_per_seed_against_fedavg():
  from tff_robust.experiments.page import fedopt  # pylint: disable=g-import-not-at-top (matplotlib Agg)
  by_seed = {"avg": {0: 80.0, 1: 90.0, 2: 70.0}, "adam": {0: 82.0, 1: 89.0, 2: 73.0},
             "yogi": {0: 99.0}}  # one shared seed: no paired figure
  lines = fedopt.paired_vs_fedavg(by_seed)
  assert len(lines) == 2 and lines[1] == ""
  assert "FedAdam +1.33 ± 1.20: held (ahead on 2 of 3 seeds)" in lines[0]
  assert "FedYogi" not in lines[0] and "FedAvg > 0:" in lines[0]
  assert fedopt.paired_vs_fedavg({"avg": {0: 1.0}}) == []


@pytest.mark.parametrize("argv, message", [
    (["--methods=fa,bogus"], "--methods='fa,bogus': unknown ['bogus']; valid: fa, fa_wd"),
    (["--sections=table9"], "--sections='table9': unknown ['table9']"),
    (["--parallel=0"], "--parallel=0 is not valid"),
])
def test_bad_arguments_fail_before_any_run(tmp_path, capsys, argv, message):
  from tff_robust.experiments.page import results  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit) as e:
    results.main([f"--root={tmp_path / 'runs'}", f"--docs={tmp_path / 'docs'}", *argv])
  assert e.value.code == 2 and message in capsys.readouterr().err
  assert not (tmp_path / "runs").exists()


def test_the_corpus_record_holds_its_test_clips_and_fingerprint(tmp_path):
  """A corpus on hand is not spoken again; its record beside ROOT/kws_corpus gives the page its
  test-clip count and the runner its fingerprint (`experiments.data_identity`) in a clone without it."""
  corpus, root = tmp_path / "corpus", tmp_path / "runs"
  (corpus / "yes").mkdir(parents=True)
  (corpus / "testing_list.txt").write_text("yes/a.wav\nyes/b.wav\n\n")
  (corpus / "corpus.json").write_text(json.dumps({"fingerprint": "d91e78de", "version": 2}))
  rp.build_corpus(rp.PLANS["full"], str(corpus), str(root))
  assert json.loads((root / rp.CORPUS_RECORD).read_text()) == {"fingerprint": "d91e78de", "test_clips": 2}
  assert rp.count_test_clips(str(tmp_path / "absent"), str(root)) == "2"


def test_a_command_path_is_relative_to_the_checkout_it_runs_from(tmp_path):
  assert rp.command_path(str(tmp_path / "copy" / "docs" / "runs"), str(tmp_path / "copy")) == "docs/runs"
  assert rp.command_path(str(tmp_path / "copy"), str(tmp_path / "copy")) == "."
  assert rp.command_path(str(tmp_path / "other"), str(tmp_path / "copy")) == str(tmp_path / "other")
