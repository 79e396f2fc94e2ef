"""Loss and accuracy of a Keras model over a batched dataset, graph-friendly."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_robust.tasks.base import AccuracyFn


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


def num_examples(dataset: tf.data.Dataset) -> int:
  """Number of elements of a finite dataset (its cardinality, else one pass)."""
  n = int(dataset.cardinality())
  if n >= 0:
    return n
  return int(dataset.reduce(np.int64(0), lambda c, _: c + 1))


def count_examples(dataset: tf.data.Dataset) -> tf.Tensor:
  """`num_examples` in TF, as float32: the cardinality when tf.data knows it (tensor slices,
  mapped or shuffled), else one pass counting (a filtered or generated dataset). The pass costs
  a client of the MNIST 2NN a third of its 20 local steps' CPU (`docs/performance.md`)."""
  known = tf.data.experimental.cardinality(dataset)  # -1: infinite, -2: unknown
  return tf.cond(known >= 0, lambda: tf.cast(known, tf.float32),
                 lambda: dataset.reduce(tf.constant(0.0), lambda c, _: c + 1.0))


def _take_positions(dataset: tf.data.Dataset, positions: np.ndarray):
  """The elements at sorted ``positions`` of an unbatched dataset, as numpy arrays."""
  wanted = tf.constant(np.asarray(positions, np.int64))
  picked = (dataset.take(int(positions[-1]) + 1).enumerate()
            .filter(lambda i, _: tf.reduce_any(tf.equal(i, wanted))).map(lambda _, e: e))
  batch = next(iter(picked.batch(len(positions))))
  return tf.nest.map_structure(np.asarray, batch)


def _concat(parts: list) -> tuple[np.ndarray, ...]:
  return tuple(tf.nest.map_structure(lambda *a: np.concatenate(a), *parts))


def sample_examples(dataset: tf.data.Dataset, n: int, seed: int) -> tuple[np.ndarray, ...]:
  """``n`` examples of an unbatched ``(x, y)`` dataset, uniform over all of it (no shuffle
  buffer), as numpy arrays in dataset order; deterministic for ``seed`` and a dataset whose
  order is fixed."""
  total = num_examples(dataset)
  rng = np.random.default_rng([seed, n, 0x5A4D])
  positions = np.sort(rng.choice(total, size=min(n, total), replace=False))
  return _concat([_take_positions(dataset, positions)])


def stratified_allocation(sizes: Sequence[int], n: int, rng: np.random.Generator) -> np.ndarray:
  """Examples per client: ⌊n·n_k/N⌋, plus one for r clients drawn with probability ∝ the
  fractional parts (r = n − Σ⌊·⌋), so E[m_k] = n·n_k/N and |m_k − n·n_k/N| < 1."""
  sizes = np.asarray(sizes, np.int64)
  n = min(int(n), int(sizes.sum()))
  quota = n * sizes / sizes.sum()
  alloc = np.floor(quota).astype(np.int64)
  rest = n - int(alloc.sum())
  if rest > 0:
    frac = quota - alloc
    alloc[rng.choice(len(sizes), size=rest, replace=False, p=frac / frac.sum())] += 1
  return alloc


def sample_client_examples(client_data, n: int, seed: int) -> tuple[np.ndarray, ...]:
  """A server validation sample "representative of the clients' data" (seed 000 §3.3).

  Stratified over clients: client k (sorted ids) gives m_k ≈ n·n_k/N examples
  (`stratified_allocation`) at positions drawn uniformly without replacement. Everything
  is drawn from ``seed`` (and n) with numpy, so the sample is the same in every process
  that asks for it (a resumed run gets the set it started with). Costs one pass over each
  client's data whose size is not known statically.
  """
  ids = sorted(client_data.client_ids)
  datasets = [client_data.create_tf_dataset_for_client(cid) for cid in ids]
  sizes = [num_examples(ds) for ds in datasets]
  rng = np.random.default_rng([seed, n, 0x57A7])
  alloc = stratified_allocation(sizes, n, rng)
  parts = []
  for ds, size, m in zip(datasets, sizes, alloc):
    if m > 0:
      parts.append(_take_positions(ds, np.sort(rng.choice(size, size=int(m), replace=False))))
  return _concat(parts)


def server_sample(train, validation: Optional[tf.data.Dataset], n: int,
                  seed: int) -> tuple[np.ndarray, ...]:
  """The server-held examples of AH's L_t and of the divergence guard: ``n`` of the task's
  central validation set if it has one, else `sample_client_examples` of its clients."""
  if validation is not None:
    return sample_examples(validation, n, seed)
  return sample_client_examples(train, n, seed)


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
