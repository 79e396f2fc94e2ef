"""Toy problems the algorithm, driver and tuning tests share: a small MLP on a random linear
3-class problem, its clients, plain-SGD client deltas computed by hand, and the driver on it."""

import numpy as np
import tensorflow as tf

from tff_robust.algorithms import client_work
from tff_robust.simulation import loop
from tff_robust.tasks.base import Task, sparse_accuracy
from tff_robust.tasks.partition import client_data_from_arrays, partition

DIM, CLASSES = 6, 3


def model_fn():
  return tf.keras.Sequential([
      tf.keras.layers.Dense(8, activation="relu", input_shape=(DIM,)),
      tf.keras.layers.Dense(CLASSES)])


def loss_fn():
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


SPEC = client_work.ModelSpec(model_fn, loss_fn, sparse_accuracy,
                             (tf.TensorSpec([DIM], tf.float32), tf.TensorSpec([], tf.int32)))


def make_clients(sizes=(30, 50, 20), seed=0, nan_client=None):
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(DIM, CLASSES))
  out = []
  for k, n in enumerate(sizes):
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    y = np.argmax(x @ w, 1).astype(np.int32)
    if k == nan_client:
      x[0, 0] = np.nan
    out.append((x, y))
  return out


def datasets(clients):
  return [tf.data.Dataset.from_tensor_slices(c) for c in clients]


def manual_client_delta(w0, x, y, lr, steps, batch, epochs=None):
  """K steps (or E passes) of plain SGD on CE, in eager TF (the CLIENTOPT of Algorithm 2)."""
  model = model_fn()
  for v, val in zip(model.trainable_variables, w0):
    v.assign(val)
  loss = loss_fn()
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  ds = ds.repeat().batch(batch).take(steps) if epochs is None else ds.repeat(epochs).batch(batch)
  for xb, yb in ds:
    with tf.GradientTape() as tape:
      l = loss(yb, model(xb))
    for v, g in zip(model.trainable_variables, tape.gradient(l, model.trainable_variables)):
      v.assign_sub(lr * g)
  return [v.numpy() - w for v, w in zip(model.trainable_variables, w0)]


def weighted_mean(deltas, weights):
  weights = np.asarray(weights, np.float64) / np.sum(weights)
  return [sum(w * d[i] for w, d in zip(weights, deltas)) for i in range(len(deltas[0]))]


def toy_task(seed=0):
  """A 6-client iid task on a 5-feature, 3-class linear problem (the driver's tests)."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(5, 3))
  x = rng.normal(size=(240, 5)).astype(np.float32)
  y = np.argmax(x @ w, 1).astype(np.int32)
  parts = partition(y, 6, "iid", seed=seed)

  def model_fn():
    return tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(5,)),
                                tf.keras.layers.Dense(3)])

  return Task(name="toy", train=client_data_from_arrays(x, y, parts),
              test=tf.data.Dataset.from_tensor_slices((x[:60], y[:60])), model_fn=model_fn,
              loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              accuracy_fn=sparse_accuracy, num_classes=3)


def run_loop(task, out, rounds, proc):
  """The driver over `rounds` rounds of `proc` on `task`, evaluating and checkpointing every 2."""
  cfg = loop.LoopConfig(output_dir=out, rounds=rounds, clients_per_round=3, rounds_per_eval=2,
                        rounds_per_checkpoint=2, seed=5, shuffle_buffer=64)
  driver = loop.TrainingLoop(proc, task, cfg)
  result = driver.run()
  return driver, result
