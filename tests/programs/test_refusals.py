"""A refused command changes nothing: every file under the run directory has the same bytes after
`main` refuses it (too few --rounds for its checkpoint, another process on it, other flags) and
after a second `tune` on a study another one is running; each exits as `main` does (2 for bad
input, 75 for a busy directory) with one line. The refusals run in this process (`in_process`);
tune's missing data runs as the real command, whose offered commands name the program that ran."""

import hashlib
import os
import re
import subprocess
import sys
import uuid

from absl import flags

from tff_robust.common import run_lock
from tff_robust.flags import definitions, record

from helpers import in_process
from helpers.paths import ROOT
from helpers.procs import workers_with


def _command(module, *args, env_extra=None):
  marker = uuid.uuid4().hex
  env = {**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}, "TFF_ROBUST_TEST_RUN": marker,
         **(env_extra or {})}
  proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=600, env=env)
  assert not workers_with(marker)
  assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  return proc


def _digests(directory) -> dict[str, str]:
  """sha256 of every file under ``directory``, by relative path."""
  out = {}
  for folder, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
  return out


def _finished_run(run_dir: str, rounds: int) -> None:
  """What a finished default run of ``rounds`` rounds leaves (its record, last checkpoint, metrics,
  a TensorBoard file and its final metrics); `main` refuses it before loading any of it."""
  definitions.define_flags()
  flags.FLAGS.unparse_flags()
  flags.FLAGS(["main", f"--rounds={rounds}"])
  record.write_record(run_dir)
  flags.FLAGS.unparse_flags()
  state = os.path.join(run_dir, "checkpoints", f"program_state_{rounds}")
  os.makedirs(state)
  open(os.path.join(state, "saved_model.pb"), "wb").write(b"state")
  os.makedirs(os.path.join(run_dir, "tensorboard"))
  open(os.path.join(run_dir, "tensorboard", "events.out.tfevents.1.host.1.0.v2"), "wb").write(b"events")
  open(os.path.join(run_dir, "metrics.csv"), "w").write("round,train_loss\n" + "".join(
      f"{r},0.5\n" for r in range(1, rounds + 1)))
  open(os.path.join(run_dir, "final_metrics.json"), "w").write('{"test_accuracy": 0.8}\n')


def test_a_refused_main_changes_no_file_of_the_run(tmp_path):
  run = tmp_path / "e"
  _finished_run(str(run), 12)
  before = _digests(run)
  common = ("--experiment_name=e", f"--root_output_dir={tmp_path}")

  fewer = in_process.run("tff_robust.main", "--rounds=5", *common)  # a later model would be reported
  assert fewer.returncode == 2
  assert fewer.stderr.strip() == (f"error: the checkpoint in {run / 'checkpoints'} is of round 12, beyond "
                                  "--rounds=5: use --rounds ≥ 12 to resume or extend that run")
  assert _digests(run) == before  # hparams.cfg still says --rounds=12; no new TensorBoard file

  other = in_process.run("tff_robust.main", "--rounds=20", "--client_lr=0.3", *common)
  assert other.returncode == 2 and "--client_lr (then 0.05, now 0.3)" in other.stderr
  assert len(other.stderr.strip().splitlines()) == 1
  assert _digests(run) == before

  with run_lock.hold(str(run)):  # another process trains into it
    lock = (run / run_lock.LOCK_FILE).read_bytes()
    busy = in_process.run("tff_robust.main", "--rounds=20", *common)
    assert (run / run_lock.LOCK_FILE).read_bytes() == lock
  assert busy.returncode == run_lock.EXIT_BUSY
  assert re.fullmatch(rf"error: {re.escape(str(run))} is in use by another process \(pid {os.getpid()}\): .+",
                      busy.stderr.strip())
  assert {k: v for k, v in _digests(run).items() if k != run_lock.LOCK_FILE} == before


def test_a_second_tune_on_a_study_exits_75_and_tune_suggests_tune_commands(tmp_path):
  study = tmp_path / "s"
  with run_lock.hold(str(study)):  # the first `tune` on it
    second = in_process.run("tff_robust.tune", "--rounds=1", "--rs_arms=1", "--tune_methods=rs", "--local_steps=2",
                      "--experiment_name=s", f"--root_output_dir={tmp_path}")
    assert os.listdir(study) == [run_lock.LOCK_FILE]  # no record, no arm: nothing written
  assert second.returncode == run_lock.EXIT_BUSY, second.stderr[-3000:]
  assert re.fullmatch(rf"error: {re.escape(str(study))} is in use by another process \(pid {os.getpid()}\): .+",
                      second.stderr.strip())

  empty = tmp_path / "no_data"
  empty.mkdir()
  missing = _command("tff_robust.tune", "--task=emnist_cr", f"--data_dir={empty}", f"--root_output_dir={tmp_path}")
  assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
  offered = re.search(r"Offline, with nothing to download: (.+?) --task=mnist", missing.stderr)
  assert offered and offered.group(1).endswith("-m tff_robust.tune"), missing.stderr
  assert "tff_robust.main" not in missing.stderr
