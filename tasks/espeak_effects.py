"""Acoustic conditions for the espeak-ng keyword corpus: noise, babble, shift, reverberation,
band-limiting and gain, drawn per clip (`tasks.espeak_corpus`, ``--effects``).

Speech Commands' clips are real voices in real rooms through real microphones; espeak-ng's are
clean and identical from one utterance to the next, so that a linear probe on a *randomly
initialised* keyword CNN already separates them (docs/runs/kws_rm_check/probe.md). An `Effects`
makes each clip harder in the ways real recordings are:

* **reverberation** (``reverb_prob``, ``rt60_s``, ``drr_db``): the utterance is convolved with a
  synthetic room impulse response, a unit direct path followed by Gaussian noise decaying by
  60 dB over ``rt60_s`` seconds, its energy ``drr_db`` below the direct path;
* **time shift** (``overhang``): the word's offset in the 1 s window is uniform over positions that
  leave up to this share of it outside the window (0: the word always fits, as without effects);
* **background noise** (``snr_db``): coloured noise (power spectrum 1/f^beta, beta uniform in
  ``noise_exponent``) or, with probability ``babble_prob``, babble: ``babble_talkers`` streams of
  other espeak-ng speakers saying Speech Commands' non-keyword words (``BABBLE_WORDS``), added at a
  signal-to-noise ratio uniform in ``snr_db``: the mean power of the placed speech over its own
  samples against the mean power of the noise over the clip (`mix_at_snr`);
* **band-limiting** (``band_prob``): a zero-phase 4th-order Butterworth-shaped band-pass between a
  high-pass corner in ``highpass_hz`` and a low-pass corner in ``lowpass_hz``;
* **gain** (``gain_db``): the mixture's peak is set to a level uniform in this range (dBFS).

Every draw comes from a generator seeded by the clip's id (`clip_rng`), so builds are identical
whatever the number of workers, and a build without effects draws nothing extra: its clips are
byte-identical to those of a build that predates the effects. ``PRESETS`` are named strengths, weakest first;
``--effects`` takes a preset name or a JSON object of fields over the preset ``off``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
from scipy import signal

SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE
# Speech Commands v0.02's auxiliary (non-keyword) words: the babble says these.
BABBLE_WORDS = ("bed", "bird", "cat", "dog", "eight", "five", "four", "happy", "house", "marvin",
                "nine", "one", "seven", "sheila", "six", "three", "tree", "two", "wow", "zero",
                "backward", "forward", "follow", "learn", "visual")
BABBLE_POOL = 120  # utterances in a build's babble pool.
BAND_ORDER = 4


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


def trim(audio: np.ndarray, threshold: float = 0.02) -> np.ndarray:
  """Drops leading and trailing samples quieter than ``threshold`` x peak."""
  loud = np.flatnonzero(np.abs(audio) > threshold * np.max(np.abs(audio), initial=0.0))
  if loud.size == 0:
    return audio
  return audio[loud[0]:loud[-1] + 1]


@dataclasses.dataclass(frozen=True)
class Effects:
  """Per-clip acoustic conditions (see the module docstring); the defaults add nothing."""

  name: str = "off"
  snr_db: Optional[tuple[float, float]] = None
  babble_prob: float = 0.5
  babble_talkers: tuple[int, int] = (3, 6)
  noise_exponent: tuple[float, float] = (0.0, 2.0)
  overhang: float = 0.0
  reverb_prob: float = 0.0
  rt60_s: tuple[float, float] = (0.2, 0.8)
  drr_db: tuple[float, float] = (-3.0, 9.0)
  band_prob: float = 0.0
  highpass_hz: tuple[float, float] = (60.0, 400.0)
  lowpass_hz: tuple[float, float] = (2500.0, 7000.0)
  gain_db: Optional[tuple[float, float]] = None

  @property
  def active(self) -> bool:
    return bool(self.snr_db is not None or self.overhang > 0 or self.reverb_prob > 0
                or self.band_prob > 0 or self.gain_db is not None)

  @property
  def needs_babble(self) -> bool:
    return self.snr_db is not None and self.babble_prob > 0

  def to_json(self) -> dict[str, Any]:
    """The fields as JSON values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

  def manifest(self) -> dict[str, Any]:
    """What the corpus manifest records: the fields and the babble's words and pool size."""
    return {**self.to_json(), "babble_words": list(BABBLE_WORDS), "babble_pool": BABBLE_POOL}


PRESETS: dict[str, Effects] = {
    "off": Effects(),
    "light": Effects("light", snr_db=(15.0, 30.0), overhang=0.1, reverb_prob=0.3,
                     rt60_s=(0.1, 0.4), band_prob=0.3, gain_db=(-20.0, -1.0)),
    "moderate": Effects("moderate", snr_db=(10.0, 25.0), overhang=0.12, reverb_prob=0.4,
                        rt60_s=(0.15, 0.55), band_prob=0.4, gain_db=(-25.0, -1.0)),
    "medium": Effects("medium", snr_db=(5.0, 20.0), overhang=0.15, reverb_prob=0.5,
                      rt60_s=(0.2, 0.7), band_prob=0.5, gain_db=(-30.0, -1.0)),
    "heavy": Effects("heavy", snr_db=(0.0, 12.0), overhang=0.2, reverb_prob=0.7,
                     rt60_s=(0.3, 1.0), band_prob=0.7, gain_db=(-30.0, -1.0)),
}


def parse(text: str) -> Effects:
  """A preset name (``PRESETS``) or a JSON object of `Effects` fields (named "custom")."""
  if text in PRESETS:
    return PRESETS[text]
  try:
    fields = json.loads(text)
  except json.JSONDecodeError:
    fields = None
  if not isinstance(fields, dict):
    raise ValueError(f"--effects must be one of {', '.join(PRESETS)} or a JSON object: {text!r}.")
  names = {f.name for f in dataclasses.fields(Effects)}
  if set(fields) - names:
    raise ValueError(f"unknown effect fields {sorted(set(fields) - names)}, known {sorted(names)}.")
  fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
  return Effects(**{"name": "custom", **fields})


def clip_rng(key: str) -> np.random.Generator:
  """The effects' generator of one clip, seeded by the SHA-1 of its key (seed, speaker, word, n)."""
  return np.random.default_rng(int.from_bytes(hashlib.sha1(f"effects:{key}".encode()).digest()[:8],
                                              "little"))


def room_response(rng: np.random.Generator, rt60_s: float, drr_db: float,
                  rate: int = SAMPLE_RATE) -> np.ndarray:
  """A synthetic room impulse response: 1 (direct path), then noise decaying 60 dB in ``rt60_s``."""
  n = max(2, int(rt60_s * rate))
  tail = rng.normal(0.0, 1.0, n - 1) * np.exp(-6.908 * np.arange(1, n) / (rt60_s * rate))
  tail *= np.sqrt(10 ** (-drr_db / 10) / max(np.sum(tail ** 2), 1e-12))
  return np.concatenate([[1.0], tail])


def reverberate(audio: np.ndarray, rng: np.random.Generator, effects: Effects) -> np.ndarray:
  """``audio`` through a random room with probability ``reverb_prob`` (longer by its tail)."""
  if effects.reverb_prob <= 0 or rng.uniform() >= effects.reverb_prob:
    return audio
  rir = room_response(rng, rng.uniform(*effects.rt60_s), rng.uniform(*effects.drr_db))
  return signal.fftconvolve(audio, rir)


def offset(length: int, rng: np.random.Generator, overhang: float) -> int:
  """Start of a ``length``-sample word in the clip, up to ``overhang`` of it outside the clip."""
  out = int(overhang * min(length, CLIP_SAMPLES))
  return int(rng.integers(-out, max(CLIP_SAMPLES - length, 0) + out + 1))


def place(audio: np.ndarray, start: int) -> tuple[np.ndarray, slice]:
  """``audio`` at ``start`` in a silent clip (cut at its edges), and the span it covers."""
  clip = np.zeros(CLIP_SAMPLES)
  lo, hi = max(start, 0), min(start + len(audio), CLIP_SAMPLES)
  clip[lo:hi] = audio[lo - start:hi - start]
  return clip, slice(lo, hi)


def coloured_noise(rng: np.random.Generator, exponent: float, n: int = CLIP_SAMPLES) -> np.ndarray:
  """Gaussian noise whose power spectrum falls as 1/f^exponent (0 white, 1 pink, 2 brown)."""
  spectrum = rng.normal(size=n // 2 + 1) + 1j * rng.normal(size=n // 2 + 1)
  freqs = np.arange(n // 2 + 1, dtype=np.float64)
  spectrum[0] = 0.0
  spectrum[1:] *= freqs[1:] ** (-exponent / 2)
  return np.fft.irfft(spectrum, n=n)


def babble(rng: np.random.Generator, pool: Sequence[np.ndarray], talkers: int) -> np.ndarray:
  """``talkers`` streams of pool utterances end to end (gaps of 0-150 ms), each at unit power."""
  out = np.zeros(CLIP_SAMPLES)
  for _ in range(talkers):
    stream, pos = np.zeros(2 * CLIP_SAMPLES), 0
    while pos < len(stream):
      word = pool[int(rng.integers(len(pool)))][:len(stream) - pos]
      stream[pos:pos + len(word)] = word
      pos += len(word) + int(rng.integers(0, int(0.15 * SAMPLE_RATE)))
    start = int(rng.integers(0, CLIP_SAMPLES))
    talker = stream[start:start + CLIP_SAMPLES]
    out += talker / np.sqrt(max(np.mean(talker ** 2), 1e-12))
  return out


def mix_at_snr(speech: np.ndarray, span: slice, noise: np.ndarray, snr_db: float) -> np.ndarray:
  """``noise`` scaled so that the speech's power over ``span`` is ``snr_db`` above its power."""
  p_speech = np.mean(speech[span] ** 2) if span.stop > span.start else 0.0
  p_noise = max(np.mean(noise ** 2), 1e-20)
  return noise * np.sqrt(p_speech / (p_noise * 10 ** (snr_db / 10)))


def band_limit(audio: np.ndarray, low_hz: float, high_hz: float,
               rate: int = SAMPLE_RATE) -> np.ndarray:
  """Zero-phase band-pass: the FFT times Butterworth magnitudes with corners ``low_hz``, ``high_hz``."""
  freqs = np.fft.rfftfreq(len(audio), 1.0 / rate)
  with np.errstate(divide="ignore"):
    high_pass = 1.0 / np.sqrt(1.0 + (low_hz / np.maximum(freqs, 1e-9)) ** (2 * BAND_ORDER))
  low_pass = 1.0 / np.sqrt(1.0 + (freqs / high_hz) ** (2 * BAND_ORDER))
  return np.fft.irfft(np.fft.rfft(audio) * high_pass * low_pass, n=len(audio))


@dataclasses.dataclass(frozen=True)
class Clip:
  """A rendered clip's parts (floats, 1 s): speech, added noise and the white floor; ``snr_db``
  is the ratio the noise was added at (None: no noise)."""

  speech: np.ndarray
  noise: np.ndarray
  floor: np.ndarray
  span: slice
  snr_db: Optional[float]

  @property
  def mixture(self) -> np.ndarray:
    return self.speech + self.noise + self.floor


def render(audio: np.ndarray, floor: np.ndarray, start: int, rng: np.random.Generator,
           effects: Effects, pool: Sequence[np.ndarray] = ()) -> Clip:
  """The clip of a (reverberated, gain-set, cropped) ``audio`` over ``floor`` with ``effects``.

  ``start`` is the offset drawn without effects; with ``overhang`` > 0 it is redrawn from ``rng``.
  Band-limiting and gain act on every part alike (they are linear), so ``snr_db`` stays the
  ratio of the parts as mixed.
  """
  if effects.overhang > 0:
    start = offset(len(audio), rng, effects.overhang)
  speech, span = place(audio, start)
  noise, snr = np.zeros(CLIP_SAMPLES), None
  if effects.snr_db is not None:
    snr = float(rng.uniform(*effects.snr_db))
    if pool and rng.uniform() < effects.babble_prob:
      lo, hi = effects.babble_talkers
      noise = babble(rng, pool, int(rng.integers(lo, hi + 1)))
    else:
      noise = coloured_noise(rng, rng.uniform(*effects.noise_exponent))
    noise = mix_at_snr(speech, span, noise, snr)
  parts = [speech, noise, floor]
  if effects.band_prob > 0 and rng.uniform() < effects.band_prob:
    low, high = rng.uniform(*effects.highpass_hz), rng.uniform(*effects.lowpass_hz)
    parts = [band_limit(p, low, high) for p in parts]
  if effects.gain_db is not None:
    peak = max(np.max(np.abs(sum(parts))), 1e-9)
    scale = 10 ** (rng.uniform(*effects.gain_db) / 20) / peak
    parts = [p * scale for p in parts]
  return Clip(parts[0], parts[1], parts[2], span, snr)


def babble_pool(speak: Callable[[str, str, int, int], np.ndarray], voices: Sequence[str],
                seed: int, size: int = BABBLE_POOL) -> list[np.ndarray]:
  """``size`` utterances of ``BABBLE_WORDS``, each by a random voice, pitch and speed (from
  ``seed``), peak-normalised; ``speak(word, voice, pitch, speed)`` returns 16 kHz floats."""
  rng = np.random.default_rng([seed, 0xBAB])
  pool = []
  for _ in range(size):
    word = BABBLE_WORDS[int(rng.integers(len(BABBLE_WORDS)))]
    voice = voices[int(rng.integers(len(voices)))]
    audio = speak(word, voice, int(rng.integers(20, 80)), int(rng.integers(120, 220)))
    pool.append(audio / max(np.max(np.abs(audio)), 1e-9))
  return pool
