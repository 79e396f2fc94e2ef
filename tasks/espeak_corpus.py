"""A small keyword-spotting corpus spoken by espeak-ng, in Speech Commands' folder layout.

Real (synthetic) speech for the ten Speech Commands keywords, written as
``<OUT_DIR>/<word>/<speaker>_nohash_<n>.wav`` (16 kHz, mono, 16-bit PCM, exactly
1 s), plus ``testing_list.txt`` / ``validation_list.txt`` naming the held-out
speakers' files, as the real dataset does. ``tasks.speech_commands`` reads it
with ``data_source='folder'``.

A *speaker* is an espeak-ng voice (an English accent), a voice variant (male
``m1``..``m7`` or female ``f1``..``f5`` timbre), a base pitch and a base speed.
Each of a speaker's ``repeats`` utterances of a word jitters pitch and speed a
little and places the word at a random offset inside the 1 s clip over faint
white noise. Everything is drawn from ``seed``: the same arguments give the same
bytes.

Needs Debian's ``espeak-ng`` (``apt-get install -y espeak-ng``).

Usage: ``python -m tff_robust.tasks.espeak_corpus OUT_DIR --speakers 24 [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import io
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from collections.abc import Sequence
from typing import Optional

import numpy as np

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
# espeak-ng's own (non-mbrola) English voices: accents.
VOICES = (
    "en-gb", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
    "en-gb-x-gbcwmd", "en-029", "en-us-nyc",
)
# espeak-ng voice variants: male and female timbres.
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")
PITCH_RANGE = (25, 75)  # espeak-ng -p (0..99, default 50): a speaker's base pitch.
SPEED_RANGE = (130, 200)  # espeak-ng -s, words per minute (default 175).
PITCH_JITTER = 6  # per-utterance +- pitch change.
SPEED_JITTER = 12  # per-utterance +- speed change.
SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE  # 1 s.
ESPEAK_RATE = 22050  # espeak-ng's output sample rate.


@dataclasses.dataclass(frozen=True)
class Speaker:
  """One synthetic speaker: ``speaker_id`` is 8 hex digits, as in Speech Commands."""

  speaker_id: str
  voice: str
  variant: str
  pitch: int
  speed: int


def espeak_binary() -> Optional[str]:
  """Path of the espeak-ng executable, or None if it is not installed."""
  return shutil.which("espeak-ng")


def make_speakers(num_speakers: int, seed: int = 0) -> list[Speaker]:
  """Draws ``num_speakers`` distinct speakers (voice x variant, pitch, speed) from ``seed``.

  Voice/variant pairs are visited in a seeded random order without repetition
  (96 pairs) and cycled beyond that; pitch and speed are uniform integers.
  """
  if num_speakers < 1:
    raise ValueError(f"num_speakers must be >= 1, got {num_speakers}.")
  rng = np.random.default_rng(seed)
  pairs = list(itertools.product(VOICES, VARIANTS))
  order = rng.permutation(len(pairs))
  speakers = []
  for k in range(num_speakers):
    voice, variant = pairs[order[k % len(pairs)]]
    pitch = int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1))
    speed = int(rng.integers(SPEED_RANGE[0], SPEED_RANGE[1] + 1))
    key = f"{seed}:{k}:{voice}+{variant}:p{pitch}:s{speed}".encode()
    speakers.append(Speaker(hashlib.sha1(key).hexdigest()[:8], voice, variant, pitch, speed))
  return speakers


def _espeak_wav(word: str, voice: str, pitch: int, speed: int, binary: str) -> np.ndarray:
  """Runs espeak-ng and returns its float waveform in [-1, 1] at ``ESPEAK_RATE``."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "w.wav")
    subprocess.run(
        [binary, "-v", voice, "-p", str(pitch), "-s", str(speed), "-w", path, word],
        check=True, capture_output=True)
    with wave.open(path, "rb") as f:
      if f.getnchannels() != 1 or f.getsampwidth() != 2:
        raise RuntimeError(f"espeak-ng wrote an unexpected WAV format to {path}.")
      rate = f.getframerate()
      audio = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
  if rate != ESPEAK_RATE:
    raise RuntimeError(f"espeak-ng wrote {rate} Hz audio, expected {ESPEAK_RATE} Hz.")
  return audio.astype(np.float64) / 32768.0


def resample(audio: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
  """Band-limited resampling by truncating / zero-padding the real FFT spectrum."""
  n_out = int(round(len(audio) * rate_out / rate_in))
  spectrum = np.fft.rfft(audio)
  keep = n_out // 2 + 1
  if keep <= len(spectrum):
    spectrum = spectrum[:keep]
  else:
    spectrum = np.concatenate([spectrum, np.zeros(keep - len(spectrum), spectrum.dtype)])
  return np.fft.irfft(spectrum, n=n_out) * (n_out / len(audio))


def _trim(audio: np.ndarray, threshold: float = 0.02) -> np.ndarray:
  """Drops leading and trailing samples quieter than ``threshold`` x peak."""
  loud = np.flatnonzero(np.abs(audio) > threshold * np.max(np.abs(audio)))
  if loud.size == 0:
    return audio
  return audio[loud[0]:loud[-1] + 1]


def _utterance(word: str, speaker: Speaker, n: int, seed: int, noise: float,
               binary: str) -> np.ndarray:
  """The ``n``-th 1 s int16 clip of ``speaker`` saying ``word``."""
  key = f"{seed}:{speaker.speaker_id}:{word}:{n}".encode()
  rng = np.random.default_rng(int.from_bytes(hashlib.sha1(key).digest()[:8], "little"))
  pitch = int(np.clip(speaker.pitch + rng.integers(-PITCH_JITTER, PITCH_JITTER + 1), 0, 99))
  speed = int(max(80, speaker.speed + rng.integers(-SPEED_JITTER, SPEED_JITTER + 1)))
  audio = _espeak_wav(word, f"{speaker.voice}+{speaker.variant}", pitch, speed, binary)
  audio = resample(_trim(audio), ESPEAK_RATE, SAMPLE_RATE)
  audio *= rng.uniform(0.3, 0.9) / max(np.max(np.abs(audio)), 1e-9)
  if len(audio) > CLIP_SAMPLES:  # centre crop
    start = (len(audio) - CLIP_SAMPLES) // 2
    audio = audio[start:start + CLIP_SAMPLES]
  clip = rng.normal(0.0, noise, CLIP_SAMPLES)
  offset = int(rng.integers(0, CLIP_SAMPLES - len(audio) + 1))
  clip[offset:offset + len(audio)] += audio
  return np.round(np.clip(clip, -1.0, 32767 / 32768) * 32768).astype("<i2")


def write_wav(path: str, samples: np.ndarray, rate: int = SAMPLE_RATE) -> None:
  """Writes int16 mono samples as a PCM WAV file."""
  buf = io.BytesIO()
  with wave.open(buf, "wb") as f:
    f.setnchannels(1)
    f.setsampwidth(2)
    f.setframerate(rate)
    f.writeframes(np.asarray(samples, dtype="<i2").tobytes())
  with open(path, "wb") as f:
    f.write(buf.getvalue())


@dataclasses.dataclass(frozen=True)
class CorpusInfo:
  """What ``build_corpus`` wrote: speakers per split and the number of clips."""

  out_dir: str
  train_speakers: tuple[Speaker, ...]
  validation_speakers: tuple[Speaker, ...]
  test_speakers: tuple[Speaker, ...]
  num_files: int


def build_corpus(
    out_dir: str,
    num_speakers: int = 24,
    repeats: int = 2,
    *,
    test_fraction: float = 0.25,
    validation_fraction: float = 0.0,
    noise: float = 0.003,
    seed: int = 0,
    words: Sequence[str] = WORDS,
    workers: Optional[int] = None,
) -> CorpusInfo:
  """Writes the corpus to ``out_dir`` (Speech Commands layout) and returns what it wrote.

  Args:
    out_dir: output folder; ``<word>/<speaker>_nohash_<n>.wav`` files and the
      ``testing_list.txt`` / ``validation_list.txt`` split files go here.
    num_speakers: number of synthetic speakers (see `make_speakers`).
    repeats: utterances per speaker and word (``n`` in the file name).
    test_fraction: fraction of speakers (at least one) held out in ``testing_list.txt``.
    validation_fraction: fraction of speakers listed in ``validation_list.txt``.
    noise: standard deviation of the white background noise (full scale = 1).
    seed: seed for speakers, jitter, offsets and noise.
    words: the words to speak.
    workers: parallel espeak-ng processes (default: number of CPUs).
  """
  binary = espeak_binary()
  if binary is None:
    raise FileNotFoundError(
        "espeak-ng is not installed; install it with `apt-get install -y espeak-ng`.")
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}.")
  if not 0.0 <= test_fraction < 1.0 or not 0.0 <= validation_fraction < 1.0:
    raise ValueError(
        f"test_fraction and validation_fraction must be in [0, 1), got "
        f"{test_fraction} and {validation_fraction}.")
  speakers = make_speakers(num_speakers, seed)
  num_test = max(1, int(round(test_fraction * num_speakers))) if test_fraction else 0
  num_val = int(round(validation_fraction * num_speakers))
  if num_test + num_val >= num_speakers:
    raise ValueError(
        f"num_speakers={num_speakers} leaves no training speaker with "
        f"test_fraction={test_fraction}, validation_fraction={validation_fraction}.")
  order = np.random.default_rng(seed + 1).permutation(num_speakers)
  test = [speakers[i] for i in sorted(order[:num_test])]
  val = [speakers[i] for i in sorted(order[num_test:num_test + num_val])]
  train = [s for s in speakers if s not in test and s not in val]

  jobs = [(w, s, n) for w in words for s in speakers for n in range(repeats)]
  for w in words:
    os.makedirs(os.path.join(out_dir, w), exist_ok=True)

  def run(job):
    w, s, n = job
    rel = f"{w}/{s.speaker_id}_nohash_{n}.wav"
    write_wav(os.path.join(out_dir, rel), _utterance(w, s, n, seed, noise, binary))
    return rel

  with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
    rels = list(pool.map(run, jobs))
  for name, held in (("testing_list.txt", test), ("validation_list.txt", val)):
    ids = {s.speaker_id for s in held}
    with open(os.path.join(out_dir, name), "w") as f:
      f.writelines(r + "\n" for r in rels if r.split("/")[1].split("_nohash_")[0] in ids)
  return CorpusInfo(out_dir, tuple(train), tuple(val), tuple(test), len(rels))


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m tff_robust.tasks.espeak_corpus", description=__doc__.split("\n")[0])
  parser.add_argument("out_dir")
  parser.add_argument("--speakers", type=int, default=24)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--test_fraction", type=float, default=0.25)
  parser.add_argument("--validation_fraction", type=float, default=0.0)
  parser.add_argument("--noise", type=float, default=0.003)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--workers", type=int, default=None)
  args = parser.parse_args(argv)
  info = build_corpus(
      args.out_dir, args.speakers, args.repeats, test_fraction=args.test_fraction,
      validation_fraction=args.validation_fraction, noise=args.noise, seed=args.seed,
      workers=args.workers)
  print(f"wrote {info.num_files} clips to {info.out_dir}: {len(info.train_speakers)} train, "
        f"{len(info.validation_speakers)} validation, {len(info.test_speakers)} test speakers")
  for split, group in (("train", info.train_speakers), ("validation", info.validation_speakers),
                       ("test", info.test_speakers)):
    for s in group:
      print(f"  {split:10s} {s.speaker_id} {s.voice}+{s.variant} pitch={s.pitch} speed={s.speed}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
