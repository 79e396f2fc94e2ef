"""How the commands stop: what a rerun of a run directory starts from, and Ctrl-C / SIGTERM
outside the training loop (start-up, the end summary) ending the program with one line.

Every ``python -m tff_robust...`` command calls `exit_quietly_on_signals` first thing (the
package's ``__init__`` does, before any other import of the project): a signal then ends the
program at once (no traceback from the middle of an import), with status 128 + signal and a line
saying where a rerun starts. While they train they install their own handlers (`cli.StopRequest`,
`experiments.scheduler.interruptible`); `hard_stop` ends the program from a thread when the main
thread is inside a long native call and cannot (the same line, after a grace).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable

from tff_robust.common import hard_stop
from tff_robust.common.hard_stop import DUPLICATE_SECONDS, Repeats  # noqa: F401  (re-exported)

CHECKPOINTS = "checkpoints"
_STATE = re.compile(r"^program_state_(\d+)$")  # tff.program.FileProgramStateManager's versions


def checkpoint_round(run_dir: str) -> int:
  """The round of the latest checkpoint saved in ``run_dir`` (0: none yet)."""
  try:
    names = os.listdir(os.path.join(run_dir, CHECKPOINTS))
  except OSError:
    return 0
  rounds = [int(m.group(1)) for m in map(_STATE.match, names) if m]
  return max(rounds, default=0)


def resume_phrase(run_dir: str) -> str:
  """Where the same command starts ``run_dir`` again: after its latest checkpoint, or round 1."""
  k = checkpoint_round(run_dir)
  if not k:
    return "no checkpoint yet: the same command starts again at round 1"
  return (f"the same command resumes at round {k + 1} (the checkpoint of round {k} in "
          f"{os.path.join(run_dir, CHECKPOINTS)})")


def _nothing_yet() -> str:
  return "during start-up; the same command starts again"


_note: Callable[[], str] = _nothing_yet


def set_note(note: Callable[[], str]) -> None:
  """What the line printed on a signal says from now on (e.g. where this run resumes)."""
  global _note
  _note = note


def note_for_run(run_dir: str) -> None:
  """From now on a signal's line says where ``run_dir`` resumes."""
  set_note(lambda: f"during start-up; {resume_phrase(run_dir)}")


def exit_now(code: int) -> None:
  """Ends a program that was told to stop, with ``code``, once its own line is out: stdout and
  stderr flushed, then `os._exit` (the interpreter's teardown of TensorFlow alone takes seconds,
  which a stop within seconds cannot spend; every record is already whole: `hard_stop.writing`)."""
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, RuntimeError, ValueError):
      pass
  os._exit(code)


def stop_line(signum: int) -> str:
  """``SIGINT: stopped <note>.``: what a program ended by a signal prints (`set_note`)."""
  return f"{signal.Signals(signum).name}: stopped {_note()}."


def _exit(signum: int, frame) -> None:  # pylint: disable=unused-argument
  try:
    sys.stdout.flush()
  except (OSError, RuntimeError, ValueError):  # interrupted inside a write of stdout
    pass
  try:
    os.write(2, f"\n{stop_line(signum)}\n".encode())
  finally:
    os._exit(128 + signum)  # at once: no traceback, no half-run clean-up of an import


def exit_quietly_on_signals() -> None:
  """SIGINT and SIGTERM end the program at once with one line on stderr, also from inside a long
  native call (`hard_stop`; see the module doc). Idempotent."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _exit)
  hard_stop.start(stop_line)
