"""Where a rerun starts, and one signal delivered twice counted once."""

import os
import signal
import time

from tff_robust.common import interrupts


def test_resume_phrase_names_the_latest_checkpoint_or_round_1(tmp_path):
  run = str(tmp_path / "run")
  assert interrupts.checkpoint_round(run) == 0
  assert interrupts.resume_phrase(run) == "no checkpoint yet: the same command starts again at round 1"
  for name in ("program_state_10", "program_state_20", "program_state_30_temp1234"):  # the last: unfinished
    os.makedirs(os.path.join(run, "checkpoints", name))
  assert interrupts.checkpoint_round(run) == 20
  assert interrupts.resume_phrase(run).startswith("the same command resumes at round 21 (the checkpoint of "
                                                  "round 20 in ")


def test_a_signal_delivered_twice_counts_once():
  repeats = interrupts.Repeats()
  assert repeats.seen(signal.SIGINT) == "first"
  assert repeats.seen(signal.SIGINT) == "duplicate"  # `uv run` forwards the group's Ctrl-C 0.2 s later
  time.sleep(interrupts.DUPLICATE_SECONDS)
  assert repeats.seen(signal.SIGINT) == "again"  # a second Ctrl-C
  other = interrupts.Repeats()
  assert (other.seen(signal.SIGTERM), other.seen(signal.SIGINT)) == ("first", "again")


# The child starts from Python's own handlers whatever it inherited (a signal ignored in the pytest
# worker stays ignored across exec), so only the imports below can change them.
IMPORT_EVERYTHING = """
import pkgutil, signal, importlib
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
import tff_robust
from tff_robust.common import hard_stop
names = sorted(m.name for m in pkgutil.walk_packages(tff_robust.__path__, "tff_robust."))
for name in names:
  importlib.import_module(name)
handlers = [signal.getsignal(s) is signal.default_int_handler if s == signal.SIGINT else
            signal.getsignal(s) == signal.SIG_DFL for s in (signal.SIGINT, signal.SIGTERM)]
print(len(names), hard_stop._watchdog is None, all(handlers), signal.set_wakeup_fd(-1))
"""


def test_importing_any_module_leaves_the_signals_alone():
  """Only a command (``python -m``, the package's ``__init__``) takes over SIGINT/SIGTERM and starts
  `hard_stop`'s watcher; a module imported by a notebook or a test must not, or a later signal to
  that process (a test's SIGTERM to itself) ends it `GRACE_SECONDS` later from the watcher."""
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  from helpers.paths import ROOT  # pylint: disable=g-import-not-at-top
  out = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, check=True).stdout.split()
  assert int(out[0]) > 100 and out[1:] == ["True", "True", "-1"], out
