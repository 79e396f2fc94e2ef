"""The AH study's reward diagnostic: eq. 7's r_t grouped by the client lr each round sampled."""

import argparse
import os

from tff_robust import experiments as ex
from tff_robust.experiments.studies import ah_options


def _write_metrics(run_dir: str, rows: list[tuple[int, float, float]]) -> None:
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
    f.write("round,ah_reward,client_lr\n")
    for rnd, r, lr in rows:
      f.write(f"{rnd},{r},{lr}\n")


def test_rewards_are_grouped_by_the_sampled_lr_over_seeds(tmp_path):
  args = argparse.Namespace(root=str(tmp_path), seeds=2)
  cell = ex.rmah_cell("mnist", "c1.0_noniid", "fa_ah")
  dirs = [ex.Run(cell, s, os.path.join(str(tmp_path), "fa_start_hlr0.01")).output_dir for s in (0, 1)]
  # round 1 has no L_t: its reward (here 9.0) must not count
  _write_metrics(dirs[0], [(1, 9.0, 0.1), (2, 0.04, 0.1), (3, -0.2, 0.3)])
  _write_metrics(dirs[1], [(2, 0.02, 0.1), (3, 0.1, 0.3), (4, -0.1, 0.3)])
  lines = ah_options.rewards_by_lr("fa_start_hlr0.01", "c1.0_noniid", args)
  assert lines == ["0.1: 2, +0.030, 0.00", "0.3: 3, -0.067, 0.67"]


def test_a_variant_without_runs_has_no_rewards(tmp_path):
  args = argparse.Namespace(root=str(tmp_path), seeds=3)
  assert ah_options.rewards_by_lr("tuned_start_hlr0.01", "c0.5_noniid", args) == []
