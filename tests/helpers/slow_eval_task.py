"""A plug-in task whose data is slow to read: ``--task=helpers.slow_eval_task:build`` (with tests/
on sys.path). It stands for a read that holds the driver inside one long TensorFlow call (a large
test split pooled client by client, a large file read at start-up), where Python cannot run a
signal handler until the call returns.

With ``SLOW_EVAL_MARK=PATH`` in the environment, reading the test split first creates PATH (the
test then knows the evaluation has begun) and blocks for ``SLOW_SECONDS`` (default 600); with
``SLOW_LOAD_MARK=PATH`` building the task does the same (a read at start-up). Without them the
data reads at once. Training is `plugin_task`'s two-client XOR problem.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from tff_robust.tasks import Task, TaskOptions

from helpers import plugin_task

EVAL_MARK, LOAD_MARK, SECONDS = "SLOW_EVAL_MARK", "SLOW_LOAD_MARK", "SLOW_SECONDS"


def _examples(x: np.ndarray, y: np.ndarray, mark_variable: str):
  mark = os.environ.get(mark_variable)
  if mark:
    with open(mark, "w") as f:
      f.write(str(os.getpid()))
    time.sleep(float(os.environ.get(SECONDS, "600")))
  yield from zip(x, y)


def _dataset(x: np.ndarray, y: np.ndarray, mark_variable: str) -> tf.data.Dataset:
  """``(x, y)`` read through a generator that blocks first when ``mark_variable`` is set."""
  return tf.data.Dataset.from_generator(
      lambda: _examples(x, y, mark_variable),
      output_signature=(tf.TensorSpec(x.shape[1:], tf.float32), tf.TensorSpec((), tf.int32)))


def build(options: TaskOptions) -> Task:
  task = plugin_task.build(options)
  x, y = (np.stack(a) for a in zip(*task.test.as_numpy_iterator()))
  next(iter(_dataset(x, y, LOAD_MARK)))  # the driver waits inside TensorFlow's iterator
  return dataclasses.replace(task, name="slow_eval_xor", test=_dataset(x, y, EVAL_MARK))
