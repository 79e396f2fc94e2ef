"""Paths the commands take from the user, checked before anything is loaded, and the default
output root (one per user of a machine).

Every check raises ValueError with one line naming the flag, the value and the problem, which
the commands print as ``error: ...`` and exit 2.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile


def default_root() -> str:
  """``<temp dir>/tff_robust-<user>``: the default ``--root_output_dir``, one per user, so one
  user's runs are never resumed (or locked) by another's."""
  try:
    user = getpass.getuser()
  except (KeyError, OSError):  # no name for this uid (e.g. a container's user)
    user = str(os.getuid())
  return os.path.join(tempfile.gettempdir(), "tff_robust-" + re.sub(r"[^A-Za-z0-9._-]", "_", user))


def _bad(flag: str, value: str, problem: str) -> ValueError:
  return ValueError(f"--{flag}={value!r} is not valid: {problem}")


def check_output_dir(flag: str, value: str) -> None:
  """``value`` is a directory this user can write in, or one that can be created: its nearest
  existing ancestor is a writable directory (tried by creating and removing a directory there)."""
  if not value:
    raise _bad(flag, value, "an empty path")
  path = os.path.abspath(os.path.expanduser(value))
  probe = path
  while not os.path.lexists(probe):
    probe = os.path.dirname(probe)
  if not os.path.isdir(probe):
    problem = ("it is a file, not a directory" if probe == path
               else f"{probe} is a file, so the directory cannot be created")
    raise _bad(flag, value, problem)
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".tff_robust_check_", dir=probe))
  except OSError as e:
    what = "cannot write in it" if probe == path else f"cannot create it in {probe}"
    raise _bad(flag, value, f"{what} ({e.strerror})") from None


def check_input_dir(flag: str, value: str) -> None:
  """``value`` is an existing directory this user can read."""
  path = os.path.abspath(os.path.expanduser(value))
  if not os.path.exists(path):
    raise _bad(flag, value, "no such directory")
  if not os.path.isdir(path):
    raise _bad(flag, value, "it is a file, not a directory")
  if not os.access(path, os.R_OK | os.X_OK):
    raise _bad(flag, value, "this user cannot read it")
