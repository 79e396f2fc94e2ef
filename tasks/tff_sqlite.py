"""TFF's on-disk federated data sets: ``<cache_dir>/<name>.sqlite`` as TFF's loaders read it.

TFF's ``tff.simulation.datasets.<data set>.load_data(cache_dir=D)`` downloads
``<name>.sqlite.lzma`` into ``D`` and decompresses it when ``D/<name>.sqlite``
is absent, then reads the file client by client (a scan of it per client).
Here `load` checks the file first and raises `DataMissingError` naming the file
and how to get it; it never downloads. ``D`` is ``--data_dir``, or TFF's default
cache ``~/.tff``. The file is read by `sql_reader` (read-only, by rowid: a
client costs its own examples, a pooled split one scan) into ClientData equal
to what TFF's loader returns, split for split and element for element
(`SPLITS`, `PARSERS`).

Also shared by the tasks on these data sets: the seeded choice of training
clients behind ``--num_clients`` (`select_clients`, `select_client_data`), the
split into those clients and every test client's data pooled
(`train_and_pooled_test`), and TFF's baseline preprocessing run without its
batching (`unbatched_baseline`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.python.simulation.datasets import cifar100 as tff_cifar100
from tensorflow_federated.python.simulation.datasets import emnist as tff_emnist
from tensorflow_federated.python.simulation.datasets import shakespeare as tff_shakespeare
from tensorflow_federated.python.simulation.datasets import stackoverflow as tff_stackoverflow

from tff_robust.tasks import sql_reader
from tff_robust.tasks.base import DataMissingError

# The splits TFF's ``<data set>.load_data(**kwargs)`` returns, in its order, and TFF's parsing of
# the serialized examples (the loaders' own, private, functions).
SPLITS: dict[str, Callable[[dict], tuple[str, ...]]] = {
    "emnist": lambda kw: (("digits_only_train", "digits_only_test") if kw.get("only_digits", True)
                          else ("all_train", "all_test")),
    "shakespeare": lambda kw: ("train", "test"),
    "cifar100": lambda kw: ("train", "test"),
    "stackoverflow": lambda kw: ("train", "heldout", "test"),
}
PARSERS: dict[str, sql_reader.ParseFn] = {
    "emnist": tff_emnist._add_proto_parsing,  # pylint: disable=protected-access
    "shakespeare": tff_shakespeare._add_parsing,  # pylint: disable=protected-access
    "cifar100": tff_cifar100._add_proto_parsing,  # pylint: disable=protected-access
    "stackoverflow": tff_stackoverflow._add_proto_parsing,  # pylint: disable=protected-access
}


def cache_dir(data_dir: str | None) -> str:
  """The directory TFF's loaders use as ``cache_dir`` for ``data_dir`` (default ``~/.tff``)."""
  return data_dir if data_dir else os.path.join(os.path.expanduser("~"), ".tff")


def sqlite_path(data_dir: str | None, sqlite_name: str) -> str:
  """Where TFF's loader looks for the database ``sqlite_name`` for cache dir ``data_dir``."""
  return os.path.join(cache_dir(data_dir), sqlite_name)


def _loader_call(dataset: str, directory: str, loader_kwargs: dict) -> str:
  """The Python call that makes TFF fetch ``dataset`` into ``directory``."""
  args = "".join(f"{k}={v!r}, " for k, v in loader_kwargs.items())
  return f"tff.simulation.datasets.{dataset}.load_data({args}cache_dir={directory!r})"


def require_file(path: str, what: str, dataset: str, **loader_kwargs) -> None:
  """Raises `DataMissingError` unless the database ``path`` exists.

  Args:
    path: the ``.sqlite`` file TFF's loader reads.
    what: the data set's name in the message, e.g. ``"Federated EMNIST"``.
    dataset: TFF's loader module, ``tff.simulation.datasets.<dataset>``.
    **loader_kwargs: the loader's arguments other than ``cache_dir``, quoted in
      the message (e.g. ``only_digits=False``).
  """
  if os.path.isfile(path):
    return
  directory, name = os.path.dirname(path), os.path.basename(path)
  raise DataMissingError(
      f"{what} is not on disk: expected the file {path}. On a machine with network run "
      f"`{_loader_call(dataset, directory, loader_kwargs)}` once (it downloads and decompresses "
      f"{name}.lzma there) and copy {name} to {directory}, or pass --data_dir pointing at the "
      f"directory that holds it.")


def load(path: str, what: str, dataset: str, **loader_kwargs) -> tuple[sql_reader.SqlClients, ...]:
  """The ClientData splits ``tff.simulation.datasets.<dataset>.load_data`` returns, read from
  the existing file ``path`` by `sql_reader` (start-up reads ``client_metadata`` only); never
  downloads.

  Arguments as for `require_file`.
  """
  require_file(path, what, dataset, **loader_kwargs)
  source = sql_reader.SqlFile(path)
  return tuple(sql_reader.SqlClients(source, split, PARSERS[dataset])
               for split in SPLITS[dataset](loader_kwargs))


def select_clients(client_ids: list[str], num_clients: int, seed: int) -> list[str]:
  """All ids if ``num_clients`` is 0 or >= their number, else a seeded sample (sorted)."""
  if num_clients == 0 or num_clients >= len(client_ids):
    return list(client_ids)
  rng = np.random.default_rng(seed)
  pick = rng.choice(len(client_ids), size=num_clients, replace=False)
  return sorted(client_ids[i] for i in pick)


def select_client_data(client_data: tff.simulation.datasets.ClientData, num_clients: int,
                       seed: int) -> tff.simulation.datasets.ClientData:
  """``client_data`` restricted to `select_clients` of its ids (itself when all are kept)."""
  ids = select_clients(list(client_data.client_ids), num_clients, seed)
  if len(ids) == len(client_data.client_ids):
    return client_data
  if isinstance(client_data, sql_reader.SqlClients):
    return client_data.subset(ids)
  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      ids, client_data.serializable_dataset_fn)


@dataclasses.dataclass(frozen=True)
class TrainTest:
  """Federated training clients and a centralised test set.

  Attributes:
    train: the selected training clients, preprocessed.
    test: every test client's data pooled, preprocessed.
    num_train: number of selected training clients.
    num_all: number of training clients in the file.
    num_test: number of test clients pooled.
  """

  train: tff.simulation.datasets.ClientData
  test: tf.data.Dataset
  num_train: int
  num_all: int
  num_test: int


def train_and_pooled_test(
    raw_train: tff.simulation.datasets.ClientData, raw_test: tff.simulation.datasets.ClientData,
    num_clients: int, seed: int, preprocess: Callable[[tf.data.Dataset], tf.data.Dataset],
    test_preprocess: Optional[Callable[[tf.data.Dataset], tf.data.Dataset]] = None) -> TrainTest:
  """`select_client_data` of ``raw_train`` and all of ``raw_test`` pooled (order fixed by ``seed``).

  ``preprocess`` maps each training client's dataset and, unless
  ``test_preprocess`` is given, the pooled test dataset too.
  """
  selected = select_client_data(raw_train, num_clients, seed)
  train = selected.preprocess(preprocess)
  test = (test_preprocess or preprocess)(raw_test.create_tf_dataset_from_all_clients(seed=seed))
  return TrainTest(train=train, test=test, num_train=len(selected.client_ids),
                   num_all=len(raw_train.client_ids), num_test=len(raw_test.client_ids))


def unbatched_baseline(create_preprocess_fn: Callable, *args,
                       **kwargs) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
  """TFF's baseline ``create_preprocess_fn(spec, *args, **kwargs)`` for one pass, unbatched.

  ``spec`` is one epoch, batch size 1, no shuffling; batching and shuffling
  happen in the client computation instead.
  """
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=1, shuffle_buffer_size=1)
  batch_fn = create_preprocess_fn(spec, *args, **kwargs)

  def preprocess(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return batch_fn(dataset).unbatch()

  return preprocess
