"""Issue 15: AH's server validation sample and the guard's examples are representative of the
clients' data (seed 000 §3.3) and the same on every restart; the opt-in AH and aggregation
flags."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import evaluation
from tff_robust.tasks import TaskOptions

from helpers import one_class_task
from helpers.flag_parse import parse
from helpers.paths import ROOT
from helpers.paths import TESTS


@pytest.fixture(scope="module")
def task():
  return one_class_task.build(TaskOptions(seed=0))


def test_stratified_allocation_keeps_each_share_within_one():
  rng = np.random.default_rng(0)
  sizes = np.array(one_class_task.SIZES)
  for n in (7, 256, 500, 1001):
    alloc = evaluation.stratified_allocation(sizes, n, rng)
    assert alloc.sum() == n
    assert np.all(np.abs(alloc - n * sizes / sizes.sum()) < 1)
  assert evaluation.stratified_allocation([3, 2], 50, rng).tolist() == [3, 2]  # n > N: all


@pytest.mark.parametrize("n", [500, 256])  # AH's set, the divergence guard's
def test_one_class_clients_every_class_near_its_share(task, n):
  """23,250 examples sorted by class (client k = class k): every class is in the sample
  with n·n_k/N examples (±1), the same for a seed in every call, another for another seed."""
  x, y = evaluation.server_sample(task.train, None, n, seed=3)
  assert x.shape == (n, one_class_task.DIM) and y.shape == (n,)
  sizes = np.array(one_class_task.SIZES)
  counts = np.bincount(y, minlength=one_class_task.CLASSES)
  np.testing.assert_array_less(np.abs(counts - n * sizes / sizes.sum()), 1.0)
  again = evaluation.server_sample(task.train, None, n, seed=3)
  np.testing.assert_array_equal(x, again[0])
  np.testing.assert_array_equal(y, again[1])
  other = evaluation.server_sample(task.train, None, n, seed=4)
  assert not np.array_equal(x, other[0])
  # The examples are the clients' own: each row is one of its class's training examples.
  data = {k: next(iter(task.train.create_tf_dataset_for_client(str(k)).batch(10**6)))[0].numpy()
          for k in (0, 9)}
  for k in (0, 9):
    for row in x[y == k][:5]:
      assert np.any(np.all(data[k] == row, axis=1))


def test_central_validation_sample_is_uniform_over_all_examples():
  """A central set of 30,000 examples in order: the sample reaches past the first 10,000."""
  i = np.arange(30_000)  # the same elements as range(30_000).map(...), without a map per element:
  ds = tf.data.Dataset.from_tensor_slices((i, i % 10))  # 1.4 CPU-s a sample, not 2.5 (load 20)
  x, _ = evaluation.server_sample(None, ds, 500, seed=1)
  assert len(np.unique(x)) == 500
  assert np.all(np.diff(x) > 0)  # dataset order
  counts = np.histogram(x, bins=3, range=(0, 30_000))[0]
  assert np.all(counts > 120)  # ≈ 167 per third
  np.testing.assert_array_equal(x, evaluation.server_sample(None, ds, 500, seed=1)[0])


def _main(out, *extra):
  return [sys.executable, "-m", "tff_robust.main", "--task=helpers.one_class_task:build", "--rounds=4",
          "--rounds_per_checkpoint=2", "--rounds_per_eval=2", "--batch_size=16", "--ah",
          "--ah_lr_grid=0.03,0.1,0.3", "--ah_steps_grid=2,4,8", "--local_steps=4",
          "--ah_val_examples=200", "--ah_baseline=detrended", "--divergence_factor=10",
          "--client_fraction=0.5", f"--root_output_dir={out}", "--experiment_name=e", *extra]


def _rows(path):
  with open(path) as f:
    return [{k: v for k, v in row.items() if k != "round_seconds"} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_ah_run_killed_and_resumed_equals_uninterrupted(tmp_path):
  """An AH run on the one-class data, killed (-9) after its round-2 checkpoint and started
  again, draws the same server sample and ends with the uninterrupted run's metrics."""
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
         "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
  full = subprocess.run(_main(tmp_path / "full"), cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=900)
  assert full.returncode == 0, full.stderr[-2000:]
  proc = subprocess.Popen(_main(tmp_path / "killed"), cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpt = tmp_path / "killed" / "e" / "checkpoints"
  deadline = time.time() + 900
  while time.time() < deadline and proc.poll() is None and not (
      ckpt.exists() and "program_state_2" in os.listdir(ckpt)):
    time.sleep(0.05)
  if proc.poll() is None:
    os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  again = subprocess.run(_main(tmp_path / "killed"), cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
  assert again.returncode == 0, again.stderr[-2000:]
  assert "resumed  from round 2 (its checkpoint)" in again.stdout + again.stderr
  a = json.loads((tmp_path / "full" / "e" / "final_metrics.json").read_text())
  b = json.loads((tmp_path / "killed" / "e" / "final_metrics.json").read_text())
  assert a == b
  full_rows = _rows(tmp_path / "full" / "e" / "metrics.csv")
  resumed_rows = _rows(tmp_path / "killed" / "e" / "metrics.csv")
  assert [r["round"] for r in resumed_rows] == ["1", "2", "3", "4"]
  assert resumed_rows[2:] == full_rows[2:]  # ah_loss (L_t on the sample), guard_loss, μ, ...
  assert full_rows[-1]["ah_loss"] and full_rows[-1]["guard_loss"]


@pytest.mark.parametrize("args,pattern", [
    (["--ah", "--ah_baseline=median"], r"--ah_baseline='median' is not valid: choose one of mean, hold, detrended"),
    (["--ah", "--ah_reward_clip=0.5"], r"--ah_reward_clip='0.5' is not valid: a finite number < 0, or none"),
    (["--ah", "--ah_reward_clip=abc"], r"--ah_reward_clip='abc' is not valid"),
    (["--aggregation_norm=total"], r"--aggregation_norm='total' is not valid: choose one of sampled, all"),
    (["--ah", "--ah_init_lr=1.0"], r"--ah_init_lr \(init_mu\) must lie in the grid range \[0.001, 0.3\], got 1.0"),
    (["--ah", "--ah_init_std=0"], r"--ah_init_std.*must be finite and > 0"),
])
def test_bad_issue15_flags_name_flag_value_and_choices(args, pattern):
  with pytest.raises(ValueError, match=pattern):
    parse(*args)


def test_issue15_flags_map_to_config():
  default = parse("--ah")
  assert default.process.ah.baseline == "mean" and default.process.ah.min_reward == -1.0
  assert default.process.aggregation_norm == "sampled"
  policy = default.process.ah.policy_config()
  assert policy.baseline == "mean" and policy.min_reward == -1.0 and policy.log_scale == (True, True)
  run = parse("--ah", "--ah_baseline=hold", "--ah_reward_clip=none", "--aggregation_norm=all",
              "--ah_init_lr=0.1", "--ah_init_steps=40", "--ah_init_std=0.1")
  ah = run.process.ah
  assert (ah.baseline, ah.min_reward, ah.init_lr, ah.init_steps, ah.init_std) == ("hold", None, 0.1, 40, 0.1)
  assert run.process.aggregation_norm == "all"
  policy = ah.policy_config()
  assert policy.min_reward is None and policy.baseline == "hold"
  assert parse("--ah", "--ah_reward_clip=-0.5").process.ah.min_reward == -0.5
