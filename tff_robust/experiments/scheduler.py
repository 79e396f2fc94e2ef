"""Runs the pending runs of a plan as child processes, ``parallel`` at a time: each run's
output goes to its ``run.log``; a child dies with this program (`children.die_with_parent`),
and on any exception (Ctrl-C included) every started run is stopped by pid. A run another
process holds (`run_lock`: a second runner on the same root) is left to it, so several runners
can share one plan."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from tff_robust.common import hard_stop, interrupts, run_lock
from tff_robust.experiments.runs import BUSY, CONFLICT, DONE, Run
from tff_robust.runtime import children

# The repository root, put on the children's PYTHONPATH.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A run stops within its own grace after our SIGINT (`hard_stop`: it ends its round, or stops at
# once); SIGKILL after this long. This program's own grace waits for that, within 10 s in all.
STOP_TIMEOUT = hard_stop.GRACE_SECONDS + 1.5
RUNNER_GRACE = STOP_TIMEOUT + 0.5


class Terminated(Exception):
  """SIGTERM arrived while runs were going."""


@contextlib.contextmanager
def interruptible():
  """Inside the block SIGINT raises KeyboardInterrupt and SIGTERM `Terminated`, so `run_all` stops
  every started run; also in a process started with SIGINT ignored (a background job of a
  non-interactive shell, as ``nohup ... &`` starts a runner), where Python would not raise it.
  A signal delivered twice (`interrupts.DUPLICATE_SECONDS`) counts once."""
  repeats = interrupts.Repeats()

  def handle(signum, frame):  # pylint: disable=unused-argument
    if repeats.seen(signum) != "duplicate":
      raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

  previous_term = signal.signal(signal.SIGTERM, handle)
  previous_int = signal.signal(signal.SIGINT, handle)
  hard_stop.set_grace(RUNNER_GRACE)  # the runs stop first, each in its own way
  try:
    yield
  finally:
    hard_stop.set_grace(hard_stop.GRACE_SECONDS)
    signal.signal(signal.SIGTERM, previous_term)
    signal.signal(signal.SIGINT, previous_int)


@dataclasses.dataclass
class RunResult:
  run: Run
  status: str  # done | skipped | failed | conflict | busy (another process runs it)
  seconds: float = 0.0
  message: str = ""


def _child_env() -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines stay out of run.log
  path = env.get("PYTHONPATH", "")
  env["PYTHONPATH"] = ROOT + (os.pathsep + path if path else "")
  return env


def _tail(path: str, lines: int = 8) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:]).rstrip()
  except OSError:
    return ""


def run_all(runs: Sequence[Run], parallel: int = 1, *, python: str = sys.executable,
            echo: Callable[[str], None] = print, poll_seconds: float = 0.2) -> list[RunResult]:
  """Runs every pending run, ``parallel`` at a time; finished ones are skipped.

  Each run's output (appended across resumptions) goes to ``<run dir>/run.log``. On any
  exception, KeyboardInterrupt included, every started process is stopped before it
  propagates.
  """
  if parallel < 1:
    raise ValueError(f"--parallel={parallel} is not valid: must be ≥ 1.")
  results: dict[str, RunResult] = {}
  queue = []
  for run in runs:
    st = run.status()
    if st == DONE:
      results[run.experiment_name] = RunResult(run, "skipped", message=f"{run.DONE_FILE} exists")
    elif st == CONFLICT:
      results[run.experiment_name] = RunResult(run, "conflict", message=run.conflict())
      echo(f"conflict {run.experiment_name}: {run.conflict()}")
    elif st == BUSY:
      results[run.experiment_name] = _busy(run, echo)
    else:
      queue.append(run)
  total = len(queue)
  if len(results):
    echo(f"{len(results)} of {len(runs)} runs finished already (or conflict, or busy); {total} to run.")
  active: dict[subprocess.Popen, tuple[Run, float, object]] = {}
  started = 0
  try:
    while queue or active:
      while queue and len(active) < parallel:
        run = queue.pop(0)
        if run.status() == BUSY:  # another runner started it meanwhile
          results[run.experiment_name] = _busy(run, echo)
          continue
        k = interrupts.checkpoint_round(run.output_dir)
        where = (f" (resuming at round {k + 1})" if k else
                 " (no checkpoint yet: round 1)" if os.path.exists(run.log_path) else "")
        run.record(python)
        log = open(run.log_path, "ab")
        log.write(f"\n$ {shlex.join(run.command(python))}\n".encode())
        log.flush()
        started += 1
        try:
          proc = subprocess.Popen(run.command(python), stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, env=_child_env(), start_new_session=True,
                                  preexec_fn=children.die_with_parent)
        except OSError as e:  # e.g. a --python that does not exist
          log.close()
          results[run.experiment_name] = RunResult(run, "failed", message=f"cannot start {python}: {e}")
          echo(f"FAILED {run.experiment_name}: cannot start {python}: {e}")
          continue
        active[proc] = (run, time.monotonic(), log)
        echo(f"[{started}/{total}] start {run.experiment_name}{where}")
      for proc in [p for p in active if p.poll() is not None]:
        run, t0, log = active.pop(proc)
        log.close()
        seconds = time.monotonic() - t0
        if proc.returncode == 0 and os.path.exists(run.done_path):
          results[run.experiment_name] = RunResult(run, "done", seconds)
          echo(f"done {run.experiment_name} ({seconds:.0f} s)")
        elif proc.returncode == run_lock.EXIT_BUSY:  # taken between our check and its start
          results[run.experiment_name] = _busy(run, echo)
        else:
          msg = f"exit code {proc.returncode}; last lines of {run.log_path}:\n{_tail(run.log_path)}"
          results[run.experiment_name] = RunResult(run, "failed", seconds, msg)
          echo(f"FAILED {run.experiment_name}: {msg}")
      if active:
        time.sleep(poll_seconds)
  except BaseException:
    children.stop(list(active), STOP_TIMEOUT)
    for run, _, log in active.values():
      log.close()
      echo(f"stopped {run.experiment_name}: {interrupts.resume_phrase(run.output_dir)}")
    raise
  return [results[r.experiment_name] for r in runs]


def _busy(run: Run, echo: Callable[[str], None]) -> RunResult:
  pid = run_lock.holder(run.output_dir)
  message = f"another process{f' (pid {pid})' if pid else ''} is running it"
  echo(f"busy {run.experiment_name}: {message}")
  return RunResult(run, BUSY, message=message)


INTERRUPTED = 130  # the exit code of a program stopped by Ctrl-C or SIGTERM


def run_to_exit_code(runs: Sequence[Run], parallel: int = 1, *, python: str = sys.executable,
                     echo: Callable[[str], None] = print) -> int:
  """`run_all` inside `interruptible`, as a program's exit code: 130 (and how to
  resume, on stderr) if Ctrl-C or SIGTERM stopped it, 1 (naming them) if a run failed or
  conflicts, else 0 (runs another process holds are its to finish)."""
  try:
    with interruptible():
      results = run_all(runs, parallel, python=python, echo=echo)
  except (KeyboardInterrupt, Terminated) as e:
    name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
    print(f"{name}: interrupted; every started run was stopped (each resumes where its line above "
          "says): run the same command again to resume.", file=sys.stderr, flush=True)
    return INTERRUPTED
  bad = [r.run.experiment_name for r in results if r.status in ("failed", "conflict")]
  if bad:
    print(f"{len(bad)} run(s) failed or conflict: " + ", ".join(bad), file=sys.stderr)
  return 1 if bad else 0
