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


# Importing any module leaves the signals alone (no handler, no watcher, no wakeup fd): checked in the
# new interpreter of tests/programs/test_flags_reference.py, which imports every module after the
# flag reference (test_importing_any_module_leaves_the_signals_alone).
