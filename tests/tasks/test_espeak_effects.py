"""The espeak corpus' acoustic conditions (`tasks.espeak_effects`): seeded per clip (same seed,
same bytes; other clips, other noise), recorded in the manifest, noise added at the asked SNR,
and a build without them equal to the corpus built before they existed."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tff_robust.tasks import espeak_corpus, espeak_effects, speech_commands

needs_espeak = pytest.mark.skipif(espeak_corpus.espeak_binary() is None,
                                  reason="espeak-ng is not installed (apt-get install -y espeak-ng)")
# The fingerprint of `_build(d)` without effects, by the builder before effects existed (commit
# 2a4bc71): the default build must not change.
FINGERPRINT_BEFORE_EFFECTS = (
    "39b876d84ef1f6b2572fffbaadb8448cb3cf6b7b668428238f889c980bfaf530")
EVERYTHING = espeak_effects.Effects(
    "test", snr_db=(0.0, 10.0), babble_prob=0.5, overhang=0.2, reverb_prob=1.0, band_prob=1.0,
    gain_db=(-20.0, -3.0))


def _build(d: str, **kwargs) -> espeak_corpus.CorpusInfo:
  kwargs = {"repeats": 2, "words": ("yes", "no"), "test_fraction": 0.3,
            "validation_fraction": 0.3, "workers": 2, **kwargs}
  return espeak_corpus.build_corpus(d, 3, **kwargs)


def _clips(d: str) -> dict[str, bytes]:
  out = {}
  for word in ("yes", "no"):
    for name in sorted(os.listdir(os.path.join(d, word))):
      with open(os.path.join(d, word, name), "rb") as f:
        out[f"{word}/{name}"] = f.read()
  return out


def _tone(seconds: float = 0.4) -> np.ndarray:
  t = np.arange(int(seconds * espeak_effects.SAMPLE_RATE)) / espeak_effects.SAMPLE_RATE
  return 0.5 * np.sin(2 * np.pi * 300 * t) * np.hanning(len(t))


@pytest.fixture(scope="module")
def off(tmp_path_factory) -> espeak_corpus.CorpusInfo:
  """`_build` without effects: built once for the two tests below."""
  if espeak_corpus.espeak_binary() is None:
    pytest.skip("espeak-ng is not installed (apt-get install -y espeak-ng)")
  return _build(str(tmp_path_factory.mktemp("effects") / "off"))


@needs_espeak
def test_build_without_effects_is_todays_corpus(tmp_path, off):
  named = _build(str(tmp_path / "named"), effects=espeak_effects.parse("off"))
  assert off.manifest["fingerprint"] == FINGERPRINT_BEFORE_EFFECTS
  assert named.manifest == off.manifest and "effects" not in off.manifest["parameters"]


@needs_espeak
def test_effects_are_seeded_per_clip_and_recorded(tmp_path, off):
  a = _build(str(tmp_path / "a"), effects=EVERYTHING)
  b = _build(str(tmp_path / "b"), effects=EVERYTHING, workers=1)
  clips_a, clips_off = _clips(a.out_dir), _clips(off.out_dir)
  assert clips_a == _clips(b.out_dir) and a.manifest["fingerprint"] == b.manifest["fingerprint"]
  assert all(clips_a[k] != clips_off[k] for k in clips_a)
  assert a.manifest["fingerprint"] != off.manifest["fingerprint"]
  with open(os.path.join(a.out_dir, speech_commands.MANIFEST)) as f:
    recorded = json.load(f)["parameters"]["effects"]
  assert recorded == EVERYTHING.manifest() and recorded["snr_db"] == [0.0, 10.0]
  assert recorded["babble_words"] and not set(recorded["babble_words"]) & set(espeak_corpus.WORDS)
  assert speech_commands.corpus_summary(a.manifest).endswith(", effects test)")


def test_other_clips_draw_other_conditions():
  effects = espeak_effects.Effects(snr_db=(5.0, 20.0), babble_prob=0.0)
  render = lambda key: espeak_effects.render(_tone(), np.zeros(16000), 100,
                                             espeak_effects.clip_rng(key), effects)
  first, again, other = render("0:abc:yes:0"), render("0:abc:yes:0"), render("0:abc:yes:1")
  assert np.array_equal(first.noise, again.noise) and first.snr_db == again.snr_db
  assert not np.allclose(first.noise, other.noise) and first.snr_db != other.snr_db


@needs_espeak
@pytest.mark.parametrize("babble_prob", [0.0, 1.0])
@pytest.mark.parametrize("snr_db", [0.0, 10.0, 20.0])
def test_noise_is_added_at_the_asked_snr(snr_db, babble_prob):
  binary = espeak_corpus.espeak_binary()
  speech = espeak_corpus._speak("left", "en-us+m3", 50, 175, binary) * 0.6
  pool = espeak_effects.babble_pool(lambda *a: espeak_corpus._speak(*a, binary),
                                    ["en+f2", "en-us+m1"], seed=0, size=6)
  effects = espeak_effects.Effects(snr_db=(snr_db, snr_db), babble_prob=babble_prob)
  clip = espeak_effects.render(speech, np.zeros(16000), 3000, espeak_effects.clip_rng("k"),
                               effects, pool)
  written = np.round(np.clip(clip.mixture, -1, 32767 / 32768) * 32768) / 32768  # as in the WAV
  noise = written - clip.speech
  measured = 10 * np.log10(np.mean(clip.speech[clip.span] ** 2) / np.mean(noise ** 2))
  assert clip.snr_db == snr_db and abs(measured - snr_db) < 0.5


def test_room_response_decays_by_rt60_and_keeps_its_direct_ratio():
  rir = espeak_effects.room_response(np.random.default_rng(0), rt60_s=0.5, drr_db=6.0)
  assert len(rir) == 8000 and rir[0] == 1.0
  assert abs(10 * np.log10(1.0 / np.sum(rir[1:] ** 2)) - 6.0) < 1e-6
  early, late = np.mean(rir[1:800] ** 2), np.mean(rir[-800:] ** 2)
  assert 10 * np.log10(early / late) > 40


def test_band_limit_and_shift():
  t = np.arange(16000) / 16000
  low, mid, high = (np.sin(2 * np.pi * f * t) for f in (30.0, 1000.0, 7500.0))
  power = lambda x: np.mean(espeak_effects.band_limit(x, 200.0, 3000.0) ** 2) / np.mean(x ** 2)
  assert power(mid) > 0.95 and power(low) < 0.01 and power(high) < 0.01
  rng = np.random.default_rng(0)
  starts = [espeak_effects.offset(8000, rng, 0.25) for _ in range(2000)]
  assert min(starts) >= -2000 and max(starts) <= 10000 and min(starts) < 0 < max(starts) - 8000
  clip, span = espeak_effects.place(np.ones(8000), -2000)
  assert span == slice(0, 6000) and clip.sum() == 6000


def test_parse_presets_and_json():
  assert espeak_effects.parse("off") == espeak_effects.Effects()
  assert not espeak_effects.parse("off").active and espeak_effects.parse("medium").active
  custom = espeak_effects.parse('{"snr_db": [3, 9], "reverb_prob": 0.5}')
  assert custom.name == "custom" and custom.snr_db == (3, 9) and custom.reverb_prob == 0.5
  for bad in ("loud", '{"volume": 1}', "[1]"):
    with pytest.raises(ValueError):
      espeak_effects.parse(bad)
