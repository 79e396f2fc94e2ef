"""Ctrl-C and SIGTERM stop a command within seconds wherever its main thread is.

Python runs a signal's handler in the main thread only, between two bytecodes: while that
thread is inside one long TensorFlow or TFF call (a pooled evaluation, a read of a large data
file, a long round) a Ctrl-C waits for the call to return, which can take many minutes. `start`
makes the interpreter's C-level handler also write each signal's number to a pipe
(`signal.set_wakeup_fd`), which a watcher thread reads at once. If the program has not ended
`grace` seconds after the first SIGINT or SIGTERM (`AGAIN_SECONDS` after a deliberate second
one), the watcher ends it:

1. it waits until no record is being written (`writing`: checkpoints, metrics, final metrics),
   so a stop never leaves half a file;
2. it prints one line (``line(signum)``: where the same command resumes), unless the main thread
   has already said how it ends (`claim`);
3. it kills the child processes this program registered (`own`: the TFF workers it started);
4. it exits with status 128 + signal (or the claimed status).

The grace lets a command stop in its own way first (`main` ends the round in progress and saves
it; the experiment runner stops its runs, which stop themselves within their own grace).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Optional

GRACE_SECONDS = 7.0  # the main thread's time to end the program after a signal
AGAIN_SECONDS = 1.0  # ... after a second, deliberate Ctrl-C (which asks to stop at once)
WRITE_WAIT_SECONDS = 30.0  # at most this long for a record being written to be complete
# A second SIGINT this soon after the first is the same Ctrl-C delivered twice: `uv run` without
# a terminal forwards the Ctrl-C its process group already got to its child 0.2 s later.
DUPLICATE_SECONDS = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


class Watchdog:
  """The watcher thread and what it needs to end the program (see the module docstring)."""

  def __init__(self, line: Callable[[int], str], grace: float = GRACE_SECONDS,
               exit_fn: Callable[[int], None] = os._exit):
    self.line = line
    self.grace = grace
    self.children: set[int] = set()
    self.claimed: Optional[int] = None
    self.writing = threading.RLock()
    self._exit = exit_fn
    self._read_fd: Optional[int] = None

  def start(self) -> None:
    """Routes signals to the pipe and starts the thread (main thread only)."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    self._read_fd = read_fd
    threading.Thread(target=self.watch, name="hard-stop", daemon=True).start()

  def watch(self, read_fd: Optional[int] = None) -> None:
    """Reads signal numbers from the pipe; ends the program when a deadline passes."""
    fd = self._read_fd if read_fd is None else read_fd
    repeats, deadline, signum = Repeats(), None, 0
    while True:
      timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
      ready, _, _ = select.select([fd], [], [], timeout)
      if not ready:
        self.force(signum)
        return
      data = os.read(fd, 64)
      if not data:
        return  # the pipe was closed
      for number in data:
        if number not in STOP_SIGNALS:
          continue  # e.g. SIGALRM, SIGCHLD with a handler of their own
        seen = repeats.seen(number)
        if seen == "first":
          signum, deadline = number, time.monotonic() + self.grace
        elif seen == "again":
          signum, deadline = number, min(deadline, time.monotonic() + AGAIN_SECONDS)

  def force(self, signum: int) -> None:
    """Ends the program now: records whole, one line, children killed, 128 + ``signum``."""
    # Held until the exit; after the wait stop anyway: a hung write must not keep the program alive.
    self.writing.acquire(timeout=WRITE_WAIT_SECONDS)  # pylint: disable=consider-using-with
    code = self.claimed if self.claimed is not None else 128 + signum
    if self.claimed is None:
      _flush_stdout()
      with contextlib.suppress(OSError):
        os.write(2, f"\n{self.line(signum)}\n".encode())
    for pid in sorted(self.children):
      with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    self._exit(code)


def _flush_stdout(timeout: float = 0.5) -> None:
  """Flushes stdout from another thread, giving up after ``timeout`` (its lock may be held by a
  main thread that will never run again)."""
  def flush() -> None:
    with contextlib.suppress(Exception):
      sys.stdout.flush()
  flusher = threading.Thread(target=flush, daemon=True)
  flusher.start()
  flusher.join(timeout)


_watchdog: Optional[Watchdog] = None


def start(line: Callable[[int], str]) -> None:
  """Starts the watcher of this process once (main thread; see the module docstring)."""
  global _watchdog
  if _watchdog is None and threading.current_thread() is threading.main_thread():
    watchdog = Watchdog(line)
    watchdog.start()
    _watchdog = watchdog


def set_grace(seconds: float) -> None:
  """How long the program has, after a signal, to end in its own way."""
  if _watchdog is not None:
    _watchdog.grace = seconds


def own(pid: int) -> None:
  """A forced stop kills process ``pid`` (a child this program started)."""
  if _watchdog is not None:
    _watchdog.children.add(pid)


def disown(pid: int) -> None:
  if _watchdog is not None:
    _watchdog.children.discard(pid)


def claim(code: int) -> None:
  """The main thread ends the program with ``code`` and has said why: a forced stop adds no line."""
  if _watchdog is not None:
    _watchdog.claimed = code


@contextlib.contextmanager
def writing() -> Iterator[None]:
  """A forced stop waits for the end of this block (a record or checkpoint being written)."""
  if _watchdog is None:
    yield
    return
  with _watchdog.writing:
    yield
