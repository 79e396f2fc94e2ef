"""Tests for tff_robust.algorithms.regularizers: entropy (eq. 8 of seed 000) and weight divergence."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import regularizers


def _entropy_np(logits):
  z = logits - logits.max(-1, keepdims=True)
  p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), -1)


LOGITS = np.array([[10.0, 0.0, 0.0, 0.0],     # confident: H ≈ 0.0014
                   [1.0, 0.5, 0.0, -0.5],     # H ≈ 1.26
                   [0.0, 0.0, 0.0, 0.0],      # uniform: H = ln 4 ≈ 1.386
                   [3.0, 1.0, 0.0, 0.0]], np.float32)   # H ≈ 0.69


@pytest.mark.parametrize("h_min", [0.0, 0.5, 1.0, 1.3, 2.0])
def test_entropy_regularizer_matches_hand_computation(h_min):
  want = np.mean(np.maximum(0.0, h_min - _entropy_np(LOGITS.astype(np.float64))))
  got = regularizers.entropy_regularizer(tf.constant(LOGITS), h_min).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_entropy_regularizer_boundaries_and_tensor_h_min():
  uniform = tf.zeros((3, 5))
  # H(uniform over 5) = ln 5 in nats: no penalty at exactly that floor, 0.1 above it.
  assert regularizers.entropy_regularizer(uniform, np.log(5.0)).numpy() == pytest.approx(0, abs=1e-6)
  assert regularizers.entropy_regularizer(uniform, np.log(5.0) + 0.1).numpy() == pytest.approx(0.1, abs=1e-5)
  got = regularizers.entropy_regularizer(tf.constant(LOGITS), tf.constant(1.0))
  want = np.mean(np.maximum(0.0, 1.0 - _entropy_np(LOGITS.astype(np.float64))))
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
  # Huge logits stay finite (log-softmax).
  big = regularizers.entropy_regularizer(tf.constant([[1e4, -1e4, 0.0]]), 1.0)
  np.testing.assert_allclose(big.numpy(), 1.0, atol=1e-6)


def test_entropy_regularizer_gradient_raises_low_entropy_only():
  logits = tf.Variable(LOGITS)
  h_min = 1.0
  with tf.GradientTape() as tape:
    reg = regularizers.entropy_regularizer(logits, h_min)
  grad = tape.gradient(reg, logits).numpy()
  below = _entropy_np(LOGITS.astype(np.float64)) < h_min
  assert np.all(grad[~below] == 0)        # hinge inactive
  assert np.all(np.abs(grad[below]).sum(-1) > 0)
  # Gradient = -(1/B) dH/dlogits on the active rows; check by central differences.
  eps = 1e-3
  for i in np.flatnonzero(below):
    for k in range(LOGITS.shape[1]):
      up, dn = LOGITS.astype(np.float64).copy(), LOGITS.astype(np.float64).copy()
      up[i, k] += eps
      dn[i, k] -= eps
      num = -(_entropy_np(up[i:i + 1]) - _entropy_np(dn[i:i + 1]))[0] / (2 * eps) / len(LOGITS)
      assert grad[i, k] == pytest.approx(num, abs=1e-4)
  # One descent step raises the entropy of the confident rows.
  stepped = LOGITS - 1.0 * grad
  assert np.all(_entropy_np(stepped)[below] > _entropy_np(LOGITS)[below])


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_entropy_regularizer_rejects_bad_h_min(bad):
  with pytest.raises(ValueError, match="h_min"):
    regularizers.entropy_regularizer(tf.constant(LOGITS), bad)


def test_weight_divergence_matches_hand_computation_and_gradient():
  rng = np.random.default_rng(0)
  init = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (2, 2, 3)]]
  now = [w + rng.standard_normal(w.shape).astype(np.float32) for w in init]
  want = sum(np.sum((a.astype(np.float64) - b) ** 2) for a, b in zip(now, init))
  variables = [tf.Variable(w) for w in now]
  init_vars = [tf.Variable(w) for w in init]
  with tf.GradientTape() as tape:
    wd = regularizers.weight_divergence(variables, init_vars)
  np.testing.assert_allclose(wd.numpy(), want, rtol=1e-5)
  grads = tape.gradient(wd, variables + init_vars)
  for g, a, b in zip(grads[:3], now, init):
    np.testing.assert_allclose(g.numpy(), 2 * (a - b), rtol=1e-5, atol=1e-6)
  assert all(g is None for g in grads[3:])   # w_t (from the server) is a constant
  assert regularizers.weight_divergence(variables, variables).numpy() == 0.0


def test_weight_divergence_rejects_mismatched_lists():
  a = [tf.zeros((2, 3)), tf.zeros((3,))]
  with pytest.raises(ValueError, match="initial_weights has 1"):
    regularizers.weight_divergence(a, a[:1])
  with pytest.raises(ValueError, match=r"trainable_weights\[1\] has shape"):
    regularizers.weight_divergence(a, [tf.zeros((2, 3)), tf.zeros((4,))])
