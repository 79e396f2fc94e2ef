"""The authors' matching layers (``--rm_layers=authors``) against eq. 1 of seed 000 computed by
hand in NumPy, loss and gradients, on a conv → conv → max-pool → dense model."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.methods.rm import matching_layers

L = tf.keras.layers
B = 3  # batch


def _model():
  """a_1 = ReLU(conv1) at full resolution (6x6x2, followed by a conv, not a pool: a pre-pool
  target), a_2 = max-pool(ReLU(conv2)) (3x3x3), a_3 = the logits (4)."""
  return tf.keras.Sequential([
      tf.keras.Input((6, 6, 1)), L.Conv2D(2, 3, padding="same", activation="relu"),
      L.Conv2D(3, 3, padding="same", activation="relu"), L.MaxPooling2D(2), L.Flatten(),
      L.Dense(4)])


def conv_same(x, k, b):
  """TF's 'same' 2-D cross-correlation, stride 1, odd kernel: x [B,H,W,Ci], k [kh,kw,Ci,Co]."""
  kh, kw = k.shape[:2]
  xp = np.pad(x, [(0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)])
  h, w = x.shape[1:3]
  out = np.zeros(x.shape[:3] + (k.shape[3],))
  for i in range(kh):
    for j in range(kw):
      out += np.einsum("bhwc,co->bhwo", xp[:, i:i + h, j:j + w, :], k[i, j])
  return out + b


def pool_argmax(x):
  """2x2 max-pool, stride 2, and a 0/1 mask of each window's argmax (distinct values: no ties)."""
  b, h, w, c = x.shape
  win = x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4).reshape(b, h // 2, w // 2, c, 4)
  pooled = win.max(-1)
  mask = (win == pooled[..., None]).astype(float)
  mask = mask.reshape(b, h // 2, w // 2, c, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(b, h, w, c)
  return pooled, mask


def unpool(values, mask):
  """Each pooled value back at its window's argmax (zeros elsewhere)."""
  up = values.repeat(2, axis=1).repeat(2, axis=2)
  return up * mask


def forward(x, w):
  """The model by hand: the activations of interest a_0..a_3 and the pool's argmax mask."""
  k1, b1, k2, b2, wd, bd = w
  a1 = np.maximum(conv_same(x, k1, b1), 0)
  a2, mask = pool_argmax(np.maximum(conv_same(a1, k2, b2), 0))
  a3 = a2.reshape(len(x), -1) @ wd + bd
  return [x, a1, a2, a3], mask


def eq1(x, w, w_frozen, theta):
  """Eq. 1, squared error summed over units and averaged over the batch, with the authors'
  f_j: f_0 = conv(a_1) (identity), f_1 = ReLU(conv(unpool(a_2))), f_2 = ReLU(Linear(a_3))."""
  return eq1_of(forward(x, w), forward(x, w_frozen)[0], theta)


def eq1_of(acts_and_mask, targets, theta):
  """`eq1` from the model's activations and argmax mask (`forward`) and M^F's activations: the
  numerical gradients reuse what a perturbation does not change."""
  (t0, c0, t1, c1, t2, c2) = theta
  acts, mask = acts_and_mask
  recs = [conv_same(acts[1], t0, c0),
          np.maximum(conv_same(unpool(acts[2], mask), t1, c1), 0),
          np.maximum(acts[3] @ t2 + c2, 0).reshape(acts[2].shape)]
  return sum(np.sum((r - t) ** 2) for r, t in zip(recs, targets[:3])) / len(acts[0])


def _numeric_grad(f, params, k, eps=1e-6):
  g = np.zeros_like(params[k])
  for idx in np.ndindex(params[k].shape):
    for sign in (1, -1):
      p = [q.copy() for q in params]
      p[k][idx] += sign * eps
      g[idx] += sign * f(p) / (2 * eps)
  return g


def test_authors_layers_are_eq1_by_hand_loss_and_gradients():
  tf.keras.utils.set_random_seed(11)
  model, frozen = _model(), _model()
  rng = np.random.default_rng(0)
  frozen.set_weights([v + 0.2 * rng.standard_normal(v.shape).astype(np.float32)
                      for v in model.get_weights()])
  matcher = matching.RepresentationMatcher(model, seed=2)
  assert matcher.form == "authors"
  assert [tuple(v.shape) for v in matcher.theta] == [(3, 3, 2, 1), (1,), (3, 3, 3, 2), (2,),
                                                     (4, 27), (27,)]
  for v in matcher.theta:   # non-zero biases, and a scale at which every ReLU is live somewhere
    v.assign(v + 0.05 * tf.random.stateless_normal(v.shape, [1, 2]))
  x = rng.uniform(-1, 1, (B, 6, 6, 1)).astype(np.float32)

  _, facts, _ = matcher.forward(frozen, x, False, False)
  with tf.GradientTape() as tape:
    _, acts, argmax = matcher.forward(model, x, True, True)
    loss = matcher.matching_loss(acts, argmax, facts)
  grads = tape.gradient(loss, model.trainable_variables + matcher.theta)

  w = [v.astype(np.float64) for v in model.get_weights()]
  wf = [v.astype(np.float64) for v in frozen.get_weights()]
  theta = [v.numpy().astype(np.float64) for v in matcher.theta]
  want = eq1(x.astype(np.float64), w, wf, theta)
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)

  # The pre-pool target a_1 (6x6x2) is rebuilt densely: no unit is structurally zero.
  rec1 = matcher.reconstructions(acts, argmax)[1].numpy()
  pre_relu = tf.nn.conv2d(tf.constant(np.repeat(np.repeat(acts[2].numpy(), 2, 1), 2, 2)),
                          matcher.theta[2], 1, "SAME").numpy()
  assert rec1.shape == (B, 6, 6, 2) and np.count_nonzero(pre_relu) == pre_relu.size

  xs = x.astype(np.float64)
  targets = forward(xs, wf)[0]   # M^F's: the same under every perturbation below
  for k in range(len(w)):   # d eq.1 / d w^i
    num = _numeric_grad(lambda p: eq1_of(forward(xs, p), targets, theta), w, k)
    np.testing.assert_allclose(grads[k].numpy(), num, rtol=2e-3, atol=2e-4)
  acts_and_mask = forward(xs, w)   # the model's: the same under a perturbation of θ
  for k in range(len(theta)):   # d eq.1 / d θ
    num = _numeric_grad(lambda p: eq1_of(acts_and_mask, targets, p), theta, k)
    np.testing.assert_allclose(grads[len(w) + k].numpy(), num, rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize("form,j,floor", [("authors", 1, False), ("reversed", 2, True)])
def test_unpooled_target_has_a_floor_only_in_the_reversed_form(form, j, floor):
  """θ alone fitting the model's own activations (w^i = w), on the term whose f_j unpools
  to a full-resolution target: the authors' f_1 rebuilds a_1 (6x6) by unpool → conv, which
  reaches every unit, so the term falls far; the reversed f_2 rebuilds the pre-pool ReLU(conv2)
  (6x6) by a Linear then unpooling, which leaves 3/4 of it at zero, a floor θ cannot remove."""
  tf.keras.utils.set_random_seed(0)
  model = _model()
  matcher = matching.RepresentationMatcher(model, seed=1, form=form)
  x = tf.constant(np.random.default_rng(3).uniform(-1, 1, (8, 6, 6, 1)).astype(np.float32))
  _, targets, _ = matcher.forward(model, x, False, False)
  opt = tf.keras.optimizers.Adam(0.01)

  @tf.function
  def term1():
    with tf.GradientTape() as tape:
      _, acts, argmax = matcher.forward(model, x, False, True)
      terms = matcher.matching_terms(acts, argmax, targets)
      total = tf.add_n(terms)
    opt.apply_gradients(zip(tape.gradient(total, matcher.theta), matcher.theta))
    return terms[j]

  first = float(term1())
  last = min(float(term1()) for _ in range(600))
  _, acts, argmax = matcher.forward(model, x, False, True)
  rec, target = matcher.reconstructions(acts, argmax)[j].numpy(), targets[j].numpy()
  reached = np.mean(rec[target > 0] != 0)   # of the target's live units, the share rebuilt
  if floor:   # only each 2x2 window's argmax can be non-zero
    assert np.mean(rec == 0) >= 0.75 and reached < 0.7, (np.mean(rec == 0), reached)
    off = 1.0 - matching_layers.max_unpool(tf.ones((8, 3, 3, 3)), argmax[0], (2, 2), (2, 2),
                                           "valid").numpy()
    assert last >= np.sum(target ** 2 * off) / len(target) - 1e-4
  else:
    assert reached >= 0.8, reached
    assert last < first / 3, (first, last)
