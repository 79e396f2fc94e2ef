"""Federated EMNIST autoencoder (one client per writer; seed 004, EMNIST AE).

The task of Reddi et al. (seed 004): the MNIST autoencoder of Hinton &
Salakhutdinov (2006) trained on TFF's federated EMNIST (62 classes, all
writers), read from the same ``<data_dir>/emnist_all.sqlite`` as ``emnist_cr``
(see `tasks.emnist_cr.load_client_data`; never downloads).

Preprocessing is TFF's baseline map (``baselines.emnist.emnist_preprocessing``,
autoencoder task): ``x = y = 1 - pixels`` flattened to ``[784]`` float32 (ink =
1). The model is TFF's ``emnist_models.create_autoencoder_model``: Dense layers
784 -> 1000 -> 500 -> 250 -> 30 (linear) -> 250 -> 500 -> 1000 -> 784, sigmoid
elsewhere; it outputs the reconstruction (a prediction, not logits). The loss is
the mean squared error and there is no accuracy (`accuracy_fn` is ``None``):
report the MSE.

``--num_clients`` caps the training clients exactly as for ``emnist_cr``
(default ``DEFAULT_NUM_CLIENTS = 0``: all writers).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models

from tff_robust import tasks
from tff_robust.tasks.base import Task, TaskOptions
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.emnist_cr import load_client_data, sqlite_path

NAME = "emnist_ae"
DATA_SOURCES = ("tff",)
MODELS = ("autoencoder",)
PARTITIONS = ("natural",)
DEFAULT_NUM_CLIENTS = 0  # all writers
NUM_PIXELS = 28 * 28


def create_autoencoder() -> tf.keras.Model:
  """TFF's EMNIST bottleneck autoencoder: [batch, 784] -> [batch, 784] in (0, 1)."""
  return emnist_models.create_autoencoder_model()


def _to_pair(element) -> tuple[tf.Tensor, tf.Tensor]:
  x = 1.0 - tf.reshape(element["pixels"], [NUM_PIXELS])
  return x, x


def to_autoencoder_pairs(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """``{'pixels', 'label'}`` -> ``(x[784], x[784])`` with ``x = 1 - pixels``, in order.

  The map of TFF's baseline (``emnist_preprocessing._reshape_for_autoencoder``)
  applied per element; TFF's own pipeline works on batches and maps them
  non-deterministically.
  """
  return dataset.map(_to_pair)


def build_task(options: TaskOptions) -> Task:
  """Builds the EMNIST autoencoder task from TFF's on-disk federated EMNIST."""
  options = tasks.resolve_options(NAME, options)
  data = tff_sqlite.train_and_pooled_test(*load_client_data(options.data_dir), options.num_clients,
                                          options.seed, to_autoencoder_pairs)
  return Task(
      name=NAME,
      train=data.train,
      test=data.test,
      model_fn=create_autoencoder,
      loss_fn=tf.keras.losses.MeanSquaredError,
      accuracy_fn=None,
      num_classes=None,
      info=(f"Federated EMNIST autoencoder from {sqlite_path(options.data_dir)}: {data.num_train} of "
            f"{data.num_all} writers for training, all writers' test data pooled; model autoencoder "
            f"(MSE, no accuracy)."))
