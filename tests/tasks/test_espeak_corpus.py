"""The espeak-ng keyword corpus at Speech Commands' scale: its defaults, split rule, determinism and
manifest (on builds of a few speakers), and the speech_commands task's use of the manifest
(summary, `Task.data_manifest`, feature cache)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tff_robust import tasks
from tff_robust.tasks import TaskOptions, espeak_corpus, espeak_corpus_cli, speech_commands

needs_espeak = pytest.mark.skipif(espeak_corpus.espeak_binary() is None,
                                  reason="espeak-ng is not installed (apt-get install -y espeak-ng)")
WORDS = ("yes", "no")


def _build(d: str, num_speakers: int = 3, **kwargs) -> espeak_corpus.CorpusInfo:
  kwargs = {"repeats": 1, "words": WORDS, "test_fraction": 0.3, "validation_fraction": 0.3,
            "workers": 2, **kwargs}
  return espeak_corpus.build_corpus(d, num_speakers, **kwargs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """3 speakers (one per split) x 2 repeats x yes/no."""
  if espeak_corpus.espeak_binary() is None:
    pytest.skip("espeak-ng is not installed (apt-get install -y espeak-ng)")
  d = str(tmp_path_factory.mktemp("tiny") / "corpus")
  return d, _build(d, repeats=2)


def _files(d: str) -> dict[str, bytes]:
  out = {}
  for folder, _, names in os.walk(d):
    for name in names:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, d)] = f.read()
  return out


def _listed(d: str) -> dict[str, str]:
  listed = {}
  for split, name in (("test", speech_commands.TESTING_LIST),
                      ("validation", speech_commands.VALIDATION_LIST)):
    with open(os.path.join(d, name)) as f:
      listed.update({line.strip(): split for line in f if line.strip()})
  return listed


def test_default_scale_is_speech_commands_size():
  scale = espeak_corpus.SPEECH_COMMANDS_SCALE
  assert scale.train_clips_per_keyword() >= 2000
  assert scale.split_speakers() == {"train": 800, "validation": 100, "test": 100}
  assert (scale.test_fraction, scale.validation_fraction) == (
      speech_commands.TEST_PERCENT / 100, speech_commands.VALIDATION_PERCENT / 100)


def test_cli_defaults_are_the_scale(monkeypatch, capsys):
  seen = {}

  def fake(out_dir, num_speakers, repeats, **kwargs):
    seen.update(num_speakers=num_speakers, repeats=repeats, **kwargs)
    raise SystemExit(0)

  monkeypatch.setattr(espeak_corpus, "build_corpus", fake)
  with pytest.raises(SystemExit):
    espeak_corpus_cli.main(["/nowhere"])
  scale = espeak_corpus.SPEECH_COMMANDS_SCALE
  assert (seen["num_speakers"], seen["repeats"], seen["test_fraction"],
          seen["validation_fraction"]) == (scale.num_speakers, scale.repeats, scale.test_fraction,
                                           scale.validation_fraction)
  assert seen["noise"] == espeak_corpus.NOISE > 0 and seen["seed"] == 0


def test_speakers_hash_into_their_split():
  speakers = espeak_corpus.make_speakers(200, seed=3, num_validation=20, num_test=30)
  assert speakers == espeak_corpus.make_speakers(200, seed=3, num_validation=20, num_test=30)
  assert [sum(s.split == k for s in speakers) for k in ("train", "validation", "test")] == [150, 20, 30]
  assert len({s.speaker_id for s in speakers}) == 200
  for s in speakers:
    assert speech_commands.hash_split(f"{s.speaker_id}_nohash_0.wav") == s.split
  assert len({(s.voice, s.variant) for s in speakers}) == 200  # 728 pairs before any repeats


@needs_espeak
def test_voices_and_variants_exist_and_differ():
  binary = espeak_corpus.espeak_binary()
  listing = subprocess.run([binary, "--voices=variant"], capture_output=True, text=True).stdout
  missing = [v for v in espeak_corpus.VARIANTS if f"!v/{v} " not in listing]
  assert not missing
  for voice in espeak_corpus.VOICES:  # a voice that ignores its variant ("en-gb") would fail
    a, b = (espeak_corpus._espeak_wav("left", f"{voice}+{v}", 50, 175, binary) for v in ("m1", "f3"))
    assert a.size > 2000 and (a.shape != b.shape or not np.array_equal(a, b)), voice


@needs_espeak
def test_build_is_deterministic_and_seeded(tmp_path):
  a, b, c = (str(tmp_path / n) for n in "abc")
  _build(a)
  _build(b, workers=1)
  assert _files(a) == _files(b)
  _build(c, seed=1)
  fingerprints = [speech_commands.read_manifest(d)["fingerprint"] for d in (a, c)]
  assert fingerprints[0] != fingerprints[1]


@needs_espeak
def test_lists_agree_with_speech_commands_hash_rule(tiny, tmp_path):
  d, info = tiny
  listed = _listed(d)
  assert {s for s in listed.values()} == {"test", "validation"}
  wavs = [rel for rel in _files(d) if rel.endswith(".wav")]
  assert len(wavs) == info.num_files == 3 * 2 * 2
  for rel in wavs:
    assert speech_commands.hash_split(rel) == listed.get(rel, "train"), rel
  bare = str(tmp_path / "bare")  # the task's hash rule alone gives the same split
  shutil.copytree(d, bare)
  for name in (speech_commands.TESTING_LIST, speech_commands.VALIDATION_LIST):
    os.remove(os.path.join(bare, name))
  assert speech_commands.scan_folder(bare) == speech_commands.scan_folder(d)


@needs_espeak
def test_manifest_describes_the_files(tiny):
  d, info = tiny
  m = speech_commands.read_manifest(d)
  assert m == info.manifest and m["version"] == espeak_corpus.VERSION
  assert m["parameters"]["num_speakers"] == 3 and m["parameters"]["repeats"] == 2
  assert m["parameters"]["words"] == list(WORDS) and m["parameters"]["seed"] == 0
  assert m["speakers"] == {"train": 1, "validation": 1, "test": 1}
  assert m["clips_per_keyword"] == {s: {"yes": 2, "no": 2} for s in ("train", "validation", "test")}
  assert m["clips"] == {"train": 4, "validation": 4, "test": 4} and m["files"] == 12
  wavs = {rel: data for rel, data in _files(d).items() if rel.endswith(".wav")}
  assert m["bytes"] == sum(len(v) for v in wavs.values())
  assert m["fingerprint"] == espeak_corpus.fingerprint(
      {rel: hashlib.sha256(data).hexdigest() for rel, data in wavs.items()})
  with open(os.path.join(d, espeak_corpus.SPEAKERS_FILE)) as f:
    rows = [line.split("\t") for line in f.read().splitlines()[1:]]
  assert sorted((r[0], r[1]) for r in rows) == sorted(
      (s.speaker_id, s.split) for s in info.train_speakers + info.validation_speakers + info.test_speakers)


@needs_espeak
def test_build_refuses_a_non_empty_folder_and_leaves_no_partial(tmp_path):
  d = tmp_path / "full"
  d.mkdir()
  (d / "x").write_text("")
  with pytest.raises(FileExistsError, match="not empty"):
    _build(str(d))
  with pytest.raises(ValueError, match="no training speaker"):
    _build(str(tmp_path / "two"), num_speakers=2)
  assert sorted(os.listdir(tmp_path)) == ["full"]


@needs_espeak
def test_cached_features_equal_fresh_ones(tmp_path, monkeypatch):
  d = str(tmp_path / "c")
  _build(d, num_speakers=4, words=("yes", "no", "up"))
  fresh = speech_commands.load_folder(d, cache=False)
  assert not [n for n in os.listdir(d) if n.startswith(".features_")]
  first = speech_commands.load_folder(d)  # computes and writes the cache
  caches = [n for n in os.listdir(d) if n.startswith(".features_")]
  assert len(caches) == 1 and not caches[0].endswith(".tmp")
  monkeypatch.setattr(speech_commands, "_features", lambda _: pytest.fail("not from the cache"))
  cached = speech_commands.load_folder(d)
  for split in ("train", "validation", "test"):
    for got in (first[split], cached[split]):
      for a, b in zip(fresh[split], got):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
  monkeypatch.undo()
  # Other feature parameters or another corpus name another cache; a foreign file is ignored.
  clips = speech_commands.scan_folder(d)
  key = speech_commands.feature_key("f", clips)
  monkeypatch.setattr(speech_commands, "MEL_FMAX", 7000.0)
  assert speech_commands.feature_key("f", clips) != key
  assert speech_commands.feature_key("g", clips) != key
  monkeypatch.undo()
  path = os.path.join(d, caches[0])
  np.savez(path.removesuffix(".npz"), key=np.array("another"))
  again = speech_commands.load_folder(d)
  np.testing.assert_array_equal(again["test"][0], fresh["test"][0])


@needs_espeak
def test_task_summarises_and_exposes_the_manifest(tiny):
  d, info = tiny
  task = tasks.load_task("speech_commands", TaskOptions(data_dir=d, num_clients=0))
  fp = info.manifest["fingerprint"][:8]
  assert f"espeak corpus v{espeak_corpus.VERSION} (3 speakers x 2 repeats, fingerprint {fp})" in task.info
  assert task.data_manifest == info.manifest
  assert task.validation is not None and len(list(task.validation)) == 4


def test_folder_without_manifest_has_none(tmp_path):
  assert speech_commands.read_manifest(str(tmp_path)) is None
  (tmp_path / speech_commands.MANIFEST).write_text(json.dumps({"version": 9}))
  assert speech_commands.corpus_summary(speech_commands.read_manifest(str(tmp_path))).startswith(
      "espeak corpus v9 (? speakers")
