"""How the commands stop: what a rerun of a run directory starts from, and Ctrl-C / SIGTERM
outside the training loop (start-up, the end summary) ending the program with one line.

`main`, `tune`, `experiments` and the results page call `exit_quietly_on_signals` first thing,
before their heavy imports: a signal then ends the program at once (no traceback from the middle
of an import), with status 128 + signal and a line saying where a rerun starts. While they
train they install their own handlers (`cli.StopRequest`, `experiments.scheduler.interruptible`).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable

CHECKPOINTS = "checkpoints"
# A second SIGINT this soon after the first is the same Ctrl-C delivered twice: `uv run` without
# a terminal forwards the Ctrl-C its process group already got to its child 0.2 s later.
DUPLICATE_SECONDS = 0.5
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
  return "during start-up, before any training; the same command starts again"


_note: Callable[[], str] = _nothing_yet


def set_note(note: Callable[[], str]) -> None:
  """What the line printed on a signal says from now on (e.g. where this run resumes)."""
  global _note
  _note = note


def note_for_run(run_dir: str) -> None:
  """From now on a signal's line says where ``run_dir`` resumes."""
  set_note(lambda: f"during start-up; {resume_phrase(run_dir)}")


class Repeats:
  """Tells a signal's first arrival, a deliberate repeat, and the same signal delivered twice
  (`DUPLICATE_SECONDS`)."""

  def __init__(self):
    self._last: tuple[int, float] | None = None

  def seen(self, signum: int) -> str:
    """``first``, ``again`` (after an earlier signal) or ``duplicate`` (ignore it)."""
    now = time.monotonic()
    last, self._last = self._last, (signum, now)
    if last is None:
      return "first"
    if last[0] == signum and now - last[1] < DUPLICATE_SECONDS:
      self._last = last
      return "duplicate"
    return "again"


def _exit(signum: int, frame) -> None:  # pylint: disable=unused-argument
  try:
    sys.stdout.flush()
  except (OSError, RuntimeError, ValueError):  # interrupted inside a write of stdout
    pass
  try:
    os.write(2, f"\n{signal.Signals(signum).name}: stopped {_note()}.\n".encode())
  finally:
    os._exit(128 + signum)  # at once: no traceback, no half-run clean-up of an import


def exit_quietly_on_signals() -> None:
  """SIGINT and SIGTERM end the program at once with one line on stderr (see module doc)."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _exit)
