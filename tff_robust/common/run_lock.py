"""One process per run directory: an advisory lock on ``<run dir>/.lock``.

Two processes training into the same directory (two page runners, or a command
started twice) would interleave checkpoints, metrics and client states. The
training loop holds an exclusive ``flock`` on the directory's lock file while it
runs; a second process fails fast with `RunDirBusyError` (exit code `EXIT_BUSY`
from ``main``) and the experiment scheduler skips a run another process holds.
The kernel drops the lock when its holder exits, killed or not, so a crash never
leaves a directory locked. The file holds the holder's pid, for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Optional

LOCK_FILE = ".lock"
EXIT_BUSY = 75  # EX_TEMPFAIL: try again when the other process is done


class RunDirBusyError(RuntimeError):
  """Another process is training into this run directory."""


def _path(output_dir: str) -> str:
  return os.path.join(output_dir, LOCK_FILE)


def _read_pid(fd: int) -> Optional[int]:
  try:
    return int(os.pread(fd, 32, 0).decode().strip() or "x")
  except (OSError, ValueError):
    return None


def _busy(output_dir: str, pid: Optional[int]) -> RunDirBusyError:
  return RunDirBusyError(
      f"{output_dir} is in use by another process{f' (pid {pid})' if pid else ''}: two "
      "processes must not train into one run directory. Wait for it to finish (then run "
      "the same command to resume or extend it), or choose another --experiment_name or "
      "--root_output_dir.")


@contextlib.contextmanager
def hold(output_dir: str) -> Iterator[None]:
  """Holds ``output_dir``'s lock for the block; raises `RunDirBusyError` if another process
  holds it. The lock's descriptor is not inherited by child processes (PEP 446)."""
  os.makedirs(output_dir, exist_ok=True)
  fd = os.open(_path(output_dir), os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise _busy(output_dir, _read_pid(fd)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    yield
  finally:
    os.close(fd)  # releases the lock


def holder(output_dir: str) -> Optional[int]:
  """The pid holding ``output_dir``'s lock (0 if unknown), or None if nobody holds it."""
  path = _path(output_dir)
  if not os.path.exists(path):
    return None
  fd = os.open(path, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
      return _read_pid(fd) or 0
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


def check_free(output_dir: str) -> None:
  """Raises `RunDirBusyError` if another process holds ``output_dir`` (a probe before the
  expensive set-up; `hold` is the guard)."""
  pid = holder(output_dir)
  if pid is not None:
    raise _busy(output_dir, pid)
