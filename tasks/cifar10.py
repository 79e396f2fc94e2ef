"""CIFAR-10 split among simulated clients (seed 000, Sec. 5).

Data source ``tfds``: CIFAR-10 (50,000 train / 10,000 test 32x32x3 images) from
TensorFlow Datasets, read from ``data_dir`` (default ``~/tensorflow_datasets``)
and never downloaded. The training images are partitioned among
``--num_clients`` clients (default 10, as in seed 000): ``one_class`` (default;
seed 000's non-iid split, one class per client), ``iid``, ``dirichlet`` or ``k_class``.

Model ``cnn``: seed 000's CIFAR-10 network, two 5x5 'same' conv layers with 32
and 64 maps (relu), each followed by 2x2 max pooling, then Dense 1024 relu and
Dense 10 logits (4,259,274 parameters). Pixels are scaled to [0, 1].
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tff_robust import tasks
from tff_robust.tasks import partition as partition_lib
from tff_robust.tasks.base import DataMissingError, Task, TaskOptions, sparse_accuracy

NAME = "cifar10"
# --validation_fraction holds out a share of each client's images (partition.hold_out).
HOLDS_OUT_VALIDATION = True
DATA_SOURCES = ("tfds",)
MODELS = ("cnn",)
PARTITIONS = ("one_class", "iid", "dirichlet", "k_class")
DEFAULT_NUM_CLIENTS = 10  # seed 000
NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
NUM_TRAIN = 50000
_TFDS_DEFAULT_DIR = os.path.join("~", "tensorflow_datasets")


def create_cnn() -> tf.keras.Sequential:
  """Seed 000's CIFAR-10 CNN on 32x32x3 inputs, 10 logits."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=IMAGE_SHAPE),
      tf.keras.layers.Conv2D(32, 5, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Conv2D(64, 5, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(1024, activation="relu"),
      tf.keras.layers.Dense(NUM_CLASSES),
  ], name="cifar10_cnn")


def _scale(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """uint8 image -> float32 [32, 32, 3] in [0, 1]."""
  return tf.cast(x, tf.float32) / 255.0, y


def load_tfds(data_dir: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """CIFAR-10 from TFDS in ``data_dir`` (never downloads): ``(x_train, y_train, x_test, y_test)``.

  x is uint8 ``[n, 32, 32, 3]``, y int32.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  where = data_dir or _TFDS_DEFAULT_DIR
  try:
    splits = tfds.load("cifar10", split=["train", "test"], data_dir=data_dir, download=False,
                       as_supervised=True)
  except AssertionError as e:  # TFDS signals absent data with an AssertionError.
    raise DataMissingError(
        f"CIFAR-10 is not prepared under {os.path.join(where, 'cifar10')}. On a machine with network "
        f"run `tfds.builder('cifar10', data_dir={where!r}).download_and_prepare()` and copy the "
        f"directory here, or pass --data_dir pointing at a TFDS data directory that holds cifar10/.") from e
  arrays = []
  for ds in splits:
    x, y = ds.batch(1 << 20).get_single_element()
    arrays += [x.numpy().astype(np.uint8).reshape((-1,) + IMAGE_SHAPE), y.numpy().astype(np.int32)]
  return tuple(arrays)


def validate_options(options: TaskOptions) -> None:
  """Checks resolved options that need no data."""
  partition_lib.check_num_clients(NAME, options.num_clients, options.partition, NUM_TRAIN, NUM_CLASSES,
                                  classes_per_client=options.classes_per_client)


def build_task(options: TaskOptions) -> Task:
  """Builds CIFAR-10: partitioned train images, pooled test images, seed 000's CNN."""
  options = tasks.resolve_options(NAME, options)
  x_train, y_train, x_test, y_test = load_tfds(options.data_dir)
  train, validation, partition_desc = partition_lib.partitioned_client_data(
      x_train, y_train, options.num_clients, options.partition, alpha=options.dirichlet_alpha,
      seed=options.seed, classes_per_client=options.classes_per_client, preprocess=_scale,
      validation_fraction=options.validation_fraction)
  test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(_scale)
  return Task(
      name=NAME,
      train=train,
      test=test,
      validation=validation,
      model_fn=create_cnn,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"CIFAR-10 via tfds: {y_train.size} train images {partition_desc} over "
            f"{options.num_clients} clients (seed {options.seed}), {y_test.size} test; model cnn."))
