"""The baselines study's rule (studies/baselines.py) on constructed validation scores: the lr x
steps search extends past an edge choice and stops when the best point's neighbours are
measured, the decay and FedProx's μ are chosen on top of it, and nothing is chosen while a run
it needs is unfinished; SCAFFOLD's study (``method="scaffold"``) takes stages 1-2 only and is
judged against the tuned FA seed by seed."""

import json
import math
import os

import pytest

from tff_robust.experiments.studies import baselines as bl


def _fake_scores(monkeypatch, value, finished=lambda p: True):
  """score(run) from the run's variant folder name via ``value(point)``; records what was asked."""
  asked = set()
  points = {}

  def name_of(p):
    points[p.name] = p
    return p.name

  real_run_of = bl.run_of

  def run_of(point, row, root, validation_fraction=0.1, **kw):
    name_of(point)
    return real_run_of(point, row, root, validation_fraction, **kw)

  def score(run):
    p = points[os.path.basename(run.root_output_dir)]
    asked.add(p)
    return value(p) if finished(p) else None

  monkeypatch.setattr(bl, "run_of", run_of)
  monkeypatch.setattr(bl, "score", score)
  return asked


def _bowl(p):
  """Best at lr 0.3, 100 steps (the steps ladder's end), d20, μ = 5e-2."""
  v = -(math.log10(p.lr / 0.3)) ** 2 - (math.log10(p.steps / 100)) ** 2
  v += {"d50": 0.0, "d20": 0.1, "const": -0.1}[p.decay]
  return 90 + 10 * (v - (math.log10(p.mu / 5e-2) ** 2 if p.mu else 0.0))


def test_the_search_extends_past_an_edge_and_chooses_decay_and_mu(monkeypatch, tmp_path):
  asked = _fake_scores(monkeypatch, _bowl)
  need, fa, wd = bl.CellSearch("c1.0_noniid", str(tmp_path)).needed()
  assert need == []
  assert fa == bl.Point(0.3, 100, "d20")
  assert wd == bl.Point(0.3, 100, "d20", mu=5e-2)
  grid = {(p.lr, p.steps) for p in asked if p.decay == "d50" and not p.mu}
  # 0.3 and 50 were edges of the starting grid: 1.0 and 100 were measured, then 200 above the
  # ladder's best; 10 steps was not.
  assert {(1.0, 50), (0.3, 100), (1.0, 100), (0.1, 100), (0.3, 200)} <= grid
  assert not any(k == 10 for _, k in grid) and (0.01, 20) not in grid
  assert {p.mu for p in asked if p.mu} == {5e-4, 5e-3, 5e-2, 5e-1}  # 5e-2 was the edge


def test_nothing_is_chosen_while_a_needed_run_is_unfinished(monkeypatch, tmp_path):
  _fake_scores(monkeypatch, _bowl, finished=lambda p: p != bl.Point(0.1, 20))
  need, fa, wd = bl.CellSearch("c0.5_iid", str(tmp_path)).needed()
  assert need == [bl.Point(0.1, 20)] and fa is None and wd is None


def test_a_run_is_the_table_1_cell_without_its_overlay_and_with_validation(tmp_path):
  run = bl.run_of(bl.Point(0.03, 20, "const", mu=5e-3), "c0.5_noniid", str(tmp_path))
  flags = run.flags()
  assert run.cell.cell_id == "rmah_mnist_c0.5_noniid_fa_wd"
  assert not any("rmah_mnist_c0.5_noniid" in f for f in flags if f.startswith("--flagfile"))
  for f in ("--validation_fraction=0.1", "--client_lr=0.03", "--local_steps=20", "--wd_mu=0.005",
            "--client_lr_schedule=constant", "--local_steps_decay_rate=1.0", "--rounds=60"):
    assert f in flags
  assert run.output_dir == os.path.join(str(tmp_path), "lr0.03_k20_const_wd0.005", "rmah_mnist_c0.5_noniid_fa_wd_s0")


def test_score_is_the_mean_of_the_last_three_validation_evaluations(tmp_path):
  run = bl.run_of(bl.Point(0.1, 50), "c1.0_iid", str(tmp_path))
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "metrics.csv"), "w") as f:
    f.write("round,val_accuracy\n45,0.5\n50,0.80\n51,\n55,0.82\n60,0.90\n")
  assert bl.score(run) is None  # not finished
  run.record("python")
  with open(run.done_path, "w") as f:
    f.write("{}")
  assert bl.score(run) == pytest.approx(84.0)


def test_scores_within_one_validation_digit_tie_and_the_cheaper_point_wins():
  near = {bl.Point(0.3, 50): 94.2, bl.Point(0.3, 20): 94.0, bl.Point(0.3, 100): 94.1, bl.Point(0.1, 5): 93.9}
  assert bl.best(near) == bl.Point(0.3, 20)  # 93.9 is more than 0.25 below 94.2
  decays = {bl.Point(0.3, 20, "d20"): 94.1, bl.Point(0.3, 20, "d50"): 94.0, bl.Point(0.3, 20, "const"): 93.0}
  assert bl.best(decays) == bl.Point(0.3, 20, "d50")  # the flagfile's decay on a tie
  assert bl.best({bl.Point(0.3, 20): 90.0, bl.Point(0.3, 50): 91.0}) == bl.Point(0.3, 50)
  assert bl.best({bl.Point(0.3, 20): 90.0, bl.Point(0.3, 50): None}) is None


def test_scaffold_takes_stages_1_and_2_with_its_flag_and_no_mu(monkeypatch, tmp_path):
  asked = _fake_scores(monkeypatch, _bowl)
  need, chosen, wd = bl.CellSearch("c1.0_noniid", str(tmp_path), "scaffold").needed()
  assert need == [] and chosen == bl.Point(0.3, 100, "d20") and wd is None
  assert not any(p.mu for p in asked)
  table, picked = bl.report(str(tmp_path), ["c1.0_noniid"], "scaffold")
  assert picked == {"c1.0_noniid": (bl.Point(0.3, 100, "d20"),)}
  assert "| c1.0_noniid | scaffold | 0.3 | 100 | d20 | 0 | 91.0 | **chosen** |" in table
  assert "| fa" not in table


def test_a_scaffold_run_is_fas_cell_with_the_algorithm_flag(tmp_path):
  run = bl.run_of(bl.Point(0.3, 1), "c1.0_noniid", str(tmp_path), method="scaffold", seed=2)
  flags = run.flags()
  assert run.cell.cell_id == "rmah_mnist_c1.0_noniid_fa"
  for f in ("--algorithm=scaffold", "--validation_fraction=0.1", "--client_lr=0.3", "--local_steps=1",
            "--client_lr_decay_every=50", "--rounds=60", "--seed=2"):
    assert f in flags
  fa = bl.run_of(bl.Point(0.3, 1), "c1.0_noniid", str(tmp_path), seed=2)
  assert [f for f in flags if f not in fa.flags()] == ["--algorithm=scaffold"]


def test_the_pairs_are_scaffold_at_its_choice_and_fa_at_the_fa_studys(monkeypatch, tmp_path):
  _fake_scores(monkeypatch, lambda p: 90.0 + (p.lr == 0.1) - (p.decay != "d50"))  # flat in steps: 0.1 x 1
  pairs = bl.paired_runs("c1.0_noniid", str(tmp_path), "scaffold", range(3))
  assert [(a.seed, b.seed) for a, b in pairs] == [(0, 0), (1, 1), (2, 2)]
  a, b = pairs[1]
  assert a.root_output_dir == os.path.join(str(tmp_path), "lr0.1_k1_d50")
  assert b.root_output_dir == os.path.join(str(tmp_path), "fa", "lr0.1_k1_d50")
  assert "--algorithm=scaffold" in a.flags() and "--algorithm=scaffold" not in b.flags()


def _finished(run, test_accuracy):
  os.makedirs(run.output_dir)
  run.record("python")
  with open(run.done_path, "w") as f:
    json.dump({"test_accuracy": test_accuracy}, f)


def test_the_comparison_is_the_paired_test_difference_and_the_pages_verdict(tmp_path):
  def pairs(tests):
    root = tmp_path / str(len(list(tmp_path.iterdir())))
    out = []
    for seed, (ta, tb) in enumerate(tests):
      a = bl.run_of(bl.Point(0.1, 2), "c1.0_noniid", str(root), method="scaffold", seed=seed)
      b = bl.run_of(bl.Point(0.3, 1), "c1.0_noniid", str(root / "fa"), seed=seed)
      for run, value in ((a, ta), (b, tb)):
        if value is not None:
          _finished(run, value)
      out.append((a, b))
    return out

  # differences +1, +2, +3 points: D = +2.00, SE = 1 / √3 = 0.58 < D
  text = bl.comparison("c1.0_noniid", "scaffold", pairs([(0.91, 0.90), (0.92, 0.90), (0.93, 0.90)]))
  assert "| c1.0_noniid | 1 | 92.0 | 90.0 | +2.0 |" in text
  assert "paired over 3 of 3 seeds: D = +2.00 ± 0.58 SE: held (better)." in text
  # −1, +1 with the third seed unfinished: D = 0, SE = 1: within noise, over 2 seeds
  text = bl.comparison("c1.0_noniid", "scaffold", pairs([(0.89, 0.90), (0.91, 0.90), (None, 0.90)]))
  assert "| c1.0_noniid | 2 | — | 90.0 | — |" in text
  assert "paired over 2 of 3 seeds: D = +0.00 ± 1.00 SE: within noise (within noise)." in text
  text = bl.comparison("c1.0_noniid", "scaffold", pairs([(0.80, 0.90), (0.81, 0.90)]))
  assert "D = -9.50 ± 0.50 SE: did not hold (worse)." in text
