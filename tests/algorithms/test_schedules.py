"""Tests for tff_robust.algorithms.schedules against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import schedules

ROUNDS = [1, 2, 3, 4, 9, 10, 11, 500, 501, 1001]


@pytest.mark.parametrize('t', ROUNDS)
def test_client_lr_closed_forms(t):
  assert schedules.client_lr(t, 0.1, 'constant').numpy() == pytest.approx(0.1, rel=1e-6)
  assert schedules.client_lr(t, 0.1, 'invsqrt').numpy() == pytest.approx(0.1 / math.sqrt(t), rel=1e-6)
  # Seed 004 EMNIST: x0.1 every 500 rounds (staircase).
  assert schedules.client_lr(t, 0.1, 'expdecay', 0.1, 500).numpy() == pytest.approx(
      0.1 * 0.1**((t - 1) // 500), rel=1e-6)
  # Seed 003: 0.99 per round.
  assert schedules.client_lr(t, 0.5, 'expdecay', 0.99, 1).numpy() == pytest.approx(
      0.5 * 0.99**(t - 1), rel=1e-6)


def test_client_lr_staircase_by_hand():
  lrs = [schedules.client_lr(t, 1.0, 'expdecay', 0.5, 3).numpy() for t in range(1, 8)]
  np.testing.assert_allclose(lrs, [1, 1, 1, 0.5, 0.5, 0.5, 0.25])
  assert schedules.client_lr(4, 1.0, 'invsqrt').numpy() == pytest.approx(0.5)


def test_client_lr_in_graph_with_tensor_round():
  @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
  def f(t):
    return schedules.client_lr(t, 0.2, 'expdecay', 0.1, 2)

  assert f.get_concrete_function().structured_outputs.dtype == tf.float32
  np.testing.assert_allclose([f(tf.constant(t, tf.int64)).numpy() for t in (1, 2, 3, 5)],
                             [0.2, 0.2, 0.02, 0.002], rtol=1e-6)
  g = tf.function(lambda t: schedules.client_lr(t, 0.2, 'invsqrt'))
  assert g(tf.constant(9, tf.int32)).numpy() == pytest.approx(0.2 / 3)


@pytest.mark.parametrize('kind', schedules.LR_SCHEDULES)
def test_round_zero_rejected(kind):
  with pytest.raises(ValueError, match='round_num must be >= 1'):
    schedules.client_lr(0, 0.1, kind)
  f = tf.function(lambda t: schedules.client_lr(t, 0.1, kind))
  with pytest.raises(tf.errors.InvalidArgumentError, match='round_num must be >= 1'):
    f(tf.constant(0))


@pytest.mark.parametrize('t', ROUNDS)
def test_local_steps_closed_form(t):
  for base, rate, every, lo in [(20, 0.5, 3, 2), (10, 0.95, 1, 1), (7, 1.0, 1, 1), (50, 0.9, 100, 5)]:
    expected = max(lo, int(np.round(base * rate**((t - 1) // every))))
    steps = schedules.local_steps(t, base, rate, every, lo)
    assert steps.dtype == tf.int32
    assert int(steps.numpy()) == expected, (t, base, rate, every, lo)


def test_local_steps_by_hand_and_in_graph():
  # K=20, gamma=0.5 every 2 rounds, floor 3: 20, 20, 10, 10, 5, 5, round(2.5)=2 -> 3.
  f = tf.function(lambda t: schedules.local_steps(t, 20, 0.5, 2, 3))
  got = [int(f(tf.constant(t, tf.int32)).numpy()) for t in range(1, 9)]
  assert got == [20, 20, 10, 10, 5, 5, 3, 3]
  assert [int(schedules.local_steps(t, 4).numpy()) for t in (1, 100)] == [4, 4]
  # Usable as a dataset.take count.
  ds = tf.data.Dataset.range(100).take(tf.cast(schedules.local_steps(3, 20, 0.5, 2, 3), tf.int64))
  assert len(list(ds)) == 10


@pytest.mark.parametrize('args,message', [
    (('cosine', 0.5, 1), r"--client_lr_schedule must be one of \('constant', 'invsqrt', 'expdecay'\), got 'cosine'"),
    (('expdecay', 0.0, 1), r'--client_lr_decay_rate must be in \(0, 1\], got 0.0'),
    (('expdecay', 1.5, 1), r'--client_lr_decay_rate must be in \(0, 1\], got 1.5'),
    (('expdecay', 0.5, 0), '--client_lr_decay_every must be an integer >= 1, got 0'),
    (('expdecay', 0.5, 2.5), '--client_lr_decay_every must be an integer >= 1, got 2.5'),
])
def test_validate_schedule(args, message):
  with pytest.raises(ValueError, match=message):
    schedules.validate_schedule(*args)
  with pytest.raises(ValueError, match=message):
    schedules.client_lr(1, 0.1, *args)


def test_validation_of_lr_and_steps():
  schedules.validate_schedule('expdecay', 1.0, 1)  # valid
  with pytest.raises(ValueError, match='--client_lr must be > 0, got -0.1'):
    schedules.client_lr(1, -0.1)
  with pytest.raises(ValueError, match='base_steps must be an integer >= 1, got 0'):
    schedules.local_steps(1, 0)
  with pytest.raises(ValueError, match=r'min_steps must be an integer in \[1, base_steps=5\], got 6'):
    schedules.local_steps(1, 5, min_steps=6)
  with pytest.raises(ValueError, match=r'decay_rate must be in \(0, 1\], got 2.0'):
    schedules.local_steps(1, 5, decay_rate=2.0)
  with pytest.raises(ValueError, match='decay_every must be an integer >= 1, got 0'):
    schedules.local_steps(1, 5, decay_every=0)
