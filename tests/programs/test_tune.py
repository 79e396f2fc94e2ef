"""`python -m tff_robust.tune`: flags, and a small real study that resumes without retraining."""

import csv
import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

from helpers import in_process
from helpers.flag_parse import parse_tune as parse
from helpers.paths import ROOT
from helpers.procs import orphan_workers

FLAGS = flags.FLAGS


@pytest.mark.parametrize("args,pattern", [
    (["--tune_methods=rs,bo"], r"--tune_methods='rs,bo' is not valid: choose from rs, sha, rs_fedex"),
    (["--tune_server_lr=0:1"], r"--tune_server_lr='0:1': value 0.0 is invalid, values must be > 0"),
    (["--tune_server_momentum=a,b"], r"--tune_server_momentum='a,b' is not understood"),
    (["--tune_test_every=1"], r"--tune_test_every=1 is not valid: must be ≥ 2"),
    (["--sha_eta=1"], r"--sha_eta=1 is not valid: must be an integer ≥ 2"),
    (["--sha_arms=4", "--sha_min_rounds=5", "--sha_max_rounds=2"],
     r"--sha_max_rounds must be an integer >= --sha_min_rounds=5"),
    (["--fedex_local_epochs=1,2"], r"FedEx tunes local_epochs but --local_steps > 0"),
])
def test_bad_study_flags_name_flag_value_and_choices(args, pattern):
  with pytest.raises(ValueError, match=pattern):
    parse(*args)


def test_study_flags_map_to_config():
  cfg = parse("--rounds=27", "--tune_methods=rs,sha_fedex", "--tune_server_lr_decay=none",
              "--root_output_dir=/r", "--seed=4")
  study = cfg.study
  assert study.methods == ("rs", "sha_fedex")
  assert study.study_dir == os.path.join("/r", "tune_mnist_s4")
  assert study.rs_rounds == 27 and study.rs_arms == 3
  # Default r: SHA's last rung (one arm) trains --rounds in total.
  assert [(r.num_arms, r.budget_rounds) for r in study.schedule("sha")] == [(9, 3), (3, 9), (1, 27)]
  assert study.space.server_lr_decay is None and "server_lr_decay" not in study.space.distributions()
  assert cfg.fedex is not None and cfg.run.process.fedex is None  # the method decides
  assert cfg.study.local_space == cfg.fedex.space  # --tune_local (default): arms draw client h too
  plain = parse("--tune_methods=rs,sha", "--notune_local")
  assert plain.fedex is None and plain.study.local_space is None


def test_an_arms_client_draw_is_the_baselines_configuration_and_fedexs_centre():
  """Seed 002's wrapper: a baseline arm trains with its drawn client configuration alone
  (FedEx with k = 1), a FedEx arm draws its k configurations around it."""
  from tff_robust.algorithms.methods import fedex as fedex_method
  from tff_robust.tuning import arms
  cfg = parse("--tune_methods=rs,rs_fedex", "--fedex_radius=0.1")
  draw = {"learning_rate": 0.01, "momentum": 0.5, "weight_decay": 1e-3, "batch_size": 32.0}
  params = {"server_lr": 1.0, **{"local_" + k: v for k, v in draw.items()}}
  baseline = arms.arm_fedex(cfg.fedex, params, fedex_arm=False)
  fedex = arms.arm_fedex(cfg.fedex, params, fedex_arm=True)
  assert baseline.options.k == 1 and fedex.options.k == cfg.fedex.options.k == 10
  assert baseline.center == fedex.center == draw
  only = fedex_method.fedex_client(dataclasses.replace(cfg.run.process, fedex=baseline)).configs
  assert {k: float(v[0]) for k, v in only.items()} == pytest.approx(draw, rel=1e-6)
  assert all(len(v) == 1 for v in only.values())
  around = fedex_method.fedex_client(dataclasses.replace(cfg.run.process, fedex=fedex)).configs
  lrs = np.log10(around["learning_rate"])
  assert lrs[0] == pytest.approx(-2.0) and np.all(np.abs(lrs + 2.0) <= 0.1 * 4 + 1e-6)
  assert len(set(lrs.tolist())) == 10
  # Without a draw (--notune_local): no FedEx in a baseline arm, the flags' FedEx in a FedEx arm.
  assert arms.arm_fedex(cfg.fedex, {"server_lr": 1.0}, fedex_arm=False) is None
  assert arms.arm_fedex(cfg.fedex, {"server_lr": 1.0}, fedex_arm=True) is cfg.fedex


def test_study_flagfile_parses():
  cfg = parse(f"--flagfile={os.path.join(ROOT, 'flags', 'fedex_mnist_study.cfg')}")
  assert cfg.study.methods == ("rs", "sha", "rs_fedex", "sha_fedex")
  assert [(r.num_arms, r.budget_rounds) for r in cfg.study.schedule("sha_fedex")] == [(9, 3), (3, 9), (1, 27)]
  assert cfg.run.task_options.partition == "dirichlet" and cfg.fedex is not None


def run_tune(*args, timeout=900):
  before = orphan_workers()
  proc = subprocess.run([sys.executable, "-m", "tff_robust.tune", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert not orphan_workers() - before, "worker_binary survived the study"
  return proc


def test_bad_flag_fails_before_any_training(tmp_path):
  proc = in_process.run("tff_robust.tune", "--tune_methods=grid", f"--root_output_dir={tmp_path}")
  assert proc.returncode == 2
  assert "--tune_methods='grid'" in proc.stderr and "sha_fedex" in proc.stderr
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_small_study_writes_the_table_and_resumes_without_retraining(tmp_path):
  args = ["--task=synthetic", "--num_clients=6", "--tune_methods=rs,sha_fedex", "--rs_arms=2",
          "--sha_arms=2", "--sha_eta=2", "--rounds=2", "--local_steps=2", "--batch_size=8",
          "--fedex_k=3", "--fedex_batch_size=none", "--rounds_per_eval=100",
          f"--root_output_dir={tmp_path}", "--experiment_name=s"]
  first = run_tune(*args)
  assert first.returncode == 0, first.stderr[-3000:]
  trained = [line for line in first.stdout.splitlines() + first.stderr.splitlines()
             if "validation loss" in line]
  # RS: 2 arms x 2 rounds; SHA: 2 arms x 1 round, then the better one to 2 rounds.
  assert len(trained) == 2 + 2 + 1, trained
  study_dir = tmp_path / "s"
  with open(study_dir / "table.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["method"] for r in rows] == ["RS", "SHA+FedEx"]
  for r in rows:
    for key in ("server_lr", "server_momentum", "server_lr_decay", "val_loss", "global_accuracy",
                "refine_accuracy", "global_loss", "refine_loss", "local_learning_rate",
                "local_momentum", "local_weight_decay"):  # --tune_local: the arm's client draw
      assert r[key] != "", (key, r)
    assert 0.0 <= float(r["global_accuracy"]) <= 100.0 and 0.0 <= float(r["refine_accuracy"]) <= 100.0
  assert [int(r["rounds"]) for r in rows] == [4, 3]
  assert os.path.isdir(study_dir / "sha_fedex" / "arm000" / "checkpoints")

  again = run_tune(*args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert not [line for line in again.stdout.splitlines() + again.stderr.splitlines()
              if "validation loss" in line or "round 1/" in line]
  with open(study_dir / "table.csv") as f:
    assert list(csv.DictReader(f)) == rows
