"""Federated CIFAR-100 (500 clients, TFF's own LDA split), ResNet-18 with group norm (seed 004).

The task of Reddi et al. (seed 004, CIFAR-100): TFF's federated CIFAR-100 read
as TFF's loader ``tff.simulation.datasets.cifar100.load_data`` returns it, from
``<data_dir>/cifar100.sqlite`` (``data_dir`` defaults to TFF's cache ``~/.tff``).
That loader downloads when the file is absent; this module never lets it: it
raises `DataMissingError` first. The clients' split is TFF's (a two-level
Pachinko/LDA allocation of the training images, 100 images per client).

Elements are ``(image[24, 24, 3] float32, label int64)`` made by TFF's
baseline preprocessing (``baselines.cifar100.image_classification_preprocessing
.build_image_map``): training images get a random 24x24 crop and a random
horizontal flip, test images a central 24x24 crop; both are standardised per
image (``tf.image.per_image_standardization``).

The model is TFF's ``simulation.models.resnet_models.create_resnet18`` (ResNet-18
v2 whose batch-norm layers are group-norm layers) on 24x24x3 inputs with 100
classes. TFF's version ends in a softmax; here its last Dense layer is linear so
the model outputs logits. Its last Dense layer carries TFF's L2 weight decay
(1e-4) as ``model.losses``.

``--num_clients`` caps the training clients as for ``emnist_cr``: ``0`` (the
default, ``DEFAULT_NUM_CLIENTS``), or at least 500, keeps all of them; otherwise
a ``--seed``-determined random sample.
The test set is every test client's data pooled (10,000 images).
"""

from __future__ import annotations

import functools

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.cifar100 import image_classification_preprocessing
from tensorflow_federated.python.simulation.models import resnet_models

from tff_robust import tasks
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.base import Task, TaskOptions, sparse_accuracy

NAME = "cifar100"
DATA_SOURCES = ("tff",)
MODELS = ("resnet18",)
PARTITIONS = ("natural",)
DEFAULT_NUM_CLIENTS = 0  # all 500 clients
NUM_CLASSES = 100
CROP_SHAPE = (24, 24, 3)  # TFF's baseline DEFAULT_CROP_HEIGHT / _WIDTH.
SQLITE_NAME = "cifar100.sqlite"  # What TFF's loader decompresses cifar100.sqlite.lzma to.


def sqlite_path(data_dir: str | None) -> str:
  """Where TFF's loader looks for the CIFAR-100 database for cache dir ``data_dir``."""
  return tff_sqlite.sqlite_path(data_dir, SQLITE_NAME)


def create_resnet18() -> tf.keras.Model:
  """TFF's group-norm ResNet-18 for 24x24x3 CIFAR-100 crops, with a logits output."""
  model = resnet_models.create_resnet18(
      input_shape=CROP_SHAPE, num_classes=NUM_CLASSES,
      norm_layer=resnet_models.NormLayer.GROUP_NORM)
  head = model.layers[-1]
  if not isinstance(head, tf.keras.layers.Dense) or head.units != NUM_CLASSES:
    raise RuntimeError(f"unexpected last layer of TFF's ResNet-18: {head!r}")
  head.activation = tf.keras.activations.linear  # softmax -> logits
  return model


def _map_fn(distort: bool):
  """TFF's CIFAR-100 element map: ``{'image', 'label', ...}`` -> ``(crop, label)``."""
  return image_classification_preprocessing.build_image_map(CROP_SHAPE, distort=distort)


def _preprocess(dataset: tf.data.Dataset, distort: bool) -> tf.data.Dataset:
  return dataset.map(_map_fn(distort))


def load_client_data(data_dir: str | None) -> tuple[tff.simulation.datasets.ClientData,
                                                      tff.simulation.datasets.ClientData]:
  """TFF's ``(train, test)`` CIFAR-100 ClientData from an existing file; never downloads."""
  return tff_sqlite.load(sqlite_path(data_dir), "Federated CIFAR-100", "cifar100")


def build_task(options: TaskOptions) -> Task:
  """Builds CIFAR-100 from TFF's on-disk federated CIFAR-100."""
  options = tasks.resolve_options(NAME, options)
  data = tff_sqlite.train_and_pooled_test(
      *load_client_data(options.data_dir), options.num_clients, options.seed,
      functools.partial(_preprocess, distort=True), functools.partial(_preprocess, distort=False))
  return Task(
      name=NAME,
      train=data.train,
      test=data.test,
      model_fn=create_resnet18,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"Federated CIFAR-100 from {sqlite_path(options.data_dir)}: {data.num_train} of "
            f"{data.num_all} train clients, all test clients pooled; 24x24 crops; "
            f"model resnet18 (group norm)."))
