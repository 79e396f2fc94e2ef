"""`tff_robust.experiments.studies.ah_reward_by_lr`: the per-lr reward table and the lr/advantage correlation,
checked by hand on small metrics files."""

import csv
import os

import numpy as np
import pytest

from tff_robust.experiments.studies import ah_reward_by_lr as ah

FIELDS = ("round", "client_lr", "ah_reward", "ah_reward_baseline", "rm_loss", "update_norm")


def _write(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(FIELDS)
    w.writerows(rows)


def test_groups_rounds_by_sampled_lr_within_the_phase(tmp_path):
  path = str(tmp_path / "m.csv")
  _write(path, [(1, 0.1, 0.5, 0.0, 9.0, 9.0),      # outside rounds 2..4
                (2, 0.1, 0.04, 0.01, 10.0, 0.2),
                (3, 0.3, -0.02, 0.01, 30.0, 0.6),
                (4, 0.1, 0.02, 0.03, "", 0.4)])   # an empty cell is skipped in the mean
  got = ah.by_lr(ah.read_rows(path), 2, 4)
  assert sorted(got) == [0.1, 0.3]
  assert got[0.1]["n"] == 2 and got[0.3]["n"] == 1
  assert got[0.1]["ah_reward"] == pytest.approx(0.03)
  assert got[0.1]["advantage"] == pytest.approx(((0.04 - 0.01) + (0.02 - 0.03)) / 2)
  assert got[0.1]["rm_loss"] == pytest.approx(10.0)
  assert got[0.3]["update_norm"] == pytest.approx(0.6)
  assert got[0.1]["raised"] == 0.0 and got[0.3]["raised"] == 1.0  # r_t < 0: the round raised the loss


def test_correlation_sign_follows_the_advantage(tmp_path):
  path = str(tmp_path / "m.csv")
  lrs = [0.001, 0.01, 0.1, 0.3, 0.003, 0.03]
  _write(path, [(t + 1, lr, -np.log10(lr) / 10, 0.0, 0, 0) for t, lr in enumerate(lrs)])
  rows = ah.read_rows(path)
  assert ah.lr_advantage_corr(rows, 1, 6) == pytest.approx(-1.0)
  assert np.isnan(ah.lr_advantage_corr(rows, 1, 2))  # too few rounds


def test_prints_both_methods_and_names_missing_runs(tmp_path, capsys):
  for key in ("fa_ah", "fa_rm_ah"):
    _write(str(tmp_path / f"rmah_mnist_c1.0_noniid_{key}_s0" / "metrics.csv"),
           [(t, 0.1 if t % 2 else 0.01, 0.01 * t, 0.0, 5.0, 0.1) for t in range(1, 9)])
  assert ah.main([f"--root={tmp_path}", "--seeds=1", "--phases=0,8"]) == 0
  out = capsys.readouterr().out
  assert "FA+AH" in out and "FA+RM+AH" in out and "rounds 1-8" in out
  assert ah.main([f"--root={tmp_path}", "--seeds=2"]) == 2
  assert "noniid_fa_ah_s1" in capsys.readouterr().err


def test_one_method_is_read_alone_and_an_unknown_one_is_named(tmp_path, capsys):
  _write(str(tmp_path / "rmah_mnist_c0.5_noniid_fa_ah_s0" / "metrics.csv"),
         [(t, 0.3, -0.1 if t % 2 else 0.05, 0.0, 0.0, 0.1) for t in range(1, 7)])
  assert ah.main([f"--root={tmp_path}", "--seeds=1", "--row=c0.5_noniid", "--methods=fa_ah", "--phases=1,6"]) == 0
  out = capsys.readouterr().out
  assert "FA+RM+AH" not in out
  assert "FA+AH     0.3      5  -0.010  0.40" in out  # rounds 2-6: rewards .05 -.1 .05 -.1 .05
  with pytest.raises(SystemExit):
    ah.main([f"--root={tmp_path}", "--methods=fa_wd"])
  assert "--methods=fa_wd: fa_wd not in fa_ah, fa_rm_ah" in capsys.readouterr().err
