"""The runner names a run's data by the fingerprint it states, not by its folder
(`experiments.data_identity`): a finished run recorded on one copy of a corpus is the same run on
another copy that states its fingerprint (in its own manifest, or in the record beside a folder
not at hand), and a conflict on a copy that states another fingerprint or none."""

import ast
import json
import os
import sys

import pytest

from helpers.paths import ROOT

from tff_robust import experiments as ex
from tff_robust.experiments import data_identity
from tff_robust.experiments.runs import resolved_path

PRINT = "d91e78de"


def _corpus(folder, fingerprint):
  os.makedirs(folder)
  with open(os.path.join(folder, data_identity.MANIFEST), "w") as f:
    json.dump({"fingerprint": fingerprint, "version": 2}, f)


def _finished_run(root, corpus, fingerprint=PRINT):
  """Table 3's FA cell, C = 0.5 iid, seed 0, finished on ``corpus`` (its data.json as main writes it)."""
  cell = ex.select(ex.build_table("rmah_table3"), ["FA"], ["c0.5_iid"]).cells[0]
  run = ex.Run(cell, 0, root, ex.Overrides(rounds=30, data_dir=corpus))
  run.record(sys.executable)
  for name, value in (("data.json", {"fingerprint": fingerprint}), ("final_metrics.json", {"test_accuracy": 0.5})):
    with open(os.path.join(run.output_dir, name), "w") as f:
      json.dump(value, f)
  return cell


def _status(cell, root, corpus):
  return ex.Run(cell, 0, root, ex.Overrides(rounds=30, data_dir=corpus)).status()


def test_a_copy_of_the_corpus_that_states_the_runs_fingerprint_is_the_same_run(tmp_path):
  root, made_on = str(tmp_path / "runs"), str(tmp_path / "machine" / "corpus")
  cell = _finished_run(root, made_on)
  assert _status(cell, root, made_on) == ex.DONE  # the folder it was made on: the same as before
  _corpus(str(tmp_path / "same"), PRINT)
  _corpus(str(tmp_path / "other"), "0123abcd")
  assert _status(cell, root, str(tmp_path / "same")) == ex.DONE
  clash = ex.Run(cell, 0, root, ex.Overrides(rounds=30, data_dir=str(tmp_path / "other")))
  assert clash.status() == ex.CONFLICT
  assert f"then --data_dir={made_on}, now --data_dir={tmp_path / 'other'}" in clash.conflict()
  assert _status(cell, root, str(tmp_path / "absent")) == ex.CONFLICT  # states nothing: its path decides


def test_a_corpus_not_at_hand_is_named_by_the_record_beside_it(tmp_path):
  """The results page's clone: ``ROOT/kws_corpus`` is not there, ``ROOT/kws_corpus.json`` is."""
  root = str(tmp_path / "runs")
  cell = _finished_run(root, str(tmp_path / "machine" / "corpus"))
  page_corpus = os.path.join(root, "kws_corpus")
  with open(page_corpus + ".json", "w") as f:
    json.dump({"test_clips": 3000, "fingerprint": PRINT}, f)
  assert data_identity.stated(page_corpus) == PRINT and _status(cell, root, page_corpus) == ex.DONE
  _corpus(page_corpus, "0123abcd")  # the corpus at hand: its own manifest decides
  assert data_identity.stated(page_corpus) == "0123abcd" and _status(cell, root, page_corpus) == ex.CONFLICT


def test_a_run_without_a_data_record_is_named_by_its_path(tmp_path):
  root, made_on = str(tmp_path / "runs"), str(tmp_path / "machine" / "corpus")
  cell = _finished_run(root, made_on)
  os.remove(os.path.join(root, "rmah_kws_c0.5_iid_fa_s0", "data.json"))
  _corpus(str(tmp_path / "same"), PRINT)
  assert data_identity.recorded(os.path.join(root, "rmah_kws_c0.5_iid_fa_s0")) is None
  assert _status(cell, root, str(tmp_path / "same")) == ex.CONFLICT
  assert _status(cell, root, made_on) == ex.DONE


def test_other_flags_still_conflict_on_the_same_data(tmp_path):
  root, made_on = str(tmp_path / "runs"), str(tmp_path / "machine" / "corpus")
  cell = _finished_run(root, made_on)
  _corpus(str(tmp_path / "same"), PRINT)
  other = ex.Run(cell, 0, root, ex.Overrides(rounds=30, data_dir=str(tmp_path / "same"),
                                             extra_flags=("--client_lr=0.3",)))
  assert other.status() == ex.CONFLICT and "now --client_lr=0.3" in other.conflict()


@pytest.mark.parametrize("value, path", [("$ROOT/kws_corpus", "/r/kws_corpus"), ("$ROOT", "/r"),
                                         ("$REPO/data", "/repo/data"), ("/abs/data", "/abs/data"),
                                         ("$ROOTS/x", "$ROOTS/x")])
def test_resolved_path_reads_the_portable_tokens(value, path):
  assert resolved_path(value, "/r", "/repo") == path


def test_the_manifest_is_the_corpus_builders():
  """The name main's keyword task reads (`tasks.speech_commands.MANIFEST`), read from its source:
  importing it would import TensorFlow."""
  with open(os.path.join(ROOT, "tasks", "speech_commands.py")) as f:
    tree = ast.parse(f.read())
  values = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["MANIFEST"]]
  assert values == [data_identity.MANIFEST]
