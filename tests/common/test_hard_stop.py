"""A stop forced from the watcher thread (`hard_stop`): it ends a program whose main thread is stuck
inside a native call, after the grace, with one line, 128 + signal, and the program's children
killed; it never cuts a record being written, and adds no line when the program said its own."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tff_robust.common import hard_stop

from helpers.paths import ROOT

# A program whose main thread never returns to Python: SQLite counting forever (CPU-bound C with
# the GIL released, as TensorFlow runs a long op). Its start-up handler cannot run; the watcher can.
STUCK = """
import os, sqlite3, subprocess, sys
from tff_robust.common import hard_stop, interrupts
interrupts.exit_quietly_on_signals()
hard_stop.set_grace(0.5)
child = subprocess.Popen(["sleep", "600"])
hard_stop.own(child.pid)
interrupts.set_note(lambda: "inside a long native call; the same command starts again")
with open(sys.argv[1] + ".tmp", "w") as f:
  f.write(str(child.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
sqlite3.connect(":memory:").execute(
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c").fetchone()
print("unreachable")
"""


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except OSError:
    return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_main_thread_stuck_in_native_code_is_stopped_with_one_line(tmp_path, signum):
  ready = tmp_path / "child_pid"
  proc = subprocess.Popen([sys.executable, "-c", STUCK, str(ready)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    while not ready.exists() and proc.poll() is None:
      time.sleep(0.05)
    child = int(ready.read_text())
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)  # without the watcher: never (the query has no end)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert proc.returncode == 128 + signum, err
  assert [line for line in err.splitlines() if line.strip()] == [
      f"{signal.Signals(signum).name}: stopped inside a long native call; the same command starts again."]
  assert out == ""
  deadline = time.monotonic() + 30
  while _alive(child) and time.monotonic() < deadline:  # SIGKILLed by the watcher; reaped by init
    time.sleep(0.05)
  assert not _alive(child)


def _watch(dog: hard_stop.Watchdog, signums) -> threading.Thread:
  read_fd, write_fd = os.pipe()
  thread = threading.Thread(target=dog.watch, args=(read_fd,), daemon=True)
  thread.start()
  os.write(write_fd, bytes(signums))
  return thread


def test_a_forced_stop_waits_for_the_record_being_written(capfd):
  exits = []
  dog = hard_stop.Watchdog(lambda s: f"{signal.Signals(s).name}: stopped during round 3.", grace=0.1,
                           exit_fn=exits.append)
  sleeper = subprocess.Popen(["sleep", "600"])
  dog.children.add(sleeper.pid)
  dog.writing.acquire()  # the main thread is writing a checkpoint
  thread = _watch(dog, [signal.SIGALRM, signal.SIGTERM])  # another signal's byte is ignored
  time.sleep(0.5)
  assert not exits and sleeper.poll() is None  # not while the record is half-written
  dog.writing.release()
  thread.join(60)
  assert exits == [128 + signal.SIGTERM]
  assert sleeper.wait(60) == -signal.SIGKILL
  assert capfd.readouterr().err.strip() == "SIGTERM: stopped during round 3."


def test_a_stop_the_program_has_claimed_keeps_its_code_and_adds_no_line(capfd):
  exits = []
  dog = hard_stop.Watchdog(lambda s: "never printed", grace=0.1, exit_fn=exits.append)
  dog.claimed = 2  # e.g. `cli.fail` printed its error and is exiting
  _watch(dog, [signal.SIGINT]).join(60)
  assert exits == [2] and capfd.readouterr().err == ""


def test_a_second_ctrl_c_shortens_the_grace_and_a_duplicate_does_not():
  exits = []
  dog = hard_stop.Watchdog(lambda s: "stopped", grace=600.0, exit_fn=exits.append)
  read_fd, write_fd = os.pipe()
  thread = threading.Thread(target=dog.watch, args=(read_fd,), daemon=True)
  thread.start()
  os.write(write_fd, bytes([signal.SIGINT, signal.SIGINT]))  # one Ctrl-C delivered twice
  thread.join(hard_stop.AGAIN_SECONDS + 1.0)
  assert thread.is_alive() and not exits  # still within the 600 s grace
  time.sleep(hard_stop.DUPLICATE_SECONDS)
  os.write(write_fd, bytes([signal.SIGINT]))  # a deliberate second Ctrl-C: at once
  thread.join(60)
  assert exits == [128 + signal.SIGINT]
