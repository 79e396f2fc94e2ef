"""``python -m tff_robust.tasks.espeak_corpus OUT_DIR``: the keyword corpus's command line.

Every bad argument fails before anything is spoken or written, with exit status 2 and one line
naming the argument, its value and what is allowed (a missing espeak-ng, too few speakers, an
output folder that is not empty, an unknown ``--effects``). Ctrl-C or SIGTERM stops the build
with one line (status 130 / 143) and removes the unfinished folder; nothing is left half-built.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn, Optional

from tff_robust.common import hard_stop, interrupts
from tff_robust.tasks import espeak_corpus, espeak_effects
from tff_robust.tasks.espeak_corpus import NOISE, SPEAKERS_FILE, SPEECH_COMMANDS_SCALE, WORDS, Scale


class _Parser(argparse.ArgumentParser):
  """argparse with its errors as one line (``error: ...``) and exit status 2."""

  def error(self, message: str) -> NoReturn:
    _fail(f"{message} (see --help)")


def _fail(message: str) -> NoReturn:
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  scale = SPEECH_COMMANDS_SCALE
  parser = _Parser(prog="python -m tff_robust.tasks.espeak_corpus",
                   description=espeak_corpus.__doc__.split("\n")[0])
  parser.add_argument("out_dir", help="the corpus folder (absent or empty)")
  parser.add_argument("--speakers", type=int, default=scale.num_speakers, help="synthetic speakers (≥ 1)")
  parser.add_argument("--repeats", type=int, default=scale.repeats, help="utterances of each word by a speaker")
  parser.add_argument("--test_fraction", type=float, default=scale.test_fraction, help="share of test speakers")
  parser.add_argument("--validation_fraction", type=float, default=scale.validation_fraction,
                      help="share of validation speakers")
  parser.add_argument("--noise", type=float, default=NOISE, help="white noise std (0 = none)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--workers", type=int, default=None, help="parallel espeak-ng processes (default: CPUs)")
  parser.add_argument("--effects", default="off",
                      help=f"{', '.join(espeak_effects.PRESETS)} or a JSON object of their fields")
  return parser.parse_args(argv)


def check(args: argparse.Namespace) -> espeak_effects.Effects:
  """Every argument, before anything is spoken; the effects they ask for. Exits 2 on the first bad one."""
  def need(ok: bool, flag: str, value, allowed: str) -> None:
    if not ok:
      _fail(f"{flag}={value!r} is not valid: {allowed}")
  need(args.speakers >= 1, "--speakers", args.speakers, "at least 1 speaker")
  need(args.repeats >= 1, "--repeats", args.repeats, "at least 1 utterance a word")
  for flag in ("test_fraction", "validation_fraction"):
    need(0.0 <= getattr(args, flag) < 1.0, f"--{flag}", getattr(args, flag), "a share in [0, 1)")
  need(math.isfinite(args.noise) and args.noise >= 0, "--noise", args.noise, "a finite number ≥ 0")
  need(args.workers is None or args.workers >= 1, "--workers", args.workers, "at least 1")
  train = Scale(args.speakers, args.repeats, args.test_fraction, args.validation_fraction).split_speakers()["train"]
  need(train >= 1, "--speakers", args.speakers,
       f"no training speaker is left after the test and validation shares ({args.test_fraction}, "
       f"{args.validation_fraction}); use more speakers or smaller shares")
  try:
    effects = espeak_effects.parse(args.effects)
  except (ValueError, TypeError) as e:
    named = args.effects.lstrip().startswith("{")  # else: not a preset's name
    _fail(f"--effects={args.effects!r} is not valid: " + (str(e).rstrip(".") if named else
          f"choose one of {', '.join(espeak_effects.PRESETS)}, or a JSON object of their fields"))
  out = os.path.abspath(os.path.expanduser(args.out_dir))
  if os.path.exists(out) and not os.path.isdir(out):
    _fail(f"OUT_DIR={args.out_dir!r} is not valid: it is a file, not a folder")
  if os.path.isdir(out) and os.listdir(out):
    _fail(f"OUT_DIR={args.out_dir!r} is not valid: the folder is not empty; remove it or choose another")
  if espeak_corpus.espeak_binary() is None:
    _fail("espeak-ng is not installed, and it speaks the corpus: install it with "
          "`apt-get install -y espeak-ng` (Debian, Ubuntu), then run the same command again")
  return effects


def _interrupt(signum: int, frame) -> None:  # pylint: disable=unused-argument
  raise KeyboardInterrupt(signum)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  effects = check(args)
  out = os.path.abspath(os.path.expanduser(args.out_dir))
  partial = f"{out.rstrip(os.sep)}.partial-{os.getpid()}"
  interrupts.set_note(lambda: f"while building {out}; the unfinished folder {partial} may remain: "
                              "remove it and run the same command again")
  previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
  try:  # an interrupt unwinds the build, which removes its unfinished folder
    info = espeak_corpus.build_corpus(
        args.out_dir, args.speakers, args.repeats, test_fraction=args.test_fraction,
        validation_fraction=args.validation_fraction, noise=args.noise, seed=args.seed,
        workers=args.workers, effects=effects)
  except KeyboardInterrupt as e:
    signum = e.args[0] if e.args else signal.SIGINT
    hard_stop.claim(128 + signum)
    print(f"\n{signal.Signals(signum).name}: stopped; nothing was written (the unfinished folder is "
          "removed): run the same command again to build the corpus.", file=sys.stderr, flush=True)
    interrupts.exit_now(128 + signum)
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  m = info.manifest
  print(f"wrote {info.num_files} clips to {info.out_dir}: {len(info.train_speakers)} train, "
        f"{len(info.validation_speakers)} validation, {len(info.test_speakers)} test speakers")
  print("clips a keyword: " + ", ".join(f"{m['clips'][s] // max(len(WORDS), 1)} {s}"
                                         for s in ("train", "validation", "test")))
  print(f"{m['bytes'] / 1e6:.1f} MB, fingerprint {m['fingerprint']}; speakers in "
        f"{os.path.join(info.out_dir, SPEAKERS_FILE)}")
  return 0
