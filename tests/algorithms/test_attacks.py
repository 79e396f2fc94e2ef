"""Byzantine attacks against their formulas; robust aggregators against a sign-flip attack."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import aggregation, attacks

SHAPES = ([3, 2], [4])


def delta(seed=0):
  rng = np.random.default_rng(seed)
  return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def numpy(tensors):
  return [t.numpy() for t in tensors]


# ---- validation ------------------------------------------------------------------------

@pytest.mark.parametrize("args, match", [
    (dict(kind="flip"), r"--byzantine_attack='flip'.*none, sign_flip, gaussian, scaled, nan"),
    (dict(kind="none", fraction=1.0), r"--byzantine_fraction=1.0.*\[0, 1\)"),
    (dict(kind="none", fraction=-0.2), r"--byzantine_fraction=-0.2"),
    (dict(kind="scaled", scale=0.0), r"--byzantine_scale=0.0"),
    (dict(kind="gaussian", sigma=-1.0), r"--byzantine_sigma=-1.0"),
])
def test_validation_names_the_flag(args, match):
  with pytest.raises(ValueError, match=match):
    attacks.validate_attack(**args)


def test_apply_attack_rejects_unknown_kind():
  with pytest.raises(ValueError, match="--byzantine_attack='zero'"):
    attacks.apply_attack("zero", delta(), seed=0)


# ---- each attack against its formula ---------------------------------------------------

def test_none_returns_delta():
  d = delta()
  for out, ref in zip(numpy(attacks.apply_attack("none", d, seed=0)), d):
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("kind, scale, factor", [
    ("sign_flip", None, -1.0), ("sign_flip", 5.0, -5.0), ("scaled", None, 10.0), ("scaled", 3.0, 3.0)])
def test_sign_flip_and_scaled(kind, scale, factor):
  d = delta(1)
  for out, ref in zip(numpy(attacks.apply_attack(kind, d, seed=0, scale=scale)), d):
    np.testing.assert_allclose(out, factor * ref, rtol=1e-6)


def test_nan_fills_every_entry():
  out = numpy(attacks.apply_attack("nan", delta(), seed=0))
  assert [o.shape for o in out] == [tuple(s) for s in SHAPES]
  assert all(np.all(np.isnan(o)) for o in out)


def test_gaussian_is_sigma_times_stateless_normal():
  d = delta()
  out = numpy(attacks.apply_attack("gaussian", d, seed=7, sigma=2.5))
  for j, (o, s) in enumerate(zip(out, SHAPES)):
    ref = 2.5 * tf.random.stateless_normal(s, seed=tf.constant([7, j], tf.int64)).numpy()
    np.testing.assert_allclose(o, ref, rtol=1e-6)
  again = numpy(attacks.apply_attack("gaussian", d, seed=7, sigma=2.5))
  other = numpy(attacks.apply_attack("gaussian", d, seed=8, sigma=2.5))
  np.testing.assert_array_equal(out[0], again[0])
  assert not np.allclose(out[0], other[0])


def test_gaussian_moments():
  out = attacks.apply_attack("gaussian", [tf.zeros([200, 100])], seed=3, sigma=2.0)[0].numpy()
  assert abs(out.mean()) < 0.05 and out.std() == pytest.approx(2.0, rel=0.03)


def test_attack_in_a_graph_with_a_tensor_seed():
  """As inside the client computation: traced, seed a tensor, per-client flag."""
  d = delta(2)

  @tf.function
  def f(seed, is_byzantine):
    return attacks.maybe_attack("gaussian", [tf.constant(t) for t in d], is_byzantine, seed, sigma=0.5)

  attacked = numpy(f(tf.constant(11, tf.int32), tf.constant(True)))
  eager = numpy(attacks.apply_attack("gaussian", d, seed=11, sigma=0.5))
  honest = numpy(f(tf.constant(11, tf.int32), tf.constant(False)))
  for a, e, h, ref in zip(attacked, eager, honest, d):
    np.testing.assert_allclose(a, e, rtol=1e-6)
    np.testing.assert_array_equal(h, ref)


# ---- which clients are byzantine -------------------------------------------------------

@pytest.mark.parametrize("n, fraction, k", [
    (10, 0.2, 2), (10, 0.25, 3), (5, 0.3, 2), (7, 0.1, 1), (3, 0.1, 0), (10, 0.0, 0), (0, 0.5, 0)])
def test_byzantine_mask_count_is_rounded_fraction(n, fraction, k):
  mask = attacks.byzantine_mask(n, fraction, seed=(1, 4))
  assert mask.dtype == bool and mask.shape == (n,) and int(mask.sum()) == k


def test_byzantine_mask_is_reproducible_and_varies_with_round():
  masks = [attacks.byzantine_mask(20, 0.3, seed=(5, t)) for t in range(6)]
  again = [attacks.byzantine_mask(20, 0.3, seed=(5, t)) for t in range(6)]
  for m, a in zip(masks, again):
    np.testing.assert_array_equal(m, a)
  assert len({m.tobytes() for m in masks}) > 1


def test_byzantine_mask_is_uniform_over_positions():
  freq = np.mean([attacks.byzantine_mask(10, 0.2, seed=(0, t)) for t in range(3000)], axis=0)
  np.testing.assert_allclose(freq, 0.2, atol=0.03)


def test_byzantine_mask_validation():
  with pytest.raises(ValueError, match="--byzantine_fraction=1.0"):
    attacks.byzantine_mask(10, 1.0, seed=0)
  with pytest.raises(ValueError, match="num_sampled=-1"):
    attacks.byzantine_mask(-1, 0.1, seed=0)


# ---- robust aggregation under attack ---------------------------------------------------

def _aggregate(kind, deltas, **kwargs):
  value_type = tff.types.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
  process = aggregation.build_aggregator(kind, **kwargs).create(value_type, tff.TensorType(np.float32))
  return process.next(process.initialize(), deltas, [1.0] * len(deltas)).result


def _dist(a, b):
  return float(np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b))))


def test_median_resists_sign_flip_while_mean_is_pulled_away(tff_rt):
  """10 clients, 20% flip their delta with scale 5: mean ≈ (8μ − 10μ)/10 = −0.2μ."""
  rng = np.random.default_rng(0)
  mu = delta(3)
  honest = [[m + 0.05 * rng.normal(size=m.shape).astype(np.float32) for m in mu] for _ in range(10)]
  mask = attacks.byzantine_mask(10, 0.2, seed=(0, 1))
  sent = [numpy(attacks.apply_attack("sign_flip", d, seed=0, scale=5.0)) if byz else d
          for d, byz in zip(honest, mask)]
  honest_mean = [np.mean([d[j] for d, byz in zip(honest, mask) if not byz], axis=0)
                 for j in range(len(SHAPES))]
  size = _dist(honest_mean, [np.zeros_like(m) for m in mu])
  mean = _aggregate("mean", sent)
  median = _aggregate("median", sent)
  trimmed = _aggregate("trimmed_mean", sent, trim_fraction=0.2)
  assert _dist(mean, honest_mean) > 1.0 * size
  assert _dist(median, honest_mean) < 0.1 * size
  assert _dist(trimmed, honest_mean) < 0.1 * size
