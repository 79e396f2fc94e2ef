"""Client learning-rate and local-steps schedules over rounds (rounds counted from 1).

Pure TensorFlow functions of the round number, usable eagerly, in a
``tf.function`` or inside a ``tff.tensorflow.computation``:

* ``client_lr``: ``constant`` eta_l; ``invsqrt`` eta_l / sqrt(t); ``expdecay``
  (staircase) eta_l * gamma^floor((t-1)/N). Seed 004 decays x0.1 every 500
  rounds on EMNIST (gamma=0.1, N=500); seed 003 uses 0.99 per round (gamma=0.99,
  N=1).
* ``local_steps``: the fixed decay of the number of local SGD steps of seed
  000's FedAvg baseline, max(min_steps, round(K * gamma^floor((t-1)/N))).
"""

from __future__ import annotations

import numbers

import tensorflow as tf

LR_SCHEDULES = ('constant', 'invsqrt', 'expdecay')


def validate_schedule(kind: str, decay_rate: float, decay_every: int) -> None:
  """Raises ``ValueError`` (naming the flag) on a bad client-lr schedule."""
  if kind not in LR_SCHEDULES:
    raise ValueError(
        f'--client_lr_schedule must be one of {LR_SCHEDULES}, got {kind!r}')
  if not 0 < decay_rate <= 1:
    raise ValueError(
        f'--client_lr_decay_rate must be in (0, 1], got {decay_rate}')
  if not _is_int(decay_every) or decay_every < 1:
    raise ValueError(
        f'--client_lr_decay_every must be an integer >= 1, got {decay_every!r}')


def _is_int(x) -> bool:
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _round_tensor(round_num) -> tf.Tensor:
  """``round_num`` as an int64 tensor, checked to be >= 1 (rounds count from 1)."""
  if _is_int(round_num) and round_num < 1:
    raise ValueError(f'round_num must be >= 1 (rounds count from 1), got {round_num}')
  t = tf.cast(tf.convert_to_tensor(round_num), tf.int64)
  check = tf.debugging.assert_greater_equal(
      t, tf.constant(1, tf.int64),
      message='round_num must be >= 1 (rounds count from 1)')
  with tf.control_dependencies([check]):
    return tf.identity(t)


def _num_decays(t: tf.Tensor, decay_every: int) -> tf.Tensor:
  """floor((t - 1) / N) as float64."""
  return tf.cast((t - 1) // tf.constant(decay_every, tf.int64), tf.float64)


def client_lr(round_num, base_lr: float, kind: str = 'constant',
              decay_rate: float = 1.0, decay_every: int = 1) -> tf.Tensor:
  """Client learning rate eta_l(t) for round ``t = round_num`` (float32 scalar).

  ``constant``: eta_l. ``invsqrt``: eta_l / sqrt(t). ``expdecay``:
  eta_l * decay_rate^floor((t - 1) / decay_every) (staircase; seed 004 Sec. 5,
  seed 003's per-round 0.99 decay is decay_every=1).
  """
  validate_schedule(kind, decay_rate, decay_every)
  if not base_lr > 0:
    raise ValueError(f'--client_lr must be > 0, got {base_lr}')
  t = _round_tensor(round_num)
  lr = tf.constant(base_lr, tf.float64)
  if kind == 'invsqrt':
    lr = lr / tf.sqrt(tf.cast(t, tf.float64))
  elif kind == 'expdecay':
    lr = lr * tf.pow(tf.constant(decay_rate, tf.float64), _num_decays(t, decay_every))
  else:  # constant: keep the round check in the graph
    with tf.control_dependencies([t]):
      lr = tf.identity(lr)
  return tf.cast(lr, tf.float32)


def local_steps(round_num, base_steps: int, decay_rate: float = 1.0,
                decay_every: int = 1, min_steps: int = 1) -> tf.Tensor:
  """Local SGD steps K(t) = max(min_steps, round(K * gamma^floor((t-1)/N))), int32.

  The fixed local-steps decay of seed 000's FedAvg baseline; ``decay_rate=1``
  keeps K constant. Rounding is half-to-even (as ``numpy.round``), in float64.
  """
  if not _is_int(base_steps) or base_steps < 1:
    raise ValueError(f'base_steps must be an integer >= 1, got {base_steps!r}')
  if not _is_int(min_steps) or not 1 <= min_steps <= base_steps:
    raise ValueError(
        f'min_steps must be an integer in [1, base_steps={base_steps}], got {min_steps!r}')
  if not 0 < decay_rate <= 1:
    raise ValueError(f'decay_rate must be in (0, 1], got {decay_rate}')
  if not _is_int(decay_every) or decay_every < 1:
    raise ValueError(f'decay_every must be an integer >= 1, got {decay_every!r}')
  t = _round_tensor(round_num)
  steps = tf.constant(float(base_steps), tf.float64) * tf.pow(
      tf.constant(decay_rate, tf.float64), _num_decays(t, decay_every))
  steps = tf.cast(tf.round(steps), tf.int32)
  return tf.maximum(steps, tf.constant(min_steps, tf.int32))
