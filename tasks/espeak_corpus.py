"""A keyword-spotting corpus spoken by espeak-ng at Speech Commands' scale, in its folder layout.

Synthetic speech for the ten Speech Commands keywords, written as
``<OUT_DIR>/<word>/<speaker>_nohash_<n>.wav`` (16 kHz, mono, 16-bit PCM, exactly
1 s), read by ``tasks.speech_commands`` with ``--data_source=folder``.

Scale (``SPEECH_COMMANDS_SCALE``, the defaults): 1,000 speakers x 3 repeats =
3,000 clips a keyword, 2,400 of them for training (Speech Commands v0.01 has
~2,400 a keyword, v0.02 ~3,800), 300 validation, 300 test; 30,000 files, 0.96 GB.

A *speaker* is one of the 8 English accents of espeak-ng (``VOICES``), one of
its 91 voice variants (``VARIANTS``: the timbres of Debian's ``espeak-ng-data``
without the effect voices), a base pitch and a base speed. Each of a speaker's
``repeats`` utterances of a word jitters pitch, speed and gain and places the
word at a random offset inside the 1 s clip, over faint white noise (``noise``,
0 for none). ``--effects`` (`tasks.espeak_effects`, off by default) adds background noise or
babble at a random SNR, reverberation, a wider time shift, band-limiting and gain per clip;
``--effects=moderate`` is the strength `bench/kws_features.py` chose (docs/runs/kws_features).

Split: whole speakers, by Speech Commands' own rule, the SHA-1 of the speaker id
(`speech_commands.hash_split`: 10 % validation, 10 % test). The 8-hex-digit ids
are drawn so that the rule puts exactly ``round(validation_fraction x speakers)``
speakers in validation and ``round(test_fraction x speakers)`` in test (at least
one each when the fraction is positive); ``testing_list.txt`` and
``validation_list.txt`` list their files, and agree with the rule.

Also written: ``speakers.tsv`` (each speaker's split, voice, variant, pitch,
speed) and the manifest ``corpus.json`` (`VERSION`, every build parameter, the
espeak-ng version, speakers and clips per split and keyword, and ``fingerprint``,
the SHA-256 of the sorted ``<path> <sha256 of the file>`` lines of all clips).
The corpus is built in a sibling folder and renamed into place when complete.
Everything is drawn from ``seed``: the same arguments give the same bytes.

Needs Debian's ``espeak-ng`` (``apt-get install -y espeak-ng``).

Usage: ``python -m tff_robust.tasks.espeak_corpus OUT_DIR [--speakers 1000] [--repeats 3]``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import io
import itertools
import os
import shutil
import struct
import subprocess
import sys
import wave
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from tff_robust.common import strict_json
from tff_robust.tasks import espeak_effects, speech_commands
from tff_robust.tasks.espeak_effects import resample, trim

VERSION = 2
WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
# espeak-ng's own (non-mbrola) English voices: accents. ("en-gb" would ignore the variant.)
VOICES = (
    "en", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029",
    "en-us-nyc",
)
# espeak-ng-data's voice variants (voices/!v), without effects (Demonic, UniRobot, anikaRobot,
# announcer, whisper, whisperf), the test voice 'fast', 'Mr serious' (a space in the name) and
# caleb / klatt6 (they speak exactly as klatt).
VARIANTS = (
    "adam", "Alex", "Alicia", "Andrea", "Andy", "anika", "Annie", "antonio", "AnxiousAndy",
    "aunty", "belinda", "benjamin", "boris", "croak", "david", "Denis", "Diogo", "ed", "edward",
    "edward2", "f1", "f2", "f3", "f4", "f5", "Gene", "Gene2", "grandma", "grandpa", "gustave",
    "Henrique", "Hugo", "iven", "iven2", "iven3", "iven4", "Jacky", "john", "kaukovalta", "klatt",
    "klatt2", "klatt3", "klatt4", "klatt5", "Lee", "linda", "m1", "m2", "m3", "m4", "m5", "m6",
    "m7", "m8", "marcelo", "Marco", "Mario", "max", "Michael", "michel", "miguel", "Mike",
    "Nguyen", "norbert", "pablo", "paul", "pedro", "quincy", "RicishayMax", "RicishayMax2",
    "RicishayMax3", "rob", "robert", "robosoft", "robosoft2", "robosoft3", "robosoft4",
    "robosoft5", "robosoft6", "robosoft7", "robosoft8", "sandro", "shelby", "steph", "steph2",
    "steph3", "Storm", "travis", "Tweaky", "victor", "zac",
)
PITCH_RANGE = (25, 75)  # espeak-ng -p (0..99, default 50): a speaker's base pitch.
SPEED_RANGE = (130, 200)  # espeak-ng -s, words per minute (default 175).
PITCH_JITTER = 6  # per-utterance +- pitch change.
SPEED_JITTER = 12  # per-utterance +- speed change.
GAIN_RANGE = (0.3, 0.9)  # per-utterance peak amplitude (full scale = 1).
NOISE = 0.003  # standard deviation of the white background noise.
SAMPLE_RATE = speech_commands.SAMPLE_RATE
CLIP_SAMPLES = SAMPLE_RATE  # 1 s.
ESPEAK_RATE = 22050  # espeak-ng's output sample rate.
SPEAKERS_FILE = "speakers.tsv"


@dataclasses.dataclass(frozen=True)
class Scale:
  """How many speakers and utterances a corpus has, and the shares of held-out speakers."""

  num_speakers: int
  repeats: int
  test_fraction: float
  validation_fraction: float

  def split_speakers(self) -> dict[str, int]:
    """Speakers per split: a positive fraction holds out at least one speaker."""
    held = lambda f: max(1, int(round(f * self.num_speakers))) if f > 0 else 0
    test, val = held(self.test_fraction), held(self.validation_fraction)
    return {"train": self.num_speakers - test - val, "validation": val, "test": test}

  def train_clips_per_keyword(self) -> int:
    return self.split_speakers()["train"] * self.repeats


# The defaults: Speech Commands' size (2,400 training clips a keyword) and split (10 % / 10 %).
SPEECH_COMMANDS_SCALE = Scale(num_speakers=1000, repeats=3, test_fraction=0.1,
                              validation_fraction=0.1)


@dataclasses.dataclass(frozen=True)
class Speaker:
  """One synthetic speaker: ``speaker_id`` is 8 hex digits, as in Speech Commands."""

  speaker_id: str
  voice: str
  variant: str
  pitch: int
  speed: int
  split: str = "train"


def espeak_binary() -> Optional[str]:
  """Path of the espeak-ng executable, or None if it is not installed."""
  return shutil.which("espeak-ng")


def split_of(speaker_id: str) -> str:
  """Speech Commands' split of a speaker (`speech_commands.hash_split`, 10 % / 10 %)."""
  return speech_commands.hash_split(f"{speaker_id}_nohash_0.wav")


def make_speakers(num_speakers: int, seed: int = 0, num_validation: int = 0,
                  num_test: int = 0) -> list[Speaker]:
  """Draws ``num_speakers`` distinct speakers (voice x variant, pitch, speed) from ``seed``.

  Voice/variant pairs are visited in a seeded random order without repetition
  (728 pairs) and cycled beyond that; pitch and speed are uniform integers. A
  seeded choice of ``num_test`` and ``num_validation`` speakers is held out, and
  every id is drawn (SHA-1 of the speaker's draw and an attempt number) until
  `split_of` puts it in its speaker's split.
  """
  if num_speakers < 1:
    raise ValueError(f"num_speakers must be >= 1, got {num_speakers}.")
  rng = np.random.default_rng(seed)
  pairs = list(itertools.product(VOICES, VARIANTS))
  order = rng.permutation(len(pairs))
  draws = []
  for k in range(num_speakers):
    voice, variant = pairs[order[k % len(pairs)]]
    pitch = int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1))
    speed = int(rng.integers(SPEED_RANGE[0], SPEED_RANGE[1] + 1))
    draws.append((voice, variant, pitch, speed))
  splits = ["train"] * num_speakers
  held = np.random.default_rng(seed + 1).permutation(num_speakers)
  for i in held[:num_test]:
    splits[i] = "test"
  for i in held[num_test:num_test + num_validation]:
    splits[i] = "validation"
  speakers, used = [], set()
  for k, ((voice, variant, pitch, speed), split) in enumerate(zip(draws, splits)):
    for attempt in itertools.count():
      key = f"{seed}:{k}:{voice}+{variant}:p{pitch}:s{speed}:{attempt}".encode()
      speaker_id = hashlib.sha1(key).hexdigest()[:8]
      if speaker_id not in used and split_of(speaker_id) == split:
        break
    used.add(speaker_id)
    speakers.append(Speaker(speaker_id, voice, variant, pitch, speed, split))
  return speakers


def _espeak_wav(word: str, voice: str, pitch: int, speed: int, binary: str) -> np.ndarray:
  """Runs espeak-ng and returns its float waveform in [-1, 1] at ``ESPEAK_RATE``."""
  out = subprocess.run(
      [binary, "-v", voice, "-p", str(pitch), "-s", str(speed), "--stdout", word],
      check=True, capture_output=True).stdout
  if len(out) < 44 or out[:4] != b"RIFF" or out[8:16] != b"WAVEfmt " or out[36:40] != b"data":
    raise RuntimeError(f"espeak-ng -v {voice} wrote no WAV data for {word!r}.")
  _, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", out, 20)
  if (channels, rate, bits) != (1, ESPEAK_RATE, 16):
    raise RuntimeError(f"espeak-ng wrote {channels} channel(s), {rate} Hz, {bits} bits; "
                       f"expected mono {ESPEAK_RATE} Hz 16-bit.")
  data = out[44:len(out) - len(out) % 2]
  return np.frombuffer(data, dtype="<i2").astype(np.float64) / 32768.0


def _speak(word: str, voice: str, pitch: int, speed: int, binary: str) -> np.ndarray:
  """espeak-ng's ``word``, trimmed, at ``SAMPLE_RATE``."""
  return resample(trim(_espeak_wav(word, voice, pitch, speed, binary)), ESPEAK_RATE, SAMPLE_RATE)


def _utterance(word: str, speaker: Speaker, n: int, seed: int, noise: float, binary: str,
               effects: espeak_effects.Effects = espeak_effects.PRESETS["off"],
               pool: Sequence[np.ndarray] = ()) -> np.ndarray:
  """The ``n``-th 1 s int16 clip of ``speaker`` saying ``word`` (``effects``, babble ``pool``)."""
  key = f"{seed}:{speaker.speaker_id}:{word}:{n}"
  rng = np.random.default_rng(int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "little"))
  fx = espeak_effects.clip_rng(key)  # draws nothing unless effects are on
  pitch = int(np.clip(speaker.pitch + rng.integers(-PITCH_JITTER, PITCH_JITTER + 1), 0, 99))
  speed = int(max(80, speaker.speed + rng.integers(-SPEED_JITTER, SPEED_JITTER + 1)))
  audio = _speak(word, f"{speaker.voice}+{speaker.variant}", pitch, speed, binary)
  audio = espeak_effects.reverberate(audio, fx, effects)
  audio *= rng.uniform(*GAIN_RANGE) / max(np.max(np.abs(audio)), 1e-9)
  if len(audio) > CLIP_SAMPLES:  # centre crop
    start = (len(audio) - CLIP_SAMPLES) // 2
    audio = audio[start:start + CLIP_SAMPLES]
  clip = rng.normal(0.0, noise, CLIP_SAMPLES) if noise > 0 else np.zeros(CLIP_SAMPLES)
  offset = int(rng.integers(0, CLIP_SAMPLES - len(audio) + 1))
  if effects.active:
    clip = espeak_effects.render(audio, clip, offset, fx, effects, pool).mixture
  else:
    clip[offset:offset + len(audio)] += audio
  return np.round(np.clip(clip, -1.0, 32767 / 32768) * 32768).astype("<i2")


def wav_bytes(samples: np.ndarray, rate: int = SAMPLE_RATE) -> bytes:
  """Int16 mono samples as the bytes of a PCM WAV file."""
  buf = io.BytesIO()
  with wave.open(buf, "wb") as f:
    f.setnchannels(1)
    f.setsampwidth(2)
    f.setframerate(rate)
    f.writeframes(np.asarray(samples, dtype="<i2").tobytes())
  return buf.getvalue()


def espeak_version(binary: str) -> str:
  """espeak-ng's version line without its data path, e.g. 'eSpeak NG text-to-speech: 1.51'."""
  out = subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout
  return out.split("Data at:")[0].strip()


def fingerprint(digests: dict[str, str]) -> str:
  """SHA-256 of the sorted ``<relative path> <sha256 of the file>`` lines."""
  return hashlib.sha256("".join(f"{rel} {digests[rel]}\n" for rel in sorted(digests)).encode()
                        ).hexdigest()


@dataclasses.dataclass(frozen=True)
class CorpusInfo:
  """What ``build_corpus`` wrote: speakers per split, the number of clips and the manifest."""

  out_dir: str
  train_speakers: tuple[Speaker, ...]
  validation_speakers: tuple[Speaker, ...]
  test_speakers: tuple[Speaker, ...]
  num_files: int
  manifest: dict[str, Any]


def _manifest(parameters: dict[str, Any], speakers: Sequence[Speaker], words: Sequence[str],
              digests: dict[str, str], num_bytes: int, binary: str) -> dict[str, Any]:
  splits = ("train", "validation", "test")
  split = {s.speaker_id: s.split for s in speakers}
  per_word = {name: {w: 0 for w in words} for name in splits}
  for rel in digests:
    per_word[split[speech_commands.speaker_of(rel)]][rel.split("/")[0]] += 1
  return {
      "builder": "tff_robust.tasks.espeak_corpus", "version": VERSION,
      "espeak_ng": espeak_version(binary), "parameters": parameters,
      "split_rule": "speech_commands.hash_split: SHA-1 of the speaker id, 10 % validation, 10 % test",
      "speakers": {name: sum(s.split == name for s in speakers) for name in splits},
      "clips": {name: sum(per_word[name].values()) for name in splits},
      "clips_per_keyword": per_word,
      "files": len(digests), "bytes": num_bytes, "fingerprint": fingerprint(digests),
  }


def _checked_split(out_dir: str, scale: Scale, noise: float) -> dict[str, int]:
  """The speakers per split of ``scale``, after checking the arguments and that ``out_dir`` is
  absent or empty (`build_corpus` writes nothing before this)."""
  n, repeats, test_fraction, validation_fraction = (scale.num_speakers, scale.repeats,
                                                    scale.test_fraction, scale.validation_fraction)
  if (repeats < 1 or not 0.0 <= test_fraction < 1.0 or not 0.0 <= validation_fraction < 1.0
      or noise < 0):
    raise ValueError(
        f"repeats must be >= 1, test_fraction and validation_fraction in [0, 1) and noise >= 0, "
        f"got {repeats}, {test_fraction}, {validation_fraction} and {noise}.")
  counts = scale.split_speakers()
  if counts["train"] < 1:
    raise ValueError(
        f"num_speakers={n} leaves no training speaker with "
        f"test_fraction={test_fraction}, validation_fraction={validation_fraction}.")
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise FileExistsError(f"{out_dir} is not empty; remove it or choose another folder.")
  return counts


def _write_lists(folder: str, clips: Sequence[str], speakers: Sequence[Speaker]) -> None:
  """Speech Commands' ``testing_list.txt`` and ``validation_list.txt`` (the held-out speakers'
  clips, in ``clips``' order) and the corpus's ``speakers.tsv``."""
  split = {s.speaker_id: s.split for s in speakers}
  for name, held in ((speech_commands.TESTING_LIST, "test"),
                     (speech_commands.VALIDATION_LIST, "validation")):
    with open(os.path.join(folder, name), "w") as f:
      f.writelines(rel + "\n" for rel in clips if split[speech_commands.speaker_of(rel)] == held)
  with open(os.path.join(folder, SPEAKERS_FILE), "w") as f:
    f.write("speaker\tsplit\tvoice\tvariant\tpitch\tspeed\n")
    f.writelines(f"{s.speaker_id}\t{s.split}\t{s.voice}\t{s.variant}\t{s.pitch}\t{s.speed}\n"
                 for s in speakers)


def build_corpus(
    out_dir: str,
    num_speakers: int = SPEECH_COMMANDS_SCALE.num_speakers,
    repeats: int = SPEECH_COMMANDS_SCALE.repeats,
    *,
    test_fraction: float = SPEECH_COMMANDS_SCALE.test_fraction,
    validation_fraction: float = SPEECH_COMMANDS_SCALE.validation_fraction,
    noise: float = NOISE,
    seed: int = 0,
    words: Sequence[str] = WORDS,
    workers: Optional[int] = None,
    effects: espeak_effects.Effects = espeak_effects.PRESETS["off"],
) -> CorpusInfo:
  """Writes the corpus to ``out_dir`` (absent or empty) and returns what it wrote.

  Args:
    out_dir: output folder: ``<word>/<speaker>_nohash_<n>.wav`` files, ``testing_list.txt``,
      ``validation_list.txt``, ``speakers.tsv`` and ``corpus.json``.
    num_speakers: number of synthetic speakers (see `make_speakers`).
    repeats: utterances per speaker and word (``n`` in the file name).
    test_fraction: share of speakers held out for test (at least one if positive).
    validation_fraction: share of speakers held out for validation (at least one if positive).
    noise: standard deviation of the white background noise (full scale = 1; 0 = none).
    seed: seed for speakers, jitter, offsets and noise.
    words: the words to speak.
    workers: parallel espeak-ng processes (default: number of CPUs); does not change the output.
    effects: per-clip acoustic conditions (`tasks.espeak_effects`), in the manifest when on.
  """
  binary = espeak_binary()
  if binary is None:
    raise FileNotFoundError(
        "espeak-ng is not installed; install it with `apt-get install -y espeak-ng`.")
  counts = _checked_split(out_dir, Scale(num_speakers, repeats, test_fraction, validation_fraction),
                          noise)
  speakers = make_speakers(num_speakers, seed, counts["validation"], counts["test"])
  parameters = {
      "num_speakers": num_speakers, "repeats": repeats, "test_fraction": test_fraction,
      "validation_fraction": validation_fraction, "noise": noise, "seed": seed,
      "words": list(words), "voices": list(VOICES), "variants": list(VARIANTS),
      "pitch_range": list(PITCH_RANGE), "speed_range": list(SPEED_RANGE),
      "pitch_jitter": PITCH_JITTER, "speed_jitter": SPEED_JITTER, "gain_range": list(GAIN_RANGE),
      "sample_rate": SAMPLE_RATE, "clip_samples": CLIP_SAMPLES,
  }
  if effects.active:
    parameters["effects"] = effects.manifest()
  voices = [f"{v}+{x}" for v, x in itertools.product(VOICES, VARIANTS)]
  babble = (espeak_effects.babble_pool(lambda *a: _speak(*a, binary), voices, seed)
            if effects.needs_babble else [])
  tmp = f"{os.path.abspath(out_dir).rstrip(os.sep)}.partial-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)

  def run(job):
    w, s, n = job
    rel = f"{w}/{s.speaker_id}_nohash_{n}.wav"
    data = wav_bytes(_utterance(w, s, n, seed, noise, binary, effects, babble))
    with open(os.path.join(tmp, rel), "wb") as f:
      f.write(data)
    return rel, hashlib.sha256(data).hexdigest(), len(data)

  try:
    for w in words:
      os.makedirs(os.path.join(tmp, w))
    jobs = [(w, s, n) for w in words for s in speakers for n in range(repeats)]
    pool = concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1)
    try:
      written = list(pool.map(run, jobs))
    finally:  # on Ctrl-C: the clips not started are dropped, not spoken first
      pool.shutdown(wait=True, cancel_futures=True)
    _write_lists(tmp, [rel for rel, _, _ in written], speakers)
    manifest = _manifest(parameters, speakers, words, {r: d for r, d, _ in written},
                         sum(n for _, _, n in written), binary)
    strict_json.write(os.path.join(tmp, speech_commands.MANIFEST), manifest, indent=1, sort_keys=True,
                      newline=True)
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)
    os.rename(tmp, out_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  by_split = lambda name: tuple(s for s in speakers if s.split == name)
  return CorpusInfo(out_dir, by_split("train"), by_split("validation"), by_split("test"),
                    len(written), manifest)


if __name__ == "__main__":  # the command line lives in espeak_corpus_cli (which imports this module)
  from tff_robust.tasks import espeak_corpus_cli  # pylint: disable=g-import-not-at-top
  sys.exit(espeak_corpus_cli.main())
