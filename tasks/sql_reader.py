"""TFF's on-disk federated data read by rowid: a client costs its own examples, not the file.

A file in TFF's format (what ``tff.simulation.datasets.save_to_sql_client_data`` writes and
TFF's loaders read) holds the tables ``examples(split_name, client_id,
serialized_example_proto)`` and ``client_metadata(client_id, split_name, num_examples)``, with
no index. TFF's ``SqlClientData`` reads a client with ``WHERE client_id = … AND split_name =
…``: a scan of the whole table per client, so a round of k clients costs k × the file and the
pooled test split of K writers K × the file.

TFF's writer inserts a client's examples in one run, then its ``client_metadata`` row. The
metadata rows in rowid order, with their cumulative ``num_examples``, therefore predict each
client's examples as the rowids ``[a, a + n − 1]``, which SQLite reads through the table's own
b-tree in O(n + log N). `SqlFile`:

* at start-up reads ``client_metadata`` only (and the examples' largest rowid);
* checks a client's predicted range the first time the client is read (one query over its n
  rows: all n rowids present, all of that client and split). Given the metadata's counts this
  proves the range holds exactly the client's examples, in the order TFF returns them (rowid);
* when a check fails, or the metadata cannot predict the layout (duplicate rows, a total that is
  not the largest rowid: a file not written client by client), builds a map of every client's
  rowids in one scan of the table and reads by it from then on;
* reads a pooled split (every client's examples) with one query (`SqlFile.read_split`).

`SqlClients` is a ``tff.simulation.datasets.ClientData`` over one split whose datasets equal
TFF's ``SqlClientData`` ones after TFF's parsing, element for element and in the same order.
A client's dataset is a ``SqlDataset`` over its rowids, with its cardinality known; the dataset
graph travels to TFF's worker, which reads those rows itself (as it reads TFF's own datasets).
`SqlClients.pooled` is TFF's ``create_tf_dataset_from_all_clients(seed)`` (the clients in that
seeded order) read in one query when it is first iterated.

The file is only ever opened read-only, by URI (``file:…?mode=ro``): nothing is written into it
or next to it, and no index is created.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

ParseFn = Callable[[tf.data.Dataset], tf.data.Dataset]  # serialized tf.Examples -> elements
TABLES = ("examples", "client_metadata")
EXAMPLE_COLUMNS = ("split_name", "client_id", "serialized_example_proto")
METADATA_COLUMNS = ("client_id", "split_name", "num_examples")
_FETCH = 50_000  # rows per fetch of a scan


def read_only_uri(path: str) -> str:
  """SQLite's read-only URI of ``path`` (for Python's ``sqlite3`` and TF's ``SqlDataset``)."""
  return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


@dataclasses.dataclass(frozen=True)
class Rows:
  """Where a client's examples are: the rowids ``first … first + count − 1``, or, when
  ``rowids`` is given, exactly those (sorted)."""

  first: int
  count: int
  rowids: Optional[np.ndarray] = None

  def where(self) -> str:
    """The SQL condition selecting these rows."""
    if self.rowids is None:
      return f"rowid BETWEEN {self.first} AND {self.first + self.count - 1}"
    return f"rowid IN ({','.join(str(int(r)) for r in self.rowids)})"

  def query(self, limit: Optional[int] = None) -> str:
    """The examples' serialized protos, in rowid order (TFF's order), at most ``limit``."""
    tail = f" LIMIT {int(limit)}" if limit is not None else ""
    return f"SELECT serialized_example_proto FROM examples WHERE {self.where()} ORDER BY rowid{tail}"


def _as_rows(rowids: np.ndarray) -> Rows:
  """`Rows` of sorted rowids: a range when they are consecutive."""
  if rowids.size == 0:
    return Rows(1, 0)
  if int(rowids[-1]) - int(rowids[0]) + 1 == rowids.size:
    return Rows(int(rowids[0]), int(rowids.size))
  return Rows(int(rowids[0]), int(rowids.size), rowids)


class SqlFile:
  """One file in TFF's format, read-only; see the module docstring.

  Attributes:
    path: the file.
    uri: its read-only URI.
    scans: full scans of the ``examples`` table this object made (the rowid map, pooled splits).
    checked: clients whose predicted range was checked, as ``(split, client_id)``.
  """

  def __init__(self, path: str):
    self.path = path
    self.uri = read_only_uri(path)
    self.scans = 0
    self.checked: set[tuple[str, str]] = set()
    self._lock = threading.Lock()
    self._con: Optional[sqlite3.Connection] = None
    self._map: Optional[tuple[np.ndarray, np.ndarray]] = None  # rowids by metadata row, bounds
    self._index: dict[str, dict[str, int]] = {}  # split -> client id -> its metadata row
    self._first = self._count = np.zeros([0], np.int64)  # predicted rowids, by metadata row
    with self._lock:
      self._check_format()
      self._predictable = self._read_metadata()

  def connect(self) -> sqlite3.Connection:
    """A new read-only connection to the file."""
    return sqlite3.connect(self.uri, uri=True, check_same_thread=False)

  def _connection(self) -> sqlite3.Connection:
    if self._con is None:
      self._con = self.connect()
    return self._con

  def close(self) -> None:
    with self._lock:
      if self._con is not None:
        self._con.close()
        self._con = None

  def _check_format(self) -> None:
    con = self._connection()
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in zip(TABLES, (EXAMPLE_COLUMNS, METADATA_COLUMNS)):
      if table not in tables:
        raise ValueError(f"{self.path} is not in TFF's federated data format: it has no table "
                         f"{table!r} (tables: {', '.join(sorted(tables)) or 'none'}).")
      have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
      missing = [c for c in columns if c not in have]
      if missing:
        raise ValueError(f"{self.path} is not in TFF's federated data format: table {table!r} "
                         f"lacks the column(s) {', '.join(missing)}.")

  def _read_metadata(self) -> bool:
    """Reads ``client_metadata``; whether it can predict the examples' rowids."""
    con = self._connection()
    meta = con.execute(
        "SELECT client_id, split_name, num_examples FROM client_metadata ORDER BY rowid").fetchall()
    predictable = True
    for i, (cid, split, _) in enumerate(meta):
      clients = self._index.setdefault(split, {})
      if cid in clients:  # listed twice: the metadata does not describe the layout
        predictable = False
      clients[cid] = i
    self._count = np.fromiter((max(int(n or 0), 0) for _, _, n in meta), np.int64, len(meta))
    self._first = np.cumsum(self._count) - self._count + 1
    predictable &= all(int(n or 0) >= 0 for _, _, n in meta)
    largest = con.execute("SELECT max(rowid) FROM examples").fetchone()[0] or 0
    return predictable and largest == int(self._count.sum())

  def splits(self) -> list[str]:
    """The splits ``client_metadata`` names."""
    return sorted(self._index)

  def client_ids(self, split: str) -> list[str]:
    """The split's client ids, sorted (as TFF's ``SqlClientData.client_ids``)."""
    return sorted(self._index.get(split, ()))

  def num_examples(self, split: str, client_id: str) -> int:
    """The client's examples in the split, from its rows (once known) or the metadata."""
    return self.rows(split, client_id).count

  def rows(self, split: str, client_id: str) -> Rows:
    """Where the client's examples of ``split`` are (checked once; see the module docstring)."""
    key = (split, client_id)
    i = self._index.get(split, {}).get(client_id)
    if i is None:
      raise KeyError(f"{client_id!r} is not a client of split {split!r} in {self.path}")
    with self._lock:
      if self._map is None and self._predictable and key not in self.checked:
        if self._range_holds(key, Rows(int(self._first[i]), int(self._count[i]))):
          self.checked.add(key)
        else:
          self._predictable = False
      if self._map is None and not self._predictable:
        self._build_map()
      if self._map is not None:
        rowids, bounds = self._map
        return _as_rows(rowids[bounds[i]:bounds[i + 1]])
      return Rows(int(self._first[i]), int(self._count[i]))

  def _range_holds(self, key: tuple[str, str], rows: Rows) -> bool:
    if rows.count == 0:
      return True
    found = self._connection().execute(
        f"SELECT count(*) FROM examples WHERE {rows.where()} AND split_name = ? AND client_id = ?",
        key).fetchone()[0]
    return found == rows.count

  def _build_map(self) -> None:
    """Every known client's rowids, from one scan of ``examples`` (rows of other clients are
    not TFF's clients and are left out)."""
    codes, rowids = [], []
    cursor = self._connection().execute("SELECT rowid, split_name, client_id FROM examples")
    self.scans += 1
    index, missing = self._index, {}
    while True:
      chunk = cursor.fetchmany(_FETCH)
      if not chunk:
        break
      codes.append(np.fromiter((index.get(s, missing).get(c, -1) for _, s, c in chunk), np.int64,
                               len(chunk)))
      rowids.append(np.fromiter((r for r, _, _ in chunk), np.int64, len(chunk)))
    codes_all = np.concatenate(codes) if codes else np.zeros([0], np.int64)
    rowids_all = np.concatenate(rowids) if rowids else np.zeros([0], np.int64)
    keep = codes_all >= 0
    codes_all, rowids_all = codes_all[keep], rowids_all[keep]
    order = np.lexsort((rowids_all, codes_all))
    self._map = (rowids_all[order], np.searchsorted(codes_all[order], np.arange(len(self._count) + 1)))

  @property
  def uses_map(self) -> bool:
    """Whether clients are read through the rowid map (the file was not written client by client)."""
    return self._map is not None

  def read(self, split: str, client_id: str, limit: Optional[int] = None) -> list[bytes]:
    """The client's serialized examples (at most ``limit``), in TFF's order, read in Python."""
    rows = self.rows(split, client_id)
    if rows.count == 0:
      return []
    with contextlib.closing(self.connect()) as con:
      return [r[0] for r in con.execute(rows.query(limit))]

  def read_split(self, split: str, client_ids: Optional[Sequence[str]] = None) -> dict[str, list[bytes]]:
    """Every client's serialized examples of ``split`` (or of ``client_ids``), each in TFF's
    order, from ONE query (a single scan of the table)."""
    wanted = set(self.client_ids(split) if client_ids is None else client_ids)
    out: dict[str, list[bytes]] = {cid: [] for cid in wanted}
    with contextlib.closing(self.connect()) as con:
      cursor = con.execute("SELECT client_id, serialized_example_proto FROM examples "
                           "WHERE split_name = ? ORDER BY rowid", (split,))
      with self._lock:
        self.scans += 1
      while True:
        chunk = cursor.fetchmany(_FETCH)
        if not chunk:
          break
        for cid, proto in chunk:
          if cid in wanted:
            out[cid].append(proto)
    return out


class SqlClients(tff.simulation.datasets.ClientData):
  """The clients of one split of a `SqlFile`, with TFF's parsing ``parse`` applied.

  ``create_tf_dataset_for_client`` reads only that client's rows; a client id given as a
  string tensor (``serializable_dataset_fn`` traced, as TFF's ``dataset_computation`` does)
  falls back to TFF's own per-client query, which scans the table.
  """

  def __init__(self, source: SqlFile, split: str, parse: ParseFn,
               client_ids: Optional[Sequence[str]] = None):
    self._source, self._split, self._parse = source, split, parse
    ids = source.client_ids(split) if client_ids is None else sorted(client_ids)
    if not ids:
      raise ValueError(f"{source.path} has no clients in split {split!r} (splits: "
                       f"{', '.join(source.splits()) or 'none'}).")
    self._ids = ids
    self._known = frozenset(ids)
    raw = tf.data.experimental.SqlDataset("sqlite", source.uri, "SELECT ''", tf.string)
    self._element_spec = parse(raw).element_spec  # builds a graph, reads nothing

  @property
  def source(self) -> SqlFile:
    return self._source

  @property
  def split(self) -> str:
    return self._split

  @property
  def client_ids(self) -> list[str]:
    return self._ids

  @property
  def element_type_structure(self):
    return self._element_spec

  @property
  def serializable_dataset_fn(self):
    return self._dataset

  def num_examples(self, client_id: str) -> int:
    return self._source.num_examples(self._split, client_id)

  def _dataset(self, client_id) -> tf.data.Dataset:
    if not isinstance(client_id, str):  # a traced id: TFF's own query (a scan per client)
      query = tf.strings.join([
          "SELECT serialized_example_proto FROM examples WHERE client_id = '", client_id,
          f"' and split_name ='{self._split}'"])
      return self._parse(tf.data.experimental.SqlDataset("sqlite", self._source.uri, query, tf.string))
    rows = self._source.rows(self._split, client_id)
    raw = tf.data.experimental.SqlDataset("sqlite", self._source.uri, rows.query(), tf.string)
    return self._parse(raw.apply(tf.data.experimental.assert_cardinality(rows.count)))

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    if client_id not in self._known:
      raise ValueError(f"ID [{client_id}] is not a client in this ClientData. See property "
                       "`client_ids` for the list of valid ids.")
    return self._dataset(client_id)

  def subset(self, client_ids: Sequence[str]) -> "SqlClients":
    """The same split restricted to ``client_ids``."""
    unknown = [c for c in client_ids if c not in self._known]
    if unknown:
      raise ValueError(f"not clients of split {self._split!r}: {unknown[:5]}")
    return SqlClients(self._source, self._split, self._parse, client_ids)

  def pooled(self, seed: Optional[int] = None) -> tf.data.Dataset:
    """TFF's ``create_tf_dataset_from_all_clients(seed)``: every client's examples, clients in
    the order ``np.random.RandomState(seed)`` shuffles the sorted ids to, read with one query
    each time the dataset is iterated (cache it to read once)."""
    order = list(self._ids)
    np.random.RandomState(seed=seed).shuffle(order)
    source, split = self._source, self._split

    def chunks() -> Iterator[np.ndarray]:
      by_client = source.read_split(split, order)
      for cid in order:
        protos = by_client.pop(cid)
        if protos:
          yield np.array(protos, dtype=object)

    return self._parse(_chunked(chunks))

  def create_tf_dataset_from_all_clients(self, seed=None) -> tf.data.Dataset:
    return self.pooled(seed)

  def heads(self, client_ids: Sequence[str], per_client: int) -> tf.data.Dataset:
    """The first ``per_client`` examples of each of ``client_ids``, in that order, each client
    read by its rows (TFF's ``serializable_dataset_fn(cid).take(per_client)`` flattened)."""
    unknown = [c for c in client_ids if c not in self._known]
    if unknown:
      raise ValueError(f"not clients of split {self._split!r}: {unknown[:5]}")
    ids, source, split = list(client_ids), self._source, self._split

    def chunks() -> Iterator[np.ndarray]:
      for cid in ids:
        protos = source.read(split, cid, per_client)
        if protos:
          yield np.array(protos, dtype=object)

    return self._parse(_chunked(chunks))


def _chunked(chunks: Callable[[], Iterator[np.ndarray]]) -> tf.data.Dataset:
  """Serialized protos from a generator of 1-D string arrays, one element per proto."""
  return tf.data.Dataset.from_generator(
      chunks, output_signature=tf.TensorSpec([None], tf.string)).unbatch()
