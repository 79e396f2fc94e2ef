"""The keyword AH grid's top, chosen by docs/runs/ah_kws_top/plan.md's rule on constructed runs."""

import os

import pytest

from tff_robust.experiments.studies import ah_kws_top as top


def make_run(root, top_name, seed, val_by_round, grid=None):
  grid_flag, folder = top.TOPS[top_name]
  run = root / folder / top.RUN.format(seed=seed)
  os.makedirs(run, exist_ok=True)
  (run / "hparams.cfg").write_text(f"--task=speech_commands\n--ah_lr_grid={grid or grid_flag}\n")
  rows = ["round,val_accuracy"] + [f"{t},{val_by_round.get(t, '')}" for t in range(1, 31)]
  (run / "metrics.csv").write_text("\n".join(rows) + "\n")


def make_tops(root, per_seed):
  """Runs whose validation is the same at rounds 20 and 30: ``per_seed[s]`` maps top -> accuracy."""
  for seed, by_top in enumerate(per_seed):
    for top_name, acc in by_top.items():
      make_run(root, top_name, seed, {20: acc, 30: acc})
  return top.scores(str(root))


def test_score_is_the_mean_validation_at_rounds_20_and_30(tmp_path):
  make_run(tmp_path, "0.3", 0, {10: 0.9, 20: 0.30, 30: 0.40})
  assert top.score(str(tmp_path / top.RUN.format(seed=0))) == pytest.approx(35.0)
  make_run(tmp_path, "0.3", 1, {10: 0.9, 20: 0.30})  # round 30 not reached: no score
  assert top.scores(str(tmp_path)) == {"0.3": {0: pytest.approx(35.0)}}


def test_a_top_that_beats_the_one_in_force_by_more_than_its_se_is_chosen(tmp_path):
  per_top = make_tops(tmp_path, [{"0.3": 0.20, "0.1": 0.40, "0.03": 0.30},
                                 {"0.3": 0.30, "0.1": 0.46, "0.03": 0.36}])
  assert top.choose(per_top) == "0.1"  # +18 ± 2 over 0.3; 0.03 beats 0.3 too but scores less
  text = top.table(per_top)
  assert "| 0.1 | 0.001,0.003,0.01,0.03,0.1 | 40.0 | 46.0 | 43.0 | +18.0 ± 2.0 | **chosen** |" in text
  assert "Chosen: 0.1." in text


def test_a_gain_within_one_se_keeps_the_top_in_force(tmp_path):
  per_top = make_tops(tmp_path, [{"0.3": 0.20, "0.1": 0.40, "0.03": 0.10},
                                 {"0.3": 0.30, "0.1": 0.26, "0.03": 0.12}])  # 0.1: +6 ± 10
  assert top.choose(per_top) == "0.3"


def test_a_winner_at_the_lowest_measured_top_is_an_edge_choice(tmp_path):
  per_top = make_tops(tmp_path, [{"0.3": 0.20, "0.1": 0.30, "0.03": 0.50},
                                 {"0.3": 0.30, "0.1": 0.34, "0.03": 0.58}])
  assert top.choose(per_top) == "0.03"
  text = top.table(per_top)
  assert "an edge choice, so the next lower top is run" in text
  assert "| 0.03 | 0.001,0.003,0.01,0.03 | 50.0 | 58.0 | 54.0 | +29.0 ± 1.0 | **best, at the edge** |" in text


def test_nothing_is_chosen_before_two_tops_have_every_seed(tmp_path):
  per_top = make_tops(tmp_path, [{"0.3": 0.2, "0.1": 0.9}, {"0.3": 0.2}])
  assert top.choose(per_top) is None
  assert "| 90.0 | not finished |" in top.table(per_top) and "Not chosen yet" in top.table(per_top)


def test_nothing_is_chosen_while_a_planned_top_is_unmeasured(tmp_path):
  """0.1 is measured on both seeds and does not beat 0.3, but 0.03 could still win: no choice yet."""
  per_top = make_tops(tmp_path, [{"0.3": 0.31, "0.1": 0.26}, {"0.3": 0.19, "0.1": 0.26}])
  assert top.choose(per_top) is None
  text = top.table(per_top)
  assert "| 0.03 | 0.001,0.003,0.01,0.03 | not finished | not finished |" in text
  assert "**chosen**" not in text
  assert "Not chosen yet: every planned top (0.3, 0.1, 0.03) must be measured on every seed." in text


def test_a_run_made_with_another_grid_is_refused(tmp_path):
  make_run(tmp_path, "0.1", 0, {20: 0.3, 30: 0.3}, grid="0.001,0.003,0.01,0.03,0.1,0.3")
  with pytest.raises(ValueError, match="top0.1.*--ah_lr_grid=0.001,0.003,0.01,0.03,0.1,0.3, not top 0.1's"):
    top.scores(str(tmp_path))


def test_the_recorded_grid_is_the_last_given_as_absl_reads_it(tmp_path):
  (tmp_path / "hparams.cfg").write_text("--ah_lr_grid=0.1,0.3\n--task=speech_commands\n--ah_lr_grid=0.01,0.1\n")
  assert top.recorded_grid(str(tmp_path)) == "0.01,0.1"
