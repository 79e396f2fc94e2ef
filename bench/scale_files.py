"""Files in TFF's on-disk format at the real client counts, for `bench/scale.py`.

Each file has TFF's schema (the tables and column types
``tff.simulation.datasets.save_to_sql_client_data`` creates, no index) and is written as that
writer writes: client by client, a client's examples, then its ``client_metadata`` row. The
examples are random but have the features, shapes and types TFF's loaders parse:

========================  =============================  ========================================
file                      clients (train / test)         examples (train / test)
========================  =============================  ========================================
EMNIST-62                 3,383 writers in both splits   341,873 / 40,832 (the real counts)
Shakespeare               715 roles in both splits       16,068 / 2,356 (the real counts)
CIFAR-100                 500 / 100                      50,000 / 10,000 (100 each, as TFF's)
Stack Overflow            342,477 / 204,088 (+ 38,758    scaled down for disk: 1/50 of the real 
                          heldout users)                 135.8M / 16.6M / 16.5M posts, at least
                                                         one per user
========================  =============================  ========================================

Per-client counts are drawn (log-normal, seeded) and rounded to the totals. ``fraction`` < 1
keeps that share of the clients (the first ones) with their counts: the "half" file of the
linearity check has half the clients and about half the examples. ``shuffled=True`` writes
the examples in a random order instead (a file not written client by client).

    uv run python bench/scale_files.py --task=emnist_cr --out=/work/scale_data/emnist_full
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Iterator

import numpy as np

# What TFF's writer creates (sql_client_data_utils.save_to_sql_client_data).
SCHEMA = (
    "CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
    "serialized_example_proto BLOB NOT NULL);",
    "CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, "
    "num_examples INTEGER NOT NULL);",
)


# --- tf.train.Example, encoded directly (the protobuf wire format; ~50x faster than building
# the message in Python, same bytes modulo the map's entry order, which parsing ignores).

def _varint(n: int) -> bytes:
  n &= (1 << 64) - 1
  out = bytearray()
  while True:
    b = n & 0x7F
    n >>= 7
    if n:
      out.append(b | 0x80)
    else:
      out.append(b)
      return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def float_feature(values: np.ndarray) -> bytes:
  """A ``Feature`` with a packed ``float_list``."""
  return _len_field(2, _len_field(1, np.asarray(values, "<f4").tobytes()))


def int64_feature(values) -> bytes:
  """A ``Feature`` with a packed ``int64_list``."""
  return _len_field(3, _len_field(1, b"".join(_varint(int(v)) for v in values)))


def bytes_feature(value: bytes) -> bytes:
  """A ``Feature`` with a one-element ``bytes_list``."""
  return _len_field(1, _len_field(1, value))


def example(**features: bytes) -> bytes:
  """A serialized ``tf.train.Example`` of encoded features."""
  entries = b"".join(_len_field(1, _len_field(1, k.encode()) + _len_field(2, v))
                     for k, v in features.items())
  return _len_field(1, entries)


def uint8_int64_feature(values: np.ndarray) -> bytes:
  """`int64_feature` of values in 0..255 (CIFAR's pixels), vectorised: one varint byte below
  128, two from 128."""
  v = np.asarray(values, np.uint16).reshape([-1])
  pairs = np.stack([np.where(v < 128, v, (v & 0x7F) | 0x80), v >> 7], axis=1).astype(np.uint8)
  packed = pairs[np.stack([np.ones_like(v, bool), v >= 128], axis=1)].tobytes()
  return _len_field(3, _len_field(1, packed))


# --- per-client counts

def client_counts(num_clients: int, total: int, rng: np.random.Generator, sigma: float = 0.8,
                  minimum: int = 1) -> np.ndarray:
  """``num_clients`` counts ≥ ``minimum`` summing to ``total`` (log-normal shares, largest
  remainders)."""
  if total < minimum * num_clients:
    raise ValueError(f"{total} examples cannot give {num_clients} clients {minimum} each")
  shares = rng.lognormal(0.0, sigma, num_clients)
  spare = total - minimum * num_clients
  quota = spare * shares / shares.sum()
  counts = np.floor(quota).astype(np.int64)
  rest = spare - int(counts.sum())
  counts[np.argsort(quota - counts)[::-1][:rest]] += 1
  return counts + minimum


# --- the four data sets: (split, client ids, counts) and an example maker per split

def _ids(prefix: str, n: int) -> list[str]:
  return [f"{prefix}{i:07d}" for i in range(n)]


def _emnist(rng):
  writers = [f"f{i:04d}_{i % 100:02d}" for i in range(3383)]
  splits = [("all_train", writers, client_counts(3383, 341_873, rng)),
            ("all_test", writers, client_counts(3383, 40_832, rng, minimum=1))]

  def make(split, r):
    return example(label=int64_feature([int(r.integers(62))]),
                   pixels=float_feature(r.random(784, dtype=np.float32)))
  return splits, make


_CHARS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,.;:!?'\n", np.uint8)


def _shakespeare(rng):
  roles = [f"THE_TRAGEDY_{i:03d}_ROLE" for i in range(715)]
  splits = [("train", roles, client_counts(715, 16_068, rng)),
            ("test", roles, client_counts(715, 2_356, rng))]

  def make(split, r):
    n = int(min(2000, r.lognormal(5.3, 0.8)))  # ~270 characters on average
    return example(snippets=bytes_feature(_CHARS[r.integers(len(_CHARS), size=n)].tobytes()))
  return splits, make


def _cifar100(rng):
  splits = [("train", [str(i) for i in range(500)], np.full(500, 100)),
            ("test", [str(i) for i in range(100)], np.full(100, 100))]

  def make(split, r):
    label = int(r.integers(100))
    return example(coarse_label=int64_feature([label // 5]),
                   image=uint8_int64_feature(r.integers(256, size=3072, dtype=np.uint8)),
                   label=int64_feature([label]))
  return splits, make


SO_WORDS = [f"w{i}" for i in range(12_000)]
SO_TAGS = [f"tag{i}" for i in range(600)]
SO_SCALE = 50  # the real posts / the generated posts


def _stackoverflow(rng):
  splits = [("train", _ids("u", 342_477), client_counts(342_477, 135_818_730 // SO_SCALE, rng, 1.2)),
            ("heldout", _ids("h", 38_758), client_counts(38_758, 16_491_230 // SO_SCALE, rng, 1.2)),
            ("test", _ids("t", 204_088), client_counts(204_088, 16_586_035 // SO_SCALE, rng, 1.2))]
  words = np.array(SO_WORDS, dtype=object)
  cdf = np.cumsum(1.0 / np.arange(1, len(SO_WORDS) + 1))  # Zipf-like word frequencies
  cdf /= cdf[-1]

  def make(split, r):
    picks = np.minimum(np.searchsorted(cdf, r.random(int(r.integers(5, 40)))), len(words) - 1)
    tokens = " ".join(words[picks])
    tags = "|".join(SO_TAGS[i] for i in r.choice(len(SO_TAGS), size=int(r.integers(1, 4)),
                                                    replace=False))
    return example(creation_date=bytes_feature(b"2010-01-01 00:00:00.000 UTC"),
                   score=int64_feature([int(r.integers(-2, 20))]), tags=bytes_feature(tags.encode()),
                   title=bytes_feature(b" ".join(w.encode() for w in words[r.integers(50, size=6)])),
                   tokens=bytes_feature(tokens.encode()), type=bytes_feature(b"question"))
  return splits, make


# task -> (file name, builder)
DATASETS: dict[str, tuple[str, Callable]] = {
    "emnist_cr": ("emnist_all.sqlite", _emnist),
    "shakespeare": ("shakespeare.sqlite", _shakespeare),
    "cifar100": ("cifar100.sqlite", _cifar100),
    "stackoverflow_nwp": ("stackoverflow.sqlite", _stackoverflow),
}


def _groups(task: str, fraction: float, seed: int):
  splits, make = DATASETS[task][1](np.random.default_rng([seed, 1]))
  out = []
  for split, ids, counts in splits:
    keep = max(1, int(round(len(ids) * fraction)))
    out.extend((split, cid, int(n)) for cid, n in zip(ids[:keep], counts[:keep]))
  return out, make


def _rows(groups, make, seed: int) -> Iterator[tuple[str, str, bytes]]:
  r = np.random.default_rng([seed, 2])
  for split, cid, n in groups:
    for _ in range(n):
      yield split, cid, make(split, r)


def write(task: str, directory: str, fraction: float = 1.0, shuffled: bool = False,
          seed: int = 0) -> str:
  """Writes ``<directory>/<TFF's file name>`` for ``task`` (see the module docstring); returns
  its path. Written to a temporary name and renamed, so a file that exists is complete."""
  name = DATASETS[task][0]
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, name)
  tmp = path + ".partial"
  if os.path.exists(tmp):
    os.remove(tmp)
  groups, make = _groups(task, fraction, seed)
  with sqlite3.connect(tmp) as con:
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    for statement in SCHEMA:
      con.execute(statement)
    rows = _rows(groups, make, seed)
    if shuffled:  # every example at a random position: the metadata predicts nothing
      everything = list(rows)
      order = np.random.default_rng([seed, 3]).permutation(len(everything))
      con.executemany("INSERT INTO examples VALUES (?, ?, ?)", (everything[i] for i in order))
      con.executemany("INSERT INTO client_metadata VALUES (?, ?, ?)",
                      [(cid, split, n) for split, cid, n in groups])
    else:  # TFF's writer: a client's examples, then its metadata row
      for split, cid, n in groups:
        con.executemany("INSERT INTO examples VALUES (?, ?, ?)",
                        (next(rows) for _ in range(n)))
        con.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (cid, split, n))
  con.close()
  os.replace(tmp, path)
  if task.startswith("stackoverflow"):
    write_stackoverflow_counts(directory)
  return path


def write_stackoverflow_counts(directory: str) -> None:
  """The word and tag count files Stack Overflow's tasks read (`tasks.stackoverflow`)."""
  with open(os.path.join(directory, "stackoverflow.word_count"), "w") as f:
    for i, word in enumerate(SO_WORDS):
      f.write(f"{word} {len(SO_WORDS) - i}\n")
  with open(os.path.join(directory, "stackoverflow.tag_count"), "w") as f:
    json.dump({tag: len(SO_TAGS) - i for i, tag in enumerate(SO_TAGS)}, f)


def ensure(task: str, directory: str, fraction: float = 1.0, shuffled: bool = False) -> tuple[str, float]:
  """`write` unless the file exists; (path, seconds spent writing)."""
  path = os.path.join(directory, DATASETS[task][0])
  if os.path.exists(path):
    return path, 0.0
  t0 = time.perf_counter()
  write(task, directory, fraction, shuffled)
  return path, time.perf_counter() - t0


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", choices=sorted(DATASETS), required=True)
  parser.add_argument("--out", required=True, help="directory of the file")
  parser.add_argument("--fraction", type=float, default=1.0, help="share of the clients kept")
  parser.add_argument("--shuffled", action="store_true", help="examples in a random order")
  args = parser.parse_args()
  t0 = time.perf_counter()
  path = write(args.task, args.out, args.fraction, args.shuffled)
  print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
  main()
