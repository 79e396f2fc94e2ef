"""Tests for the online REINFORCE hyper-parameter policy (seed 000, §3.2–3.3, Eq. 7)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms.methods.ah import hparam_grid
from tff_robust.algorithms.methods.ah import reinforce as rf


def _tensors(state):
  return tf.nest.map_structure(tf.convert_to_tensor, state)


def _np_log_probs(points, mu, log_prec):
  """Discrete Gaussian on the grid, written out in numpy."""
  a = np.exp(np.asarray(log_prec, np.float64))
  e = -0.5 * np.sum(a * (points.astype(np.float64) - mu) ** 2, axis=1)
  e = e - e.max()
  return e - np.log(np.exp(e).sum())


def _np_score(points, mu, log_prec, j):
  """Score of the exponential family, sufficient statistics written out in numpy."""
  a = np.exp(np.asarray(log_prec, np.float64))
  diff = points.astype(np.float64) - mu
  p = np.exp(_np_log_probs(points, mu, log_prec))
  g = np.concatenate([a * diff, -0.5 * a * diff ** 2], axis=1)
  return g[j] - p @ g


# ----------------------------------------------------------------------------
# Grid and config.


def test_default_grid_normalisation():
  cfg = hparam_grid.PolicyConfig()
  axes = hparam_grid.normalized_axes(cfg)
  for u in axes:
    assert abs(u.mean()) < 1e-6
    assert np.abs(u).max() == pytest.approx(0.5, abs=1e-6)
    assert np.all(np.diff(u) > 0)
  # Learning rate is normalised in log10 space: u differences ∝ log10 ratios.
  lr = np.log10(hparam_grid.DEFAULT_LR_GRID)
  np.testing.assert_allclose(np.diff(axes[0]) / np.diff(axes[0])[0], np.diff(lr) / np.diff(lr)[0],
                             rtol=1e-5)
  # Steps, also in log10 space by default (as config.AHConfig): log2 steps 0..4 of 5 -> (i − 2) / 4.
  np.testing.assert_allclose(axes[1], (np.arange(5) - 2.0) / 4.0, atol=1e-6)
  assert hparam_grid.PolicyConfig().log_scale == (True, True)
  pts, raw = hparam_grid.normalized_grid(cfg), hparam_grid.grid_values(cfg)
  assert pts.shape == (30, 2) and raw.shape == (30, 2) and pts.dtype == np.float32
  # C order: index = i_lr * 5 + i_steps.
  assert tuple(raw[2 * 5 + 3]) == pytest.approx((0.01, 40.0))
  assert tuple(pts[2 * 5 + 3]) == pytest.approx((axes[0][2], axes[1][3]))
  np.testing.assert_allclose(rf.to_real_units(cfg, pts).numpy(), raw, rtol=1e-5)
  np.testing.assert_allclose(hparam_grid.normalize(cfg, raw), pts, atol=1e-6)


@pytest.mark.parametrize("grid", [(1.0, 2.0, 10.0), (-3.0, 0.0, 0.5, 7.0), (4.0,)])
def test_asymmetric_and_singleton_grids_zero_mean_inside_range(grid):
  cfg = hparam_grid.PolicyConfig(grids=(grid,), log_scale=(False,))
  u = hparam_grid.normalized_axes(cfg)[0]
  assert abs(u.mean()) < 1e-6
  assert np.abs(u).max() <= 0.5 + 1e-7
  if len(grid) > 1:
    assert np.abs(u).max() == pytest.approx(0.5)
  b = hparam_grid.bounds(cfg)
  assert b.mu_lo[0] == u.min() and b.mu_hi[0] == u.max()


@pytest.mark.parametrize("kwargs, match", [
    (dict(grids=((0.1, 0.01), (5.0, 10.0))), "--ah_lr_grid"),
    (dict(grids=((0.0, 0.1), (5.0, 10.0))), "--ah_lr_grid"),
    (dict(grids=((0.01, 0.1), ())), "--ah_steps_grid"),
    (dict(grids=((0.01, float("nan")), (5.0,))), "--ah_lr_grid"),
    (dict(window=0), "--ah_window"),
    (dict(window=2.5), "--ah_window"),
    (dict(hyper_lr=-0.1), "--ah_hyper_lr"),
    (dict(init_std=0.0), "--ah_init_std"),
    (dict(init_mu=(1.0, 20.0)), "--ah_init_lr"),
    (dict(init_mu=(0.01,)), "--ah_init_mu"),
    (dict(log_scale=(True,)), "log_scale"),
    (dict(names=("a", "a")), "names"),
    (dict(grids=()), "grids"),
])
def test_config_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    hparam_grid.PolicyConfig(**kwargs)


def test_initial_state_raw_init_mu_and_std():
  cfg = hparam_grid.PolicyConfig(init_mu=(0.01, 20.0), init_std=0.5)
  st = rf.initial_state(cfg, initial_loss=2.0)
  np.testing.assert_allclose(st.mu, hparam_grid.normalize(cfg, (0.01, 20.0)))
  np.testing.assert_allclose(st.log_prec, [-2 * math.log(0.5)] * 2, rtol=1e-6)
  assert st.rewards.shape == (6,) and st.scores.shape == (6, 4)
  assert st.count == 0 and st.last_index == -1 and st.last_loss == 2.0
  np.testing.assert_allclose(rf.to_real_units(cfg, st.mu).numpy(), [0.01, 20.0], rtol=1e-5)
  np.testing.assert_array_equal(rf.initial_state(hparam_grid.PolicyConfig()).mu, [0.0, 0.0])


# ----------------------------------------------------------------------------
# Distribution, sampling, score.


@pytest.mark.parametrize("mu, log_prec", [((0.0, 0.0), (2.77, 2.77)), ((0.4, -0.2), (0.5, 4.0))])
def test_log_probs_normalised_and_match_formula(mu, log_prec):
  pts = hparam_grid.normalized_grid(hparam_grid.PolicyConfig())
  lp = rf.log_probs(pts, np.float32(mu), np.float32(log_prec)).numpy()
  assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)
  np.testing.assert_allclose(lp, _np_log_probs(pts, np.array(mu), np.array(log_prec)), atol=1e-4)


def test_sampling_frequencies_match_probabilities_and_are_reproducible():
  cfg = hparam_grid.PolicyConfig(init_mu=(0.03, 10.0), init_std=0.3)
  pts = hparam_grid.normalized_grid(cfg)
  st = _tensors(rf.initial_state(cfg))
  n = 20000
  seeds = tf.stack([tf.fill([n], 7), tf.range(n)], axis=1)

  @tf.function
  def draw(seeds):
    return tf.map_fn(lambda s: rf.sample(st, pts, s)[0], seeds, fn_output_signature=tf.int32,
                     parallel_iterations=64)

  idx = draw(seeds).numpy()
  freq = np.bincount(idx, minlength=len(pts)) / n
  p = np.exp(_np_log_probs(pts, st.mu.numpy(), st.log_prec.numpy()))
  # Binomial std <= sqrt(0.25 / 20000) = 0.0035; 0.012 is > 3.4 sigma for every cell.
  assert np.abs(freq - p).max() < 0.012
  # Chi-square with 29 dof: the 0.999 quantile is 58.3.
  expected = p * n
  assert np.sum((freq * n - expected) ** 2 / expected) < 58.3
  # Same seed -> same index; the seed matters.
  again = draw(seeds[:200]).numpy()
  np.testing.assert_array_equal(again, idx[:200])
  other = draw(tf.stack([tf.fill([200], 8), tf.range(200)], axis=1)).numpy()
  assert np.any(other != idx[:200])


@pytest.mark.parametrize("mu, log_prec", [((0.0, 0.0), (2.77, 2.77)), ((0.31, -0.25), (1.2, 3.3))])
def test_analytic_score_matches_gradient_tape(mu, log_prec):
  pts = hparam_grid.normalized_grid(hparam_grid.PolicyConfig())
  for j in (0, 7, 13, 29):
    mu_v = tf.constant(mu, tf.float32)
    lp_v = tf.constant(log_prec, tf.float32)
    with tf.GradientTape() as tape:
      tape.watch([mu_v, lp_v])
      target = rf.log_probs(pts, mu_v, lp_v)[j]
    g_mu, g_lp = tape.gradient(target, [mu_v, lp_v])
    s = rf.score(pts, mu_v, lp_v, tf.constant(j)).numpy()
    np.testing.assert_allclose(s, np.concatenate([g_mu.numpy(), g_lp.numpy()]), atol=1e-4)
    np.testing.assert_allclose(s, _np_score(pts, np.array(mu), np.array(log_prec), j), atol=1e-4)


def test_sample_stores_index_and_score_at_current_psi():
  cfg = hparam_grid.PolicyConfig(init_mu=(0.1, 40.0))
  pts = hparam_grid.normalized_grid(cfg)
  st0 = _tensors(rf.initial_state(cfg))
  idx, st = rf.sample(st0, pts, tf.constant([3, 4]))
  assert st.last_index.numpy() == idx.numpy()
  np.testing.assert_allclose(st.last_score.numpy(),
                             _np_score(pts, st0.mu.numpy(), st0.log_prec.numpy(), int(idx)), atol=1e-4)
  np.testing.assert_array_equal(st.mu.numpy(), st0.mu.numpy())


# ----------------------------------------------------------------------------
# Reward and Eq. 7.


def test_reward_and_guards():
  assert float(rf.reward(2.0, 1.5)) == pytest.approx(0.25)
  assert float(rf.reward(2.0, 2.5)) == pytest.approx(-0.25)
  assert float(rf.reward(2.0, 100.0)) == pytest.approx(-1.0)           # clipped at min_reward
  assert float(rf.reward(2.0, 100.0, min_reward=None)) == pytest.approx(-49.0)
  assert float(rf.reward(0.0, 1.0)) == 0.0
  assert float(rf.reward(float("nan"), 1.0)) == 0.0
  assert float(rf.reward(float("inf"), 1.0)) == 0.0
  assert float(rf.reward(2.0, float("nan"))) == -1.0
  assert float(rf.reward(2.0, float("inf"), min_reward=None)) == 0.0


def test_update_matches_numpy_eq7_with_window_wraparound():
  """Six rounds with Z = 2: the window fills (Z' = 0, 1, 2) and then slides."""
  cfg = hparam_grid.PolicyConfig(window=2, hyper_lr=0.4, init_mu=(0.1, 40.0), init_std=0.3)
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  st = _tensors(rf.initial_state(cfg))
  rewards = [0.10, -0.05, 0.30, 0.02, -0.20, 0.15]
  mu, lp = st.mu.numpy().astype(np.float64), st.log_prec.numpy().astype(np.float64)
  window = []
  for t, r in enumerate(rewards):
    idx, st = rf.sample(st, pts, tf.constant([11, t]))
    window.append((r, _np_score(pts, mu, lp, int(idx))))   # score at ψ_τ, before the update
    window = window[-(cfg.window + 1):]                     # Z' + 1 = min(Z, t − 1) + 1 entries
    r_hat = np.mean([w[0] for w in window])
    step = cfg.hyper_lr * sum((w[0] - r_hat) * w[1] for w in window)   # ascent
    mu = np.clip(mu + step[:2], b.mu_lo, b.mu_hi)
    lp = np.clip(lp + step[2:], b.log_prec_lo, b.log_prec_hi)
    st = rf.record_and_update(st, tf.constant(r), cfg.hyper_lr, b)
    assert int(st.count) == len(window) == min(t + 1, cfg.window + 1)
    assert float(rf.baseline(st)) == pytest.approx(r_hat, abs=1e-6)
    np.testing.assert_allclose(st.mu.numpy(), mu, atol=1e-4)
    np.testing.assert_allclose(st.log_prec.numpy(), lp, atol=1e-4)
    np.testing.assert_allclose(st.rewards.numpy()[-len(window):], [w[0] for w in window], atol=1e-7)
    if t == 0:   # a single window entry is its own baseline: no update
      np.testing.assert_allclose(mu, rf.initial_state(cfg).mu, atol=1e-7)
  assert not np.allclose(mu, rf.initial_state(cfg).mu)


@pytest.mark.parametrize("kind", ["hold", "detrended"])
def test_opt_in_baselines_match_numpy(kind):
  """Eq. 7's update with the opt-in baselines, six rounds, Z = 3, against numpy:
  hold: ψ unchanged until the window holds Z + 1 rewards, then eq. 7;
  detrended: r̂_τ = the least-squares line through the window's (τ, r_τ) (np.polyfit)."""
  cfg = hparam_grid.PolicyConfig(window=3, hyper_lr=0.4, init_mu=(0.1, 40.0), init_std=0.3, baseline=kind)
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  st = _tensors(rf.initial_state(cfg))
  rewards = [0.40, 0.25, 0.21, 0.12, 0.09, 0.02]
  mu, lp = st.mu.numpy().astype(np.float64), st.log_prec.numpy().astype(np.float64)
  window = []
  for t, r in enumerate(rewards):
    idx, st = rf.sample(st, pts, tf.constant([5, t]))
    window = (window + [(r, _np_score(pts, mu, lp, int(idx)))])[-(cfg.window + 1):]
    rs = np.array([w[0] for w in window])
    if kind == "hold":
      r_hat = np.full(len(rs), rs.mean()) if len(rs) == cfg.window + 1 else rs  # held: no step
    elif len(rs) >= 2:
      tau = np.arange(len(rs), dtype=np.float64)
      r_hat = np.polyval(np.polyfit(tau, rs, 1), tau)
    else:
      r_hat = rs
    step = cfg.hyper_lr * sum((ri - hi) * w[1] for ri, hi, w in zip(rs, r_hat, window))
    mu = np.clip(mu + step[:2], b.mu_lo, b.mu_hi)
    lp = np.clip(lp + step[2:], b.log_prec_lo, b.log_prec_hi)
    st = rf.record_and_update(st, tf.constant(r), cfg.hyper_lr, b, kind)
    np.testing.assert_allclose(st.mu.numpy(), mu, atol=1e-4)
    np.testing.assert_allclose(st.log_prec.numpy(), lp, atol=1e-4)
    if kind == "detrended" and len(rs) >= 2:
      assert float(rf.baseline(st, kind)) == pytest.approx(r_hat[-1], abs=1e-5)
    if t < (cfg.window if kind == "hold" else 2):   # held / a line through ≤ 2 points
      np.testing.assert_allclose(mu, rf.initial_state(cfg).mu, atol=1e-7)
  assert not np.allclose(mu, rf.initial_state(cfg).mu)


def test_detrended_baseline_ignores_a_linear_reward_trend():
  """A reward that falls linearly with t and does not depend on h: eq. 7's window mean lags
  it and moves μ; the detrended baseline leaves ψ where it started."""
  rewards = 0.3 - 0.02 * np.arange(12)
  moved = {}
  for kind in ("mean", "detrended"):
    cfg = hparam_grid.PolicyConfig(window=5, hyper_lr=0.05, baseline=kind)
    pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
    st = _tensors(rf.initial_state(cfg))
    for t, r in enumerate(rewards):
      _, st = rf.sample(st, pts, tf.constant([3, t]))
      st = rf.record_and_update(st, tf.constant(r, tf.float32), cfg.hyper_lr, b, kind)
    moved[kind] = np.abs(np.concatenate([st.mu.numpy(), st.log_prec.numpy() - 2 * math.log(4)])).max()
  assert moved["detrended"] < 1e-5
  assert moved["mean"] > 1e-3


def test_positive_advantage_action_gains_probability():
  """Ascent, not the seed's printed descent: the better action becomes more likely."""
  cfg = hparam_grid.PolicyConfig(window=1, hyper_lr=0.05)
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  st = _tensors(rf.initial_state(cfg))
  good, bad = 29, 0   # opposite corners
  p0 = np.exp(rf.log_probs(pts, st.mu, st.log_prec).numpy())
  for j, r in ((bad, -0.05), (good, 0.05)):
    st = st._replace(last_index=tf.constant(j),
                     last_score=rf.score(pts, st.mu, st.log_prec, tf.constant(j)))
    st = rf.record_and_update(st, r, cfg.hyper_lr, b)
  p1 = np.exp(rf.log_probs(pts, st.mu, st.log_prec).numpy())
  assert p1[good] > p0[good] * 1.05
  assert p1[bad] < p0[bad] / 1.05
  assert np.all(st.mu.numpy() > 0)   # μ moved towards the good corner


def test_mu_is_clamped_to_grid_range():
  cfg = hparam_grid.PolicyConfig(window=1, hyper_lr=10.0)
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  st = _tensors(rf.initial_state(cfg))
  for j, r in ((0, -1.0), (29, 1.0), (29, 1.0)):
    st = st._replace(last_index=tf.constant(j),
                     last_score=rf.score(pts, st.mu, st.log_prec, tf.constant(j)))
    st = rf.record_and_update(st, r, cfg.hyper_lr, b)
  np.testing.assert_array_equal(st.mu.numpy(), b.mu_hi)
  np.testing.assert_allclose(b.mu_hi, [0.5, 0.5])
  assert np.all(st.log_prec.numpy() <= hparam_grid.LOG_PREC_MAX)
  assert np.all(st.log_prec.numpy() >= hparam_grid.LOG_PREC_MIN)


def test_observe_loss_skips_unknown_first_loss_then_updates():
  cfg = hparam_grid.PolicyConfig(window=2, hyper_lr=0.5)
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  st = _tensors(rf.initial_state(cfg))   # L_1 unknown (NaN)
  _, st = rf.sample(st, pts, tf.constant([0, 0]))
  st1, r = rf.observe_loss(st, 2.0, cfg.hyper_lr, b)
  assert float(r) == 0.0 and int(st1.count) == 0 and float(st1.last_loss) == 2.0
  np.testing.assert_array_equal(st1.mu.numpy(), st.mu.numpy())
  for t, loss in enumerate((1.5, 1.4, 1.6)):
    _, st1 = rf.sample(st1, pts, tf.constant([0, t + 1]))
    expected = rf.record_and_update(st1, rf.reward(st1.last_loss, loss), cfg.hyper_lr, b)
    st2, r = rf.observe_loss(st1, loss, cfg.hyper_lr, b)
    assert float(r) == pytest.approx((float(st1.last_loss) - loss) / float(st1.last_loss))
    np.testing.assert_allclose(st2.mu.numpy(), expected.mu.numpy(), atol=1e-7)
    np.testing.assert_allclose(st2.log_prec.numpy(), expected.log_prec.numpy(), atol=1e-7)
    assert float(st2.last_loss) == pytest.approx(loss) and int(st2.count) == t + 1
    st1 = st2
  assert not np.allclose(st1.mu.numpy(), st.mu.numpy())


# ----------------------------------------------------------------------------
# Toy bandits, run in graph mode.


@functools.lru_cache(maxsize=None)
def _bandit_round(cfg, target_raw):
  """One bandit round, traced once per (config, target): the seeds of a test share it."""
  pts, b = hparam_grid.normalized_grid(cfg), hparam_grid.bounds(cfg)
  target = hparam_grid.normalize(cfg, target_raw)

  @tf.function
  def one_round(state, s):
    _, state = rf.sample(state, pts, s)
    h = tf.gather(pts, state.last_index)
    noise = tf.random.stateless_normal([], seed=tf.reverse(s, [0]), stddev=0.01)
    r = 0.05 - 0.1 * tf.norm(h - target) + noise   # relative-loss-reduction scale
    return rf.record_and_update(state, r, cfg.hyper_lr, b)

  return one_round, target, b


def _bandit(cfg, target_raw, rounds, seed):
  one_round, target, b = _bandit_round(cfg, tuple(target_raw))
  st = _tensors(rf.initial_state(cfg))
  traj = []
  for t in range(rounds):
    st = one_round(st, tf.constant([seed, t]))
    traj.append(st.mu.numpy())
  return np.array(traj), target, b, st


@pytest.mark.parametrize("seed", [0, 1])
def test_bandit_corner_target_reached_and_mu_stays_in_range(seed):
  cfg = hparam_grid.PolicyConfig(init_mu=(0.3, 80.0))   # default hyper_lr, window, init_std
  traj, target, b, _ = _bandit(cfg, (0.001, 5.0), 300, seed)
  assert np.all(traj >= b.mu_lo) and np.all(traj <= b.mu_hi)
  err = np.abs(traj - target).max(axis=1)
  assert np.any(err[:150] < 0.1)      # reached (one grid spacing is >= 0.05 here)
  assert err[-100:].max() < 0.1       # and stays


def test_bandit_interior_target_on_symmetric_grid():
  # Linear, equally spaced grids: by symmetry E[r] is maximised at μ = target = 0.
  cfg = hparam_grid.PolicyConfig(grids=((1.0, 2.0, 3.0, 4.0, 5.0), (10.0, 20.0, 30.0, 40.0, 50.0)),
                        log_scale=(False, False), init_mu=(1.0, 10.0))
  traj, target, _, st = _bandit(cfg, (3.0, 30.0), 300, 0)
  np.testing.assert_allclose(target, [0.0, 0.0])
  assert np.abs(traj[0]).min() > 0.4
  assert np.abs(traj[-150:].mean(axis=0)).max() < 0.08
  p = np.exp(rf.log_probs(hparam_grid.normalized_grid(cfg), st.mu, st.log_prec).numpy())
  assert p.argmax() == 12   # the centre point (2, 2) in C order


# ----------------------------------------------------------------------------
# Metrics in real units.


def test_policy_metrics_real_units():
  cfg = hparam_grid.PolicyConfig(init_mu=(0.01, 20.0), init_std=0.25)
  st = _tensors(rf.initial_state(cfg))
  m = rf.policy_metrics(cfg, st)
  assert float(m["lr_mu"]) == pytest.approx(0.01, rel=1e-5)
  assert float(m["steps_mu"]) == pytest.approx(20.0, rel=1e-5)
  assert float(m["lr_sigma"]) == pytest.approx(0.25, rel=1e-5)
  p = np.exp(_np_log_probs(hparam_grid.normalized_grid(cfg), st.mu.numpy(), st.log_prec.numpy()))
  raw = hparam_grid.grid_values(cfg).astype(np.float64)
  mean = p @ raw
  std = np.sqrt(p @ (raw - mean) ** 2)
  np.testing.assert_allclose([float(m["lr_mean"]), float(m["steps_mean"])], mean, rtol=1e-4)
  np.testing.assert_allclose([float(m["lr_std"]), float(m["steps_std"])], std, rtol=1e-4)
  # A very concentrated policy: marginal mean = the grid value at μ, std ~ 0.
  sharp = st._replace(log_prec=tf.constant([9.0, 9.0]))
  mean, std = rf.marginal_stats(cfg, sharp.mu, sharp.log_prec)
  np.testing.assert_allclose(mean.numpy(), [0.01, 20.0], rtol=1e-4)
  assert np.all(std.numpy() < 1e-3 * np.array([0.01, 20.0]))


def test_tff_computation_round_trip(tff_rt):
  """The state is a TFF-typeable structure and a round runs in a tff.tensorflow.computation."""
  import tensorflow_federated as tff
  cfg = hparam_grid.PolicyConfig(window=3)
  pts, raw, b = hparam_grid.normalized_grid(cfg), hparam_grid.grid_values(cfg), hparam_grid.bounds(cfg)
  state0 = rf.initial_state(cfg, initial_loss=2.0)
  state_type = tff.types.to_type(
      rf.PolicyState(*[tff.TensorType(np.asarray(v).dtype, np.shape(v)) for v in state0]))

  @tff.tensorflow.computation(state_type, np.int32, np.float32)
  def server_round(state, round_num, loss_after):
    seed = tf.stack([tf.constant(5, tf.int32), round_num])
    index, state = rf.sample(state, pts, seed)
    hparams = tf.gather(raw, index)
    state, r = rf.observe_loss(state, loss_after, cfg.hyper_lr, b)
    return state, hparams, r

  st = state0
  for t, loss in enumerate((1.8, 1.7, 1.75, 1.5, 1.4)):
    st, hparams, r = server_round(st, t, loss)
    assert np.isclose(hparams[0], cfg.grids[0], rtol=1e-6).any()
    assert np.isclose(hparams[1], cfg.grids[1]).any()
  assert isinstance(st, rf.PolicyState)
  assert st.rewards.shape == (4,) and int(st.count) == 4
  np.testing.assert_allclose(st.rewards, [0.1 / 1.8, -0.05 / 1.7, 0.25 / 1.75, 0.1 / 1.5], rtol=1e-5)
  assert float(st.last_loss) == pytest.approx(1.4)
