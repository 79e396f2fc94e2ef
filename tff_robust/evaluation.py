"""Loss and accuracy of a Keras model over a batched dataset, graph-friendly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf

from tasks.base import AccuracyFn


def assign_weights(model: tf.keras.Model, trainable, non_trainable) -> None:
  """Sets a Keras model's variables from (trainable, non_trainable) lists."""
  for var, value in zip(model.trainable_variables, trainable):
    var.assign(value)
  for var, value in zip(model.non_trainable_variables, non_trainable):
    var.assign(value)


def evaluate(model: tf.keras.Model, dataset: tf.data.Dataset,
             loss_fn: tf.keras.losses.Loss,
             accuracy_fn: Optional[AccuracyFn]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
  """Returns (loss_sum, correct, predictions, examples) over ``dataset``.

  ``loss_sum`` is the sum of per-batch mean loss × batch size; ``correct`` and
  ``predictions`` are the accuracy function's counts (for sequence tasks its
  denominator is the scored tokens, not the examples). Sums, not means, so
  callers can add them across clients before dividing.
  """

  def step(acc, batch):
    loss_sum, correct, predictions, count = acc
    x, y = batch
    logits = model(x, training=False)
    n = tf.cast(tf.shape(logits)[0], tf.float32)
    loss_sum += loss_fn(y, logits) * n
    if accuracy_fn is not None:
      c, p = accuracy_fn(y, logits)
      correct += c
      predictions += p
    return loss_sum, correct, predictions, count + n

  zero = tf.constant(0.0)
  return dataset.reduce((zero, zero, zero, zero), step)


def sample_examples(dataset: tf.data.Dataset, n: int, seed: int,
                    buffer: int = 10_000) -> tuple[np.ndarray, ...]:
  """``n`` examples of an unbatched ``(x, y)`` dataset as numpy arrays (seeded shuffle)."""
  batch = next(iter(dataset.shuffle(buffer, seed=seed).take(n).batch(n)))
  return tuple(np.asarray(t) for t in batch)


def metrics_from_sums(loss_sum: float, correct: float, predictions: float, count: float,
                      has_accuracy: bool) -> dict[str, float]:
  """Mean loss per example (and accuracy per prediction) from `evaluate`'s sums (added over
  clients, if pooled)."""
  out = {"loss": float(loss_sum) / max(float(count), 1.0)}
  if has_accuracy:
    out["accuracy"] = float(correct) / max(float(predictions), 1.0)
  return out


def make_sums(model_fn: Callable[[], tf.keras.Model], loss_fn: Callable[[], tf.keras.losses.Loss],
              accuracy_fn: Optional[AccuracyFn]):
  """``sums(trainable, non_trainable, dataset)`` → `evaluate`'s sums; one model, traced once."""
  model = model_fn()
  loss = loss_fn()

  @tf.function
  def sums(trainable, non_trainable, dataset):
    assign_weights(model, list(trainable), list(non_trainable))
    return evaluate(model, dataset, loss, accuracy_fn)

  return sums


def make_evaluator(model_fn: Callable[[], tf.keras.Model], loss_fn: Callable[[], tf.keras.losses.Loss],
                   accuracy_fn: Optional[AccuracyFn]):
  """An eager evaluator ``fn(trainable, non_trainable, dataset) -> dict``, traced once."""
  sums = make_sums(model_fn, loss_fn, accuracy_fn)

  def fn(trainable, non_trainable, dataset: tf.data.Dataset) -> dict[str, float]:
    return metrics_from_sums(*sums(list(trainable), list(non_trainable), dataset),
                             has_accuracy=accuracy_fn is not None)

  return fn
