"""Federated Stack Overflow on disk: TFF's database and its word / tag count files.

Shared by ``stackoverflow_nwp`` and ``stackoverflow_lr`` (seed 004). Nothing
here downloads: TFF's loaders would, so every file is checked first and a
`DataMissingError` names it.

Files, for ``--data_dir=D`` (``D`` defaults to TFF's cache ``~/.tff``):

* ``D/stackoverflow.sqlite``: what ``tff.simulation.datasets.stackoverflow
  .load_data(cache_dir=D)`` decompresses; read by that loader (splits
  ``train``, ``heldout``, ``test``; one client per user).
* ``stackoverflow.word_count``: one ``word count`` pair per line, most frequent
  first (read like ``stackoverflow.load_word_counts``).
* ``stackoverflow.tag_count``: a JSON object ``{tag: count}`` (read like
  ``stackoverflow.load_tag_counts``: sorted by decreasing count).

TFF's count loaders fetch ``stackoverflow.{word,tag}_count.tar.bz2`` with
``tf.keras.utils.get_file(cache_dir=D)``, i.e. into ``D/datasets/`` (Keras'
``~/.keras/datasets/`` when ``D`` is not given), and extract them there. The
count files are looked up in ``D/`` and ``D/datasets/`` (and, without
``--data_dir``, in ``~/.keras/datasets/``); an archive found there is extracted
next to itself.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import tarfile
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.tasks import sql_reader, tff_sqlite
from tff_robust.tasks.base import DataMissingError
from tff_robust.tasks.tff_sqlite import cache_dir

SQLITE_NAME = "stackoverflow.sqlite"  # What TFF's loader decompresses stackoverflow.sqlite.lzma to.
WORD_COUNT_NAME = "stackoverflow.word_count"
TAG_COUNT_NAME = "stackoverflow.tag_count"
# Evaluation sets: up to EVAL_EXAMPLES_PER_CLIENT examples from each of up to
# EVAL_CLIENTS seeded-sampled clients (<= 10,000 examples) of a split.
EVAL_CLIENTS = 1000
EVAL_EXAMPLES_PER_CLIENT = 10


def sqlite_path(data_dir: str | None) -> str:
  """Where TFF's loader looks for the Stack Overflow database."""
  return tff_sqlite.sqlite_path(data_dir, SQLITE_NAME)


def _count_file_dirs(data_dir: str | None) -> list[str]:
  base = cache_dir(data_dir)
  dirs = [base, os.path.join(base, "datasets")]
  if not data_dir:
    dirs.append(os.path.join(os.path.expanduser("~"), ".keras", "datasets"))
  return dirs


def count_file_path(data_dir: str | None, name: str) -> str:
  """Path of the extracted count file ``name``; extracts ``name.tar.bz2`` if only that is present."""
  dirs = _count_file_dirs(data_dir)
  for d in dirs:
    if os.path.isfile(os.path.join(d, name)):
      return os.path.join(d, name)
  for d in dirs:
    archive = os.path.join(d, name + ".tar.bz2")
    if os.path.isfile(archive):
      with tarfile.open(archive, "r:bz2") as tar:
        member = tar.getmember(name)
        tar.extract(member, d, filter="data")
      return os.path.join(d, name)
  loader = "load_word_counts" if name == WORD_COUNT_NAME else "load_tag_counts"
  raise DataMissingError(
      f"Stack Overflow's {name} is not on disk: expected {os.path.join(dirs[0], name)} (also looked "
      f"in {', '.join(dirs[1:])}, and for {name}.tar.bz2). On a machine with network run "
      f"`tff.simulation.datasets.stackoverflow.{loader}(cache_dir={dirs[0]!r})` once (it downloads "
      f"and extracts {name} into {os.path.join(dirs[0], 'datasets')}) and copy the file here, or pass "
      f"--data_dir pointing at the directory that holds it.")


def load_word_vocab(data_dir: str | None, vocab_size: int) -> list[str]:
  """The ``vocab_size`` most frequent words (the first lines of the word count file)."""
  if vocab_size < 1:
    raise ValueError(f"vocab_size must be >= 1, got {vocab_size}.")
  words = []
  with open(count_file_path(data_dir, WORD_COUNT_NAME)) as f:
    for line in f:
      word, _ = line.split()
      words.append(word)
      if len(words) >= vocab_size:
        break
  return words


def load_tag_vocab(data_dir: str | None, vocab_size: int) -> list[str]:
  """The ``vocab_size`` most frequent tags (stable sort by decreasing count, as TFF)."""
  if vocab_size < 1:
    raise ValueError(f"vocab_size must be >= 1, got {vocab_size}.")
  with open(count_file_path(data_dir, TAG_COUNT_NAME)) as f:
    counts = json.load(f)
  ordered = collections.OrderedDict(sorted(counts.items(), key=lambda item: item[1], reverse=True))
  return list(ordered)[:vocab_size]


def load_client_data(data_dir: str | None) -> tuple[tff.simulation.datasets.ClientData, ...]:
  """TFF's ``(train, heldout, test)`` Stack Overflow ClientData from an existing file; never downloads."""
  return tff_sqlite.load(sqlite_path(data_dir), "Federated Stack Overflow", "stackoverflow")


def eval_sample(client_data: tff.simulation.datasets.ClientData, seed: int,
                num_clients: int = EVAL_CLIENTS,
                examples_per_client: int = EVAL_EXAMPLES_PER_CLIENT) -> tf.data.Dataset:
  """Raw examples from a seeded sample of clients: the first ``examples_per_client`` of each.

  The full test split (16.6M examples) is too large to evaluate on every
  round; this draws up to ``num_clients * examples_per_client`` from many users.
  """
  ids = list(client_data.client_ids)
  rng = np.random.default_rng(seed)
  pick = sorted(rng.choice(len(ids), size=min(num_clients, len(ids)), replace=False))
  if isinstance(client_data, sql_reader.SqlClients):  # each chosen user's first rows only
    return client_data.heads([ids[i] for i in pick], examples_per_client)
  chosen = tf.data.Dataset.from_tensor_slices(np.array([ids[i] for i in pick]))
  make = client_data.serializable_dataset_fn
  return chosen.flat_map(lambda cid: make(cid).take(examples_per_client))


@dataclasses.dataclass(frozen=True)
class Splits:
  """Preprocessed Stack Overflow data of a task.

  Attributes:
    train: the ``train`` split's users, capped by ``--num_clients``.
    test: `eval_sample` of the ``test`` split.
    validation: `eval_sample` of the ``heldout`` split.
    info: which file and how many users of each split, for `Task.info`.
  """

  train: tff.simulation.datasets.ClientData
  test: tf.data.Dataset
  validation: tf.data.Dataset
  info: str


def load_splits(data_dir: str | None, num_clients: int, seed: int,
                preprocess: Callable[[tf.data.Dataset], tf.data.Dataset]) -> Splits:
  """Train users (`tff_sqlite.select_client_data`), test and validation samples, all preprocessed."""
  raw_train, raw_heldout, raw_test = load_client_data(data_dir)
  num_all = len(raw_train.client_ids)
  raw_train = tff_sqlite.select_client_data(raw_train, num_clients, seed)
  return Splits(
      train=raw_train.preprocess(preprocess),
      test=preprocess(eval_sample(raw_test, seed)),
      validation=preprocess(eval_sample(raw_heldout, seed)),
      info=(f"{sqlite_path(data_dir)}: {len(raw_train.client_ids)} of {num_all} users for training; "
            f"test/validation: <= {EVAL_EXAMPLES_PER_CLIENT} posts from each of <= {EVAL_CLIENTS} "
            f"test/heldout users"))
