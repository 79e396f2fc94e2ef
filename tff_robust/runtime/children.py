"""Child processes this program starts (TFF workers, the experiment runner's runs): they die
with their parent (the kernel's ``PR_SET_PDEATHSIG``), and they are stopped by pid — SIGINT
first (a run ends its round and its own worker), SIGKILL after a timeout."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # pragma: no cover - runs in the child
  """For ``preexec_fn``: the kernel SIGKILLs this child when the (single-threaded) parent dies."""
  with contextlib.suppress(OSError):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(procs: Iterable[subprocess.Popen], timeout: float) -> None:
  """Stops processes we started, by pid: SIGINT to all, then SIGKILL to those still alive after
  ``timeout`` seconds (also on a second Ctrl-C while waiting)."""
  procs = [p for p in procs if p.poll() is None]
  for p in procs:
    with contextlib.suppress(ProcessLookupError):
      os.kill(p.pid, signal.SIGINT)
  deadline = time.monotonic() + timeout
  try:
    for p in procs:
      with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(max(0.0, deadline - time.monotonic()))
  finally:
    for p in procs:
      if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          os.kill(p.pid, signal.SIGKILL)
        p.wait()
