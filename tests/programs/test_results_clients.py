"""Table 3's client-side diagnosis (`tff_robust.experiments.page.clients`) on constructed records:
each method's round-mean drift and update norm against FA's, paired by seed, and its figure."""

import csv
import json
import math
import os

import pytest

from tff_robust import experiments as ex
from tff_robust import plot
from tff_robust.experiments.page import clients


class FakeRun:
  """What the diagnosis reads of a run: its seed, folder and whether it finished."""

  def __init__(self, root, name, seed, drift, update, loss, acc, rm=None):
    self.seed, self.output_dir = seed, os.path.join(root, f"{name}_s{seed}")
    os.makedirs(self.output_dir)
    with open(os.path.join(self.output_dir, "metrics.csv"), "w", newline="") as f:
      w = csv.writer(f)
      w.writerow(["round", "client_drift", "update_norm", "train_loss", "rm_loss"])
      for t, (d, u, l) in enumerate(zip(drift, update, loss), start=1):
        w.writerow([t, d, u, l, "" if rm is None else rm / t])
    with open(os.path.join(self.output_dir, "final_metrics.json"), "w") as f:
      json.dump({"test_accuracy": acc}, f)

  def finished(self):
    return True

  def status(self):
    return ex.DONE


def test_methods_are_set_against_fa_seed_by_seed(tmp_path):
  fa = [FakeRun(tmp_path, "fa", s, [0.2, 0.4], [0.1, 0.1], [0.3, 0.3], 0.25 + 0.01 * s) for s in (0, 1, 2)]
  # Drift ×1.5 and ×1.1 of FA's on seeds 0-1 (seed 2 unfinished), the loss 0.01 higher.
  rm = [FakeRun(tmp_path, "rm", 0, [0.3, 0.6], [0.1, 0.1], [0.31, 0.31], 0.30, rm=5.0),
        FakeRun(tmp_path, "rm", 1, [0.22, 0.44], [0.2, 0.2], [0.31, 0.31], 0.29, rm=5.0)]
  rows = clients.versus_fa({"FA": fa, "FA+RM": rm})
  assert len(rows) == 1 and rows[0][:2] == ["FA+RM", "2"]
  drift, update, loss, acc = rows[0][2:]
  assert drift == "+30.0 % ± 20.0"  # per seed +50 %, +10 %: mean 30, SE 40 / √2 / √2 = 20
  assert update == "+50.0 % ± 50.0"  # +0 %, +100 %
  assert loss == "+0.0100 ± 0.0000"
  assert acc == "+4.00 ± 1.00"  # +5 and +3 points
  assert clients.header()[2:5] == [label for _, label, _ in clients.COMPARED]


def test_one_seed_has_no_standard_error(tmp_path):
  fa = [FakeRun(tmp_path, "fa", 0, [0.2], [0.1], [0.3], 0.25)]
  rm = [FakeRun(tmp_path, "rm", 0, [0.3], [0.1], [0.3], 0.25)]
  assert clients.versus_fa({"FA": fa, "FA+RM": rm}) == [["FA+RM", "1", "+50.0 %", "+0.0 %", "+0.0000", "+0.00"]]


def test_a_method_without_a_finished_seed_in_common_gets_no_row(tmp_path):
  fa = [FakeRun(tmp_path, "fa", 0, [0.2], [0.1], [0.3], 0.25)]
  wd = [FakeRun(tmp_path, "wd", 1, [0.2], [0.1], [0.3], 0.25)]
  assert clients.versus_fa({"FA": fa, "FA+WD": wd}) == []
  assert clients.versus_fa({"FA+WD": wd}) == []


def test_round_mean_skips_empty_cells(tmp_path):
  run = FakeRun(tmp_path, "fa", 0, [0.2, 0.4], [0.1, 0.3], [0.3, 0.3], 0.25)
  metrics = plot.read_metrics(run.output_dir, need_ah=False)
  assert clients.round_mean(metrics, "client_drift") == pytest.approx(0.3)
  assert math.isnan(clients.round_mean(metrics, "rm_loss"))


def test_the_figure_draws_every_panel(tmp_path):
  fa = [FakeRun(tmp_path, "fa", 0, [0.2, 0.4], [0.1, 0.1], [0.3, 0.3], 0.25)]
  rm = [FakeRun(tmp_path, "rm", 0, [0.3, 0.6], [0.1, 0.1], [0.31, 0.31], 0.3, rm=5.0)]
  path = clients.draw(str(tmp_path / "c.png"), {"FA": fa, "FA+RM": rm}, "t")
  assert os.path.getsize(path) > 1000
