"""A plug-in task whose test data is slow to read: ``--task=helpers.slow_eval_task:build`` (with
tests/ on sys.path). It stands for a pooled evaluation that holds the driver inside one long
TensorFlow call (a large test split read client by client), where Python cannot run a signal
handler until the call returns.

With ``SLOW_EVAL_MARK=PATH`` in the environment, reading the test split first creates PATH (the
test knows the evaluation has begun) and then blocks for ``SLOW_EVAL_SECONDS`` (default 600);
without it the test split reads at once. Training is `plugin_task`'s two-client XOR problem.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from tff_robust.tasks import Task, TaskOptions

from helpers import plugin_task

MARK = "SLOW_EVAL_MARK"
SECONDS = "SLOW_EVAL_SECONDS"


def _slow_examples(x: np.ndarray, y: np.ndarray):
  mark = os.environ.get(MARK)
  if mark:
    with open(mark, "w") as f:
      f.write(str(os.getpid()))
    time.sleep(float(os.environ.get(SECONDS, "600")))
  yield from zip(x, y)


def build(options: TaskOptions) -> Task:
  task = plugin_task.build(options)
  x, y = (np.stack(a) for a in zip(*task.test.as_numpy_iterator()))
  test = tf.data.Dataset.from_generator(
      lambda: _slow_examples(x, y),
      output_signature=(tf.TensorSpec(x.shape[1:], tf.float32), tf.TensorSpec((), tf.int32)))
  return dataclasses.replace(task, name="slow_eval_xor", test=test)
