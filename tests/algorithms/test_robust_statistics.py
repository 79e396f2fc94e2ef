"""Krum, Multi-Krum, Bulyan and RFA's geometric median against their definitions (numpy
references written from the papers, and hand-worked cases), their shares, and the check of each
aggregator's assumption on the byzantine clients f it tolerates."""

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import robust_statistics as rs


# ---- numpy references, from the definitions ---------------------------------------------

def np_scores(x, f):
  """Blanchard et al.: s(i) = Σ over the n−f−2 nearest j ≠ i of ‖x_i − x_j‖² (the module's
  floor of one neighbour when fewer clients came)."""
  m = len(x)
  d = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
  k = min(max(m - f - 2, 1), m - 1)
  return np.array([np.sort(np.delete(d[i], i))[:k].sum() for i in range(m)])


def np_multi_krum(x, f, q):
  chosen = np.argsort(np_scores(x, f), kind="stable")[:q]
  shares = np.zeros(len(x))
  shares[chosen] = 1.0 / q
  return x[chosen].mean(0), shares


def np_bulyan(x, f):
  """El Mhamdi et al.: θ = n − 2f by Krum over the rest, then per coordinate the mean of the
  β = θ − 2f values closest to the median of the chosen."""
  m = len(x)
  theta, remaining, chosen = max(m - 2 * f, 1), list(range(m)), []
  beta = max(theta - 2 * f, 1)
  for _ in range(theta):
    j = remaining[int(np.argmin(np_scores(x[remaining], f)))]
    chosen.append(j)
    remaining.remove(j)
  chosen.sort()
  s = x[chosen]
  med = np.median(s, axis=0)
  out, shares = np.zeros(x.shape[1]), np.zeros(m)
  for c in range(x.shape[1]):
    idx = np.argsort(np.abs(s[:, c] - med[c]), kind="stable")[:beta]
    out[c] = s[idx, c].mean()
    for i in idx:
      shares[chosen[i]] += 1.0 / (beta * x.shape[1])
  return out, shares


def np_geometric_median(x, w, iterations, nu):
  """Pillutla et al.'s smoothed Weiszfeld from the weighted mean."""
  alpha = w / w.sum()
  x64 = x.astype(np.float64)
  z, share = alpha @ x64, alpha
  for _ in range(iterations):
    beta = alpha / np.maximum(nu, np.linalg.norm(x64 - z, axis=1))
    share = beta / beta.sum()
    z = share @ x64
  return z, share


def points(m, d=6, seed=0):
  return np.random.default_rng(seed).normal(size=(m, d)).astype(np.float32)


def numpy_of(pair):
  return tuple(t.numpy() for t in pair)


# ---- against the references -------------------------------------------------------------

@pytest.mark.parametrize("m, f", [(7, 1), (10, 3), (5, 0), (4, 3)])  # (4, 3): fewer came than assumed
def test_krum_scores_follow_the_definition(m, f):
  x = points(m, seed=m + f)
  got = rs.krum_scores(rs.squared_distances(tf.constant(x)), f).numpy()
  np.testing.assert_allclose(got, np_scores(x, f), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("m, f", [(7, 1), (10, 3), (9, 2)])
def test_krum_is_the_best_scored_update(m, f):
  x = points(m, seed=m)
  agg, shares = numpy_of(rs.krum(tf.constant(x), tf.ones([m]), f))
  best = int(np.argmin(np_scores(x, f)))
  np.testing.assert_array_equal(agg, x[best])
  np.testing.assert_array_equal(shares, np.eye(m)[best])


def test_krum_by_hand():
  """1-D points 0, 1, 2, 100 with f = 0: two neighbours each; s = 5, 2, 5, 98² + 99²."""
  x = np.array([[0.0], [1.0], [2.0], [100.0]], np.float32)
  np.testing.assert_allclose(rs.krum_scores(rs.squared_distances(tf.constant(x)), 0).numpy(),
                             [5.0, 2.0, 5.0, 98.0 ** 2 + 99.0 ** 2])
  agg, shares = numpy_of(rs.krum(tf.constant(x), tf.ones([4]), 0))
  assert agg.tolist() == [1.0] and shares.tolist() == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("m, f, q, expect_q", [(10, 3, 0, 7), (10, 3, 2, 2), (7, 1, 5, 5), (3, 2, 0, 1)])
def test_multi_krum_averages_the_q_best(m, f, q, expect_q):
  x = points(m, seed=20 + m)
  agg, shares = numpy_of(rs.multi_krum(tf.constant(x), tf.ones([m]), f, q))
  ref, ref_shares = np_multi_krum(x, f, expect_q)
  np.testing.assert_allclose(agg, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(shares, ref_shares, atol=1e-7)


@pytest.mark.parametrize("m, f", [(7, 1), (11, 2), (15, 3), (6, 0), (5, 2)])  # (5, 2): θ, β floor at 1
def test_bulyan_follows_the_definition(m, f):
  x = points(m, d=9, seed=40 + m)
  agg, shares = numpy_of(rs.bulyan(tf.constant(x), tf.ones([m]), f))
  ref, ref_shares = np_bulyan(x, f)
  np.testing.assert_allclose(agg, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(shares, ref_shares, atol=1e-6)
  assert shares.sum() == pytest.approx(1.0, abs=1e-6)


def test_bulyan_by_hand():
  """n = 7, f = 1 in 1-D: Krum takes 0, then the nearest of the rest, until θ = 5 are chosen
  (0, ±0.1, ±0.2); β = 3 closest to their median 0: the mean of -0.1, 0, 0.1."""
  x = np.array([[0.0], [0.1], [-0.1], [0.2], [-0.2], [50.0], [-40.0]], np.float32)
  agg, shares = numpy_of(rs.bulyan(tf.constant(x), tf.ones([7]), 1))
  assert agg[0] == pytest.approx(0.0, abs=1e-7)
  np.testing.assert_allclose(shares, [1 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0], atol=1e-7)


@pytest.mark.parametrize("iterations", [1, 3, 10])
def test_geometric_median_is_smoothed_weiszfeld(iterations):
  x = points(8, seed=3)
  x[2] += 30.0  # one far point
  w = np.array([1, 2, 1, 3, 1, 1, 2, 1], np.float32)
  agg, shares = numpy_of(rs.geometric_median(tf.constant(x), tf.constant(w), iterations, 1e-6))
  ref, ref_shares = np_geometric_median(x, w, iterations, 1e-6)
  np.testing.assert_allclose(agg, ref, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(shares, ref_shares, rtol=1e-4, atol=1e-6)


def test_geometric_median_nears_the_true_one():
  """Enough Weiszfeld steps minimise Σ α_i ‖z − x_i‖: no small move lowers it."""
  x = points(9, d=3, seed=5)
  w = np.ones(9, np.float32)
  z = rs.geometric_median(tf.constant(x), tf.constant(w), 200, 1e-9)[0].numpy().astype(np.float64)
  cost = lambda p: np.linalg.norm(x - p, axis=1).sum()  # noqa: E731
  for step in np.eye(3) * 1e-3:
    assert cost(z) <= min(cost(z + step), cost(z - step)) + 1e-9


def test_geometric_median_smoothing_caps_a_coincident_point():
  """A point on z gets β = α / ν, not a division by zero."""
  x = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], np.float32)
  agg, shares = numpy_of(rs.geometric_median(tf.constant(x), tf.ones([3]), 1, 1e-3))
  ref, ref_shares = np_geometric_median(x, np.ones(3, np.float32), 1, 1e-3)
  assert np.all(np.isfinite(agg))
  np.testing.assert_allclose(shares, ref_shares, rtol=1e-5)


@pytest.mark.parametrize("m", [7, 6])
def test_rank_range_shares_of_the_median(m):
  x = points(m, d=5, seed=m)
  shares = rs.rank_range_shares(tf.constant(x), (m - 1) // 2, m // 2 + 1).numpy()
  ranks = np.argsort(np.argsort(x, axis=0, kind="stable"), axis=0, kind="stable")
  middle = [(m - 1) // 2, m // 2] if m % 2 == 0 else [(m - 1) // 2]
  expected = np.isin(ranks, middle).sum(1) / (len(middle) * x.shape[1])
  np.testing.assert_allclose(shares, expected, atol=1e-7)
  assert shares.sum() == pytest.approx(1.0)


# ---- the assumptions ---------------------------------------------------------------------

@pytest.mark.parametrize("kind, n, top", [("krum", 10, 3), ("multi_krum", 10, 3), ("bulyan", 10, 1),
                                          ("bulyan", 11, 2), ("geometric_median", 10, 4),
                                          ("median", 9, 4), ("trimmed_mean", 10, 2), ("mean", 10, 0)])
def test_each_rule_tolerates_up_to_its_bound(kind, n, top):
  assert rs.largest_f(kind, n) == top
  assert rs.resolve_f(kind, top, n) == top
  with pytest.raises(ValueError, match=rf"^--byzantine_f={top + 1} is not valid: --aggregator={kind} "
                                       rf"assumes .*(n ≥|f = 0)"):
    rs.resolve_f(kind, top + 1, n)


def test_the_message_names_the_requirement_and_the_limit():
  with pytest.raises(ValueError) as e:
    rs.resolve_f("bulyan", 2, 10)
  assert str(e.value) == ("--byzantine_f=2 is not valid: --aggregator=bulyan assumes n ≥ 4f+3 (El Mhamdi "
                          "et al. 2018); with n = 10 clients per round it tolerates f ≤ 1 "
                          "(--clients_per_round / --client_fraction set n).")
  with pytest.raises(ValueError, match=r"n = 2 clients per round is too few even for f = 0"):
    rs.resolve_f("krum", 0, 2)


def test_f_defaults_to_the_rounds_byzantine_clients():
  assert rs.resolve_f("krum", None, 10, 0.3) == 3
  with pytest.raises(ValueError, match=r"--byzantine_f=2 \(from --byzantine_fraction=0.2 of 10\) is not "
                                       r"valid: --aggregator=bulyan"):
    rs.resolve_f("bulyan", None, 10, 0.2)
  # the older aggregators ran under any fraction: only an explicit f is checked for them
  assert rs.resolve_f("mean", None, 10, 0.3) == 3
  assert rs.resolve_f("trimmed_mean", None, 10, 0.4, trim_fraction=0.1) == 4


def test_multi_krum_select_is_at_most_n_minus_f():
  assert rs.resolve_f("multi_krum", 2, 10, multi_krum_select=8) == 2
  with pytest.raises(ValueError, match=r"--multi_krum_select=9 is not valid: choose 1..n − f = 8"):
    rs.resolve_f("multi_krum", 2, 10, multi_krum_select=9)
