"""Writers of tiny data files in the exact on-disk formats the real loaders read.

Plain functions, one per format; each returns the path it wrote.
"""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import tensorflow as tf


def _write_tff_sqlite(path: str, rows: list[tuple[str, str, bytes]]) -> None:
  """Writes ``(split_name, client_id, serialized tf.Example)`` rows in TFF's SqlClientData schema.

  The schema is the one ``tff.simulation.datasets.SqlClientData`` checks and
  queries: tables ``examples(split_name, client_id, serialized_example_proto)``
  and ``client_metadata(client_id, split_name, num_examples)``.
  """
  if os.path.exists(path):
    os.remove(path)
  counts: dict[tuple[str, str], int] = {}
  for split, client, _ in rows:
    counts[(split, client)] = counts.get((split, client), 0) + 1
  with sqlite3.connect(path) as con:
    con.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
                "serialized_example_proto BLOB NOT NULL);")
    con.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, "
                "num_examples INTEGER NOT NULL);")
    con.executemany("INSERT INTO examples VALUES (?, ?, ?);", rows)
    con.executemany("INSERT INTO client_metadata VALUES (?, ?, ?);",
                    [(client, split, n) for (split, client), n in counts.items()])
  con.close()


def _emnist_example(pixels: np.ndarray, label: int) -> bytes:
  """A tf.Example with TFF EMNIST's features: 'pixels' (784 floats), 'label' (int64)."""
  return tf.train.Example(features=tf.train.Features(feature={
      "pixels": tf.train.Feature(float_list=tf.train.FloatList(value=pixels.reshape([-1]).tolist())),
      "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
  })).SerializeToString()


def make_emnist_sqlite(directory: str, num_clients: int = 3, examples_per_client: int = 20,
                       seed: int = 0) -> str:
  """Writes ``<directory>/emnist_all.sqlite`` as TFF's federated EMNIST loader expects it.

  Splits ``all_train`` / ``all_test`` (labels 0..61) and ``digits_only_train``
  / ``digits_only_test`` (the digit examples), client ids ``f0000_00``, ...;
  every client has ``examples_per_client`` train and ``examples_per_client // 2
  + 1`` test examples with uniform random pixels in [0, 1].
  """
  rng = np.random.default_rng(seed)
  os.makedirs(directory, exist_ok=True)
  rows = []
  for k in range(num_clients):
    client = f"f{k:04d}_{k % 100:02d}"
    for split, n in (("train", examples_per_client), ("test", examples_per_client // 2 + 1)):
      labels = rng.integers(0, 62, size=n)
      labels[:min(n, 10)] = np.arange(min(n, 10))  # Some digits in every client and split.
      for label in labels:
        proto = _emnist_example(rng.random((28, 28), dtype=np.float32), label)
        rows.append((f"all_{split}", client, proto))
        if label < 10:
          rows.append((f"digits_only_{split}", client, proto))
  path = os.path.join(directory, "emnist_all.sqlite")
  _write_tff_sqlite(path, rows)
  return path
