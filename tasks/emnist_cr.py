"""Federated EMNIST character recognition (62 classes, one client per writer).

The task of Reddi et al. (seed 004, EMNIST CR): TFF's federated EMNIST, the
ClientData of ``tff.simulation.datasets.emnist.load_data(only_digits=False)``,
read from ``<data_dir>/emnist_all.sqlite`` (``data_dir`` defaults to TFF's cache
``~/.tff``) by `tff_sqlite.load` (by rowid: a client costs its own examples).
TFF's loader downloads when the file is absent; this module raises
`DataMissingError` first.

Elements are ``(pixels[28, 28, 1] float32, label int32)`` as in TFF's EMNIST
baseline (pixels in [0, 1], 1.0 = background, not inverted).

``--num_clients`` caps the training clients: ``0``, or at least the number of
writers, keeps all of them; otherwise a ``--seed``-determined random sample of
that many writers is used. The default (``DEFAULT_NUM_CLIENTS = 0``) keeps all
3,383 writers. The test set is always
every writer's test split pooled.

The model is Reddi et al.'s EMNIST CR CNN, the architecture of TFF's
``baselines.emnist.emnist_models.create_conv_dropout_model``; TFF's version ends
in a softmax, so it is written here with a logits output.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust import tasks
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.base import Task, TaskOptions, sparse_accuracy
from tff_robust.tasks.tff_sqlite import select_clients  # pylint: disable=unused-import  (public alias)

NAME = "emnist_cr"
DATA_SOURCES = ("tff",)
MODELS = ("cnn",)
PARTITIONS = ("natural",)
NUM_CLASSES = 62
DEFAULT_NUM_CLIENTS = 0  # all writers
SQLITE_NAME = "emnist_all.sqlite"  # What TFF's loader decompresses emnist_all.sqlite.lzma to.


def sqlite_path(data_dir: str | None) -> str:
  """Where TFF's loader looks for the EMNIST database for cache dir ``data_dir``."""
  return tff_sqlite.sqlite_path(data_dir, SQLITE_NAME)


def create_cnn() -> tf.keras.Sequential:
  """Reddi et al.'s EMNIST CR CNN (seed 004) with 62 logits; 1,206,590 parameters."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation="relu"),
      tf.keras.layers.Conv2D(64, 3, activation="relu"),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Dropout(0.25),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation="relu"),
      tf.keras.layers.Dropout(0.5),
      tf.keras.layers.Dense(NUM_CLASSES),
  ], name="emnist_cr_cnn")


def _to_xy(element) -> tuple[tf.Tensor, tf.Tensor]:
  """TFF's parsed ``{'label', 'pixels'}`` -> ``(pixels[28, 28, 1], label)``."""
  return tf.expand_dims(element["pixels"], axis=-1), element["label"]


def _map_to_xy(dataset: tf.data.Dataset) -> tf.data.Dataset:
  return dataset.map(_to_xy)


def load_client_data(data_dir: str | None) -> tuple[tff.simulation.datasets.ClientData,
                                                      tff.simulation.datasets.ClientData]:
  """TFF's 62-class ``(train, test)`` EMNIST ClientData from an existing file; never downloads."""
  return tff_sqlite.load(sqlite_path(data_dir), "Federated EMNIST", "emnist", only_digits=False)


def build_task(options: TaskOptions) -> Task:
  """Builds EMNIST CR from TFF's on-disk federated EMNIST."""
  options = tasks.resolve_options(NAME, options)
  data = tff_sqlite.train_and_pooled_test(*load_client_data(options.data_dir), options.num_clients,
                                          options.seed, _map_to_xy)
  return Task(
      name=NAME,
      train=data.train,
      test=data.test,
      model_fn=create_cnn,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"Federated EMNIST (62 classes) from {sqlite_path(options.data_dir)}: {data.num_train} of "
            f"{data.num_test} writers for training, all writers' test data pooled; model cnn."))
