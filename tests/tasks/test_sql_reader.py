"""`tasks.sql_reader` against TFF's own ``SqlClientData`` on files TFF's own writer made: the
same clients and elements in the same order, read by rowid (no scan per client), falling back
to a one-scan rowid map for files not written client by client, never writing the file."""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.datasets import emnist as tff_emnist

from tff_robust.tasks import sql_reader

PARSE = tff_emnist._add_proto_parsing  # pylint: disable=protected-access
SIZES = {"f0": 5, "t0": 3, "f1": 1, "t1": 2, "f2": 7, "t2": 1, "f3": 4, "t3": 2, "f4": 2}


def _client_dataset(cid: str) -> tf.data.Dataset:
  """EMNIST-shaped elements, distinct per client and position."""
  n = SIZES[cid]
  base = (sum(map(ord, cid)) % 50) * 100
  labels = np.arange(base, base + n, dtype=np.int32) % 62
  pixels = np.stack([np.full([28, 28], (base + i) / 10_000, np.float32) for i in range(n)])
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(label=labels, pixels=pixels))


@pytest.fixture(scope="module")
def tff_file(tmp_path_factory) -> str:
  """Written by TFF's writer, client by client (train and test clients interleaved)."""
  path = str(tmp_path_factory.mktemp("tff_writer") / "emnist_all.sqlite")
  split = {cid: "all_train" if cid.startswith("f") else "all_test" for cid in SIZES}
  tff.simulation.datasets.save_to_sql_client_data(list(SIZES), _client_dataset, path,
                                                  split_names_by_client_id=split)
  return path


def _copy(src: str, dst: str, example_order=None, metadata_order=None) -> str:
  """``src`` rewritten with its examples / metadata rows in another order."""
  with sqlite3.connect(src) as con:
    examples = con.execute("SELECT split_name, client_id, serialized_example_proto FROM examples "
                           "ORDER BY rowid").fetchall()
    meta = con.execute("SELECT client_id, split_name, num_examples FROM client_metadata "
                       "ORDER BY rowid").fetchall()
  con.close()
  schema = [r[0] for r in sqlite3.connect(src).execute("SELECT sql FROM sqlite_master")]
  with sqlite3.connect(dst) as con:
    for statement in schema:
      con.execute(statement)
    order = example_order(len(examples)) if example_order else range(len(examples))
    con.executemany("INSERT INTO examples VALUES (?, ?, ?)", [examples[i] for i in order])
    order = metadata_order(len(meta)) if metadata_order else range(len(meta))
    con.executemany("INSERT INTO client_metadata VALUES (?, ?, ?)", [meta[i] for i in order])
  con.close()
  return dst


@pytest.fixture(scope="module")
def shuffled_file(tff_file, tmp_path_factory) -> str:
  """TFF's file with its examples in a random order: the metadata predicts nothing."""
  return _copy(tff_file, str(tmp_path_factory.mktemp("shuffled") / "emnist_all.sqlite"),
               example_order=lambda n: np.random.default_rng(0).permutation(n))


@pytest.fixture(scope="module")
def reordered_metadata_file(tff_file, tmp_path_factory) -> str:
  """TFF's file with its metadata rows reversed: totals agree, every predicted range is wrong."""
  return _copy(tff_file, str(tmp_path_factory.mktemp("reordered") / "emnist_all.sqlite"),
               metadata_order=lambda n: list(range(n))[::-1])


def _elements(ds: tf.data.Dataset) -> list[tuple]:
  return [(int(e["label"]), e["pixels"].tobytes()) for e in ds.as_numpy_iterator()]


def _tff_split(path: str, split: str):
  return tff.simulation.datasets.SqlClientData(path, split).preprocess(PARSE)


@pytest.mark.parametrize("which", ["tff_file", "shuffled_file", "reordered_metadata_file"])
def test_every_client_and_the_pool_equal_tffs_sqlclientdata(which, request):
  path = request.getfixturevalue(which)
  source = sql_reader.SqlFile(path)
  for split in ("all_train", "all_test"):
    ours, theirs = sql_reader.SqlClients(source, split, PARSE), _tff_split(path, split)
    assert ours.client_ids == theirs.client_ids
    assert ours.element_type_structure == theirs.element_type_structure
    for cid in ours.client_ids:
      ds = ours.create_tf_dataset_for_client(cid)
      assert _elements(ds) == _elements(theirs.create_tf_dataset_for_client(cid))
      assert int(ds.cardinality()) == SIZES[cid] == ours.num_examples(cid)
    for seed in (0, 7):
      assert (_elements(ours.create_tf_dataset_from_all_clients(seed))
              == _elements(theirs.create_tf_dataset_from_all_clients(seed)))
  assert source.uses_map == (which != "tff_file")


def test_start_up_reads_the_metadata_only_and_a_client_is_checked_once(tff_file):
  source = sql_reader.SqlFile(tff_file)
  train = sql_reader.SqlClients(source, "all_train", PARSE)
  assert (source.scans, source.checked) == (0, set())
  for _ in range(2):
    train.create_tf_dataset_for_client("f2")
    train.create_tf_dataset_for_client("f4")
  assert source.checked == {("all_train", "f2"), ("all_train", "f4")}
  _elements(train.pooled(seed=1))
  assert (source.scans, source.uses_map) == (1, False)  # the pool: one scan


def _plan(path: str, query: str) -> str:
  with sqlite3.connect(sql_reader.read_only_uri(path), uri=True) as con:
    return " ".join(str(r[-1]) for r in con.execute("EXPLAIN QUERY PLAN " + query))


@pytest.mark.parametrize("which", ["tff_file", "shuffled_file"])
def test_a_clients_query_searches_by_rowid_where_tffs_scans(which, request):
  path = request.getfixturevalue(which)
  source = sql_reader.SqlFile(path)
  query = source.rows("all_train", "f2").query()
  assert "INTEGER PRIMARY KEY" in _plan(path, query) and "SCAN" not in _plan(path, query)
  tffs = "SELECT serialized_example_proto FROM examples WHERE client_id = 'f2' and split_name ='all_train'"
  assert _plan(path, tffs).startswith("SCAN")


def _digest(directory: str) -> dict[str, str]:
  return {name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
          for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize("which", ["tff_file", "shuffled_file"])
def test_the_file_is_read_only_never_written_nor_indexed(which, request, tmp_path):
  path = shutil.copy(request.getfixturevalue(which), tmp_path / "emnist_all.sqlite")
  os.chmod(path, 0o444)
  before = _digest(str(tmp_path))
  source = sql_reader.SqlFile(str(path))
  test = sql_reader.SqlClients(source, "all_test", PARSE)
  for cid in test.client_ids:
    _elements(test.create_tf_dataset_for_client(cid))
  _elements(test.pooled(0))
  _elements(test.heads(test.client_ids, 1))
  source.close()
  assert _digest(str(tmp_path)) == before
  with sqlite3.connect(sql_reader.read_only_uri(str(path)), uri=True) as con:
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index'").fetchone() == (0,)
  with pytest.raises(sqlite3.OperationalError, match="readonly"):
    source.connect().execute("CREATE INDEX i ON examples (client_id)")


def test_heads_are_each_clients_first_examples_in_the_given_order(tff_file):
  ours = sql_reader.SqlClients(sql_reader.SqlFile(tff_file), "all_train", PARSE)
  theirs = _tff_split(tff_file, "all_train")
  ids = ["f3", "f0", "f1"]
  want = [e for cid in ids for e in _elements(theirs.create_tf_dataset_for_client(cid).take(2))]
  assert _elements(ours.heads(ids, 2)) == want


def test_a_traced_client_id_reads_what_tff_reads(tff_file):
  ours = sql_reader.SqlClients(sql_reader.SqlFile(tff_file), "all_test", PARSE)
  ids = tf.data.Dataset.from_tensor_slices(["t2", "t0"])
  want = _elements(_tff_split(tff_file, "all_test").create_tf_dataset_for_client("t2"))
  want += _elements(_tff_split(tff_file, "all_test").create_tf_dataset_for_client("t0"))
  assert _elements(ids.flat_map(ours.serializable_dataset_fn)) == want


def test_subset_and_unknown_clients(tff_file):
  train = sql_reader.SqlClients(sql_reader.SqlFile(tff_file), "all_train", PARSE)
  assert train.subset(["f3", "f1"]).client_ids == ["f1", "f3"]
  with pytest.raises(ValueError, match="t0"):
    train.create_tf_dataset_for_client("t0")
  with pytest.raises(ValueError, match="not clients of split 'all_train'"):
    train.subset(["f1", "nobody"])


def test_a_file_not_in_tffs_format_is_named_with_what_it_lacks(tmp_path):
  path = str(tmp_path / "x.sqlite")
  with sqlite3.connect(path) as con:
    con.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, serialized_example_proto BLOB)")
  con.close()
  with pytest.raises(ValueError, match=r"x\.sqlite .*no table 'client_metadata'"):
    sql_reader.SqlFile(path)
