"""Reproducible randomness that does not depend on, or change, TF's global seed.

TF combines an op's seed with the global seed (`tf.random.set_seed`), so the
order of ``dataset.shuffle(seed=s)`` or Keras' initial weights (which also draw
from Python's ``random``) would depend on
whatever the surrounding program (a notebook, a test) set before. Work done
inside `global_seed(s)` sees exactly global seed ``s`` and the previous global
seed is restored afterwards.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context


@contextlib.contextmanager
def global_seed(seed: int) -> Iterator[None]:
  """Runs the block as after ``tf.keras.utils.set_random_seed(seed)`` (TF, Python and
  NumPy generators; Keras' unseeded initialisers draw from Python's), then restores
  all three."""
  previous = context.global_seed()
  py_state, np_state = random.getstate(), np.random.get_state()
  tf.keras.utils.set_random_seed(seed)
  try:
    yield
  finally:
    tf.random.set_seed(previous)
    random.setstate(py_state)
    np.random.set_state(np_state)
