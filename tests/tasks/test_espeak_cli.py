"""The corpus builder's command line refuses bad arguments before speaking anything: exit 2 and one
line naming the argument, its value and what is allowed (`tasks.espeak_corpus_cli`)."""

import os

import pytest

from tff_robust.tasks import espeak_corpus, espeak_corpus_cli


def _refused(capsys, *argv):
  with pytest.raises(SystemExit) as e:
    espeak_corpus_cli.main(list(argv))
  out, err = capsys.readouterr()
  assert e.value.code == 2 and out == ""
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  return lines[0]


@pytest.fixture
def no_build(monkeypatch):
  """Fails the test if a refused call got as far as building (espeak-ng present or not)."""
  monkeypatch.setattr(espeak_corpus, "espeak_binary", lambda: "/usr/bin/espeak-ng")
  monkeypatch.setattr(espeak_corpus, "build_corpus", lambda *a, **k: pytest.fail("built a corpus"))


def test_bad_arguments_fail_in_one_line(tmp_path, capsys, no_build):
  out = str(tmp_path / "kws")
  assert _refused(capsys, out, "--speakers", "0") == "error: --speakers=0 is not valid: at least 1 speaker"
  assert _refused(capsys, out, "--speakers", "2", "--test_fraction", "0.5", "--validation_fraction", "0.5") == (
      "error: --speakers=2 is not valid: no training speaker is left after the test and validation shares "
      "(0.5, 0.5); use more speakers or smaller shares")
  assert _refused(capsys, out, "--effects=bogus") == (
      "error: --effects='bogus' is not valid: choose one of off, light, moderate, medium, heavy, or a JSON "
      "object of their fields")
  assert _refused(capsys, out, '--effects={"loud": 1}').startswith(
      "error: --effects='{\"loud\": 1}' is not valid: unknown effect fields ['loud']")
  assert _refused(capsys, out, "--noise=nan") == "error: --noise=nan is not valid: a finite number ≥ 0"
  assert _refused(capsys, out, "--speakers=x") == "error: argument --speakers: invalid int value: 'x' (see --help)"
  os.makedirs(out)
  open(os.path.join(out, "keep.txt"), "w").close()
  assert _refused(capsys, out) == (f"error: OUT_DIR={out!r} is not valid: the folder is not empty; remove it "
                                   "or choose another")
  assert os.listdir(out) == ["keep.txt"]


def test_without_espeak_ng_it_says_how_to_install_it(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(espeak_corpus, "espeak_binary", lambda: None)
  monkeypatch.setattr(espeak_corpus, "build_corpus", lambda *a, **k: pytest.fail("built a corpus"))
  assert _refused(capsys, str(tmp_path / "kws")) == (
      "error: espeak-ng is not installed, and it speaks the corpus: install it with `apt-get install -y "
      "espeak-ng` (Debian, Ubuntu), then run the same command again")
  assert not os.path.exists(tmp_path / "kws")
