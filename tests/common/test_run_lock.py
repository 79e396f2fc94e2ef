"""One process per run directory: the lock is exclusive, names its holder, and dies with it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tff_robust.common import run_lock

from helpers.paths import ROOT

HOLDER = """
import sys, time
from tff_robust.common import run_lock
with run_lock.hold(sys.argv[1]):
  print("held", flush=True)
  time.sleep(120)
"""


def test_hold_is_exclusive_and_names_its_holder(tmp_path):
  out = str(tmp_path / "run")
  assert run_lock.holder(out) is None  # no directory yet
  with run_lock.hold(out):
    assert run_lock.holder(out) == os.getpid()
    with pytest.raises(run_lock.RunDirBusyError, match=f"{out} is in use by another process "
                       f"\\(pid {os.getpid()}\\)"):
      with run_lock.hold(out):
        pass
    with pytest.raises(run_lock.RunDirBusyError, match="--experiment_name"):
      run_lock.check_free(out)
  assert run_lock.holder(out) is None
  run_lock.check_free(out)
  with run_lock.hold(out):  # free again
    pass


def test_a_killed_holder_leaves_the_directory_free(tmp_path):
  out = str(tmp_path / "run")
  proc = subprocess.Popen([sys.executable, "-c", HOLDER, out], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True)
  try:
    assert proc.stdout.readline().strip() == "held"
    assert run_lock.holder(out) == proc.pid
    with pytest.raises(run_lock.RunDirBusyError, match=f"pid {proc.pid}"):
      with run_lock.hold(out):
        pass
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
  deadline = time.time() + 10
  while run_lock.holder(out) is not None and time.time() < deadline:
    time.sleep(0.05)
  assert run_lock.holder(out) is None
  with run_lock.hold(out):
    assert run_lock.holder(out) == os.getpid()
