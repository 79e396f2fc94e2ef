"""An example user plug-in task: ``--task=helpers.plugin_task:build`` (with tests/ on sys.path).

A plug-in is any importable function ``options -> tasks.Task``: here a
two-client XOR-like problem with its own Keras model.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_robust.tasks import Task, TaskOptions
from tff_robust.tasks.partition import client_data_from_arrays

NOT_CALLABLE = 3


def build(options: TaskOptions) -> Task:
  rng = np.random.default_rng(options.seed)
  x = rng.uniform(-1, 1, size=(64, 2)).astype(np.float32)
  y = ((x[:, 0] * x[:, 1]) > 0).astype(np.int32)
  train = client_data_from_arrays(x, y, [np.arange(0, 32), np.arange(32, 64)])
  return Task(
      name="plugin_xor",
      train=train,
      test=tf.data.Dataset.from_tensor_slices((x, y)),
      model_fn=lambda: tf.keras.Sequential([
          tf.keras.Input(shape=(2,)),
          tf.keras.layers.Dense(8, activation="relu"),
          tf.keras.layers.Dense(2)]),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      num_classes=2,
      info=f"plug-in XOR, seed {options.seed}")


def not_a_task(options: TaskOptions) -> dict:
  del options
  return {"name": "not a task"}
