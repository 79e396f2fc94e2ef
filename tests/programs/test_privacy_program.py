"""DP-FedAvg from the command line: the flags, every combination refused (exit 2 before anything is
written or traced), the console's ε, and a whole DP run."""

import csv
import json
import math
import os
import re
import subprocess
import sys
import uuid

import pytest

from tff_robust.common import console

from helpers import in_process
from helpers.flag_parse import parse, parse_tune
from helpers.paths import ROOT
from helpers.procs import workers_with

DP = ("--dp_noise_multiplier=0.5", "--dp_clip=1", "--weighting=uniform", "--nozeroing")
TINY = ("--local_steps=2", "--batch_size=16", "--rounds_per_eval=1")


def main(*args, timeout=600):
  """``python -m tff_robust.main *args`` as a user runs it; no worker outlives it, no traceback."""
  marker = uuid.uuid4().hex
  env = {**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}, "TFF_ROBUST_TEST_RUN": marker}
  proc = subprocess.run([sys.executable, "-m", "tff_robust.main", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=env)
  assert not workers_with(marker), f"a worker_binary outlived main {args}"
  assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  return proc


def test_dp_flags_map_to_the_config_and_name_the_run():
  cfg = parse(*DP, "--dp_delta=1e-4")
  dp = cfg.process.dp
  assert (dp.noise_multiplier, dp.clip, dp.clip_quantile, dp.clip_lr, dp.delta) == (0.5, 1.0, None, 0.2, 1e-4)
  assert os.path.basename(cfg.loop.output_dir) == "mnist_sgd_dp_s0"
  adaptive = parse("--dp_noise_multiplier=0.5", "--dp_clip_quantile=0.6", "--dp_clip_lr=0.1",
                   "--weighting=uniform", "--zeroing_norm=100").process.dp
  assert adaptive.adaptive and (adaptive.clip, adaptive.clip_quantile, adaptive.clip_lr) == (None, 0.6, 0.1)
  assert parse().process.dp is None


@pytest.mark.parametrize("args,pattern", [
    (["--dp_clip=1"], r"--dp_clip=1.0 is not valid: needs --dp_noise_multiplier"),
    (["--dp_delta=1e-5"], r"--dp_delta=1e-05 is not valid: needs --dp_noise_multiplier"),
    (["--dp_noise_multiplier=0.5", "--weighting=uniform", "--nozeroing"], r"--dp_clip=None is not valid: DP-FedAvg needs a clip"),
])
def test_dp_flags_need_the_noise_multiplier_and_a_clip(args, pattern):
  with pytest.raises(ValueError, match=pattern):
    parse(*args)


@pytest.mark.parametrize("args,pattern", [
    (["--dp_noise_multiplier=-0.1"], r"--dp_noise_multiplier=-0.1 is not valid: a finite number ≥ 0"),
    (["--dp_clip_quantile=1"], r"--dp_clip_quantile=1.0 is not valid: a number in \(0, 1\)"),
    (["--dp_delta=1"], r"--dp_delta=1.0 is not valid: a number in \(0, 1\)"),
    (["--weighting=num_examples"], r"--weighting='num_examples' is not valid: .*every client weighs 1"),
    (["--weighting=val_accuracy"], r"--weighting='val_accuracy' is not valid: .*use --weighting=uniform"),
    (["--aggregation_norm=all"], r"--aggregation_norm='all' is not valid: .*use --aggregation_norm=sampled"),
    (["--aggregator=median"], r"--aggregator='median' is not valid: .*use --aggregator=mean"),
    (["--aggregator=norm_clip"], r"--aggregator='norm_clip' is not valid: .*clip with --dp_clip"),
    (["--zeroing"], r"--zeroing=True is not valid: .*adaptive zeroing norm.*--nozeroing or a fixed --zeroing_norm"),
    (["--algorithm=scaffold"], r"--algorithm='scaffold' is not valid: .*control variates"),
    (["--fedex"], r"--fedex=True is not valid: .*every configuration it tries spends privacy"),
    (["--ah", "--ah_loss_source=clients"], r"--ah_loss_source='clients' is not valid: .*without noise"),
])
def test_each_unsound_combination_is_refused_naming_the_flag(args, pattern):
  with pytest.raises(ValueError, match=pattern):
    parse(*DP, *args)


def test_a_tuning_study_with_dp_is_refused():
  with pytest.raises(ValueError, match=r"--dp_noise_multiplier=0.5 is not valid: a tuning study is refused "
                                       r"with DP: its arms train on the same clients"):
    parse_tune(*DP)


def test_the_round_line_and_the_summary_show_epsilon(tmp_path):
  line = console.format_round(3, 30, {"num_clients": 10.0, "dp_epsilon": 12.345, "round_seconds": 1.0})
  assert "10 clients  ε 12.3  1.0s" in line
  assert "ε inf" in console.format_round(1, 3, {"dp_epsilon": math.inf})
  lines = console.summary(output_dir=str(tmp_path), final={"test_accuracy": 0.5, "dp_epsilon": 7.25,
                                                           "dp_delta": 0.0079}, last_round=30,
                          wall_seconds=1.0, rounds_this_session=30, python="python")
  assert lines[1].startswith("privacy  user-level (ε, δ) = (7.25, 0.0079) after 30 rounds")
  assert not any(line.startswith("privacy") for line in console.summary(
      output_dir=str(tmp_path), final={"test_accuracy": 0.5}, last_round=1, wall_seconds=1.0,
      rounds_this_session=1, python="python"))


def test_main_exits_2_before_writing_anything(tmp_path):
  """A refusal that needs the task (its server-held data) exits as a bad flag does: code 2, one
  line, nothing written (the flag-only refusals above fail in the same parse as every flag's)."""
  proc = in_process.run("tff_robust.main", *DP, "--divergence_factor=3", f"--root_output_dir={tmp_path}")
  assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
  assert re.fullmatch(r"error: --divergence_factor=3.0 is not valid: .*--validation_fraction > 0.*\n",
                      proc.stderr), proc.stderr[-2000:]
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_a_dp_run_prints_and_records_epsilon(tmp_path):
  """Whole program (~1 min on 2 idle cores): header, ε on every round line, the summary, metrics.csv,
  final_metrics.json."""
  proc = main(*DP, "--rounds=2", *TINY, f"--root_output_dir={tmp_path}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "privacy  DP-FedAvg: clip C 1, noise z 0.5 (std z·C/m = 0.05 on the mean)" in proc.stdout
  assert "user-level ε by RDP at δ 0.0794, 10 of 10 clients sampled without replacement" in proc.stdout
  run = tmp_path / "mnist_sgd_dp_s0"
  with open(run / "metrics.csv") as f:
    eps = [float(row["dp_epsilon"]) for row in csv.DictReader(f)]
  assert len(eps) == 2 and 0 < eps[0] < eps[1]
  for r, e in enumerate(eps, 1):
    assert re.search(rf"^round {r}/2 .* ε {e:.3g} ", proc.stdout, re.M), proc.stdout
  final = json.loads((run / "final_metrics.json").read_text())
  assert final["dp_epsilon"] == eps[-1] and final["dp_delta"] == pytest.approx(10 ** -1.1)
  assert f"privacy  user-level (ε, δ) = ({eps[-1]:.4g}, 0.0794) after 2 rounds" in proc.stdout
