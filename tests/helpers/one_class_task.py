"""A plug-in task for the server-sample tests: ``--task=helpers.one_class_task:build`` (tests/ on
sys.path). Ten Gaussian classes in 8 dimensions, client k holds only class k (seed 000's
non-iid split) and 1,500 + 150·k examples: 23,250 in all, more than the 10,000-example
shuffle buffer that used to pick the server's validation sample."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_robust.tasks import Task, TaskOptions
from tff_robust.tasks.base import sparse_accuracy
from tff_robust.tasks.partition import client_data_from_arrays

CLASSES, DIM = 10, 8
SIZES = tuple(1500 + 150 * k for k in range(CLASSES))


def build(options: TaskOptions) -> Task:
  rng = np.random.default_rng(1234)  # the data do not depend on --seed
  centres = rng.normal(size=(CLASSES, DIM)).astype(np.float32)
  y = np.repeat(np.arange(CLASSES), SIZES).astype(np.int32)
  x = (centres[y] + 0.8 * rng.normal(size=(len(y), DIM))).astype(np.float32)
  offsets = np.concatenate([[0], np.cumsum(SIZES)])
  parts = [np.arange(offsets[k], offsets[k + 1]) for k in range(CLASSES)]
  yt = np.arange(500, dtype=np.int32) % CLASSES
  xt = (centres[yt] + 0.8 * rng.normal(size=(500, DIM))).astype(np.float32)
  return Task(
      name="one_class_gauss",
      train=client_data_from_arrays(x, y, parts),
      test=tf.data.Dataset.from_tensor_slices((xt, yt)),
      model_fn=lambda: tf.keras.Sequential([
          tf.keras.Input(shape=(DIM,)),
          tf.keras.layers.Dense(16, activation="relu"),
          tf.keras.layers.Dense(CLASSES)]),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=CLASSES,
      info=f"one class per client, {len(y)} examples, seed {options.seed}")
