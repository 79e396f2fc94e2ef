"""Online REINFORCE policy over a discrete hyper-parameter grid (seed 000, §3.2–3.3).

The server keeps a discrete Gaussian P(h|ψ) over a D-dimensional grid of
hyper-parameters (by default the client learning rate and the number of local
SGD steps). Each round it samples h_t ~ P(·|ψ_t), the clients train with h_t,
the server measures the loss L_{t+1} of the new aggregate model, turns it into
the reward r_t = (L_t − L_{t+1}) / L_t and updates ψ with the causal-baseline
REINFORCE rule of Eq. 7 / Algorithm 1 (lines 15–18).

Normalised grid: `hparam_grid.py` maps each dimension's allowed values to u ⊂ [−0.5, 0.5].

Policy. ψ = {μ ∈ R^D, log_prec ∈ R^D}, A = diag(exp(log_prec)):

    e_j = −½ Σ_d A_d (h_jd − μ_d)²,   log P(h_j|ψ) = e_j − logsumexp_j' e_j'.

This is an exponential family on the grid, so the score is analytic:

    ∂ log P(h_j)/∂μ_d        = A_d (h_jd − μ_d) − E_P[A_d (h_d − μ_d)]
    ∂ log P(h_j)/∂log_prec_d = −½ A_d (h_jd − μ_d)² + ½ E_P[A_d (h_d − μ_d)²].

Update (Eq. 7, Algorithm 1). The window holds the last Z' + 1 = min(Z, t−1) + 1
pairs (r_τ, ∇_ψ log P(h_τ|ψ_τ)); each score is computed when h_τ is sampled, at
ψ_τ. With r̂_t the mean of the valid rewards in the window,

    ψ_{t+1} = ψ_t + η_H Σ_{τ=t−Z'}^{t} (r_τ − r̂_t) ∇_ψ log P(h_τ|ψ_τ).

The seed prints "ψ ← ψ − η_H(…)", but its objective (Eq. 3) is to *maximise*
J_t = E[r_t] and Eq. 4–5 is the gradient of J_t: gradient *ascent* is the
update that does that, so this module ascends (a sign typo in the seed).
Opt-in, not in the seed (``baseline``): "hold" keeps ψ until the window is full,
"detrended" replaces r̂_t by a line fitted through the window's rewards, for the
first rounds where L_t falls fast and the window mean lags the current reward.
After each update μ is clamped to the grid's normalised range per dimension
(seed 000, Fig. 3 caption). As a numerical safeguard (not in the seed)
log_prec is clamped to [LOG_PREC_MIN, LOG_PREC_MAX], i.e. a standard deviation
between ~0.009 and ~20 normalised units; the bound is inactive in normal runs.

Everything that runs per round (`log_probs`, `score`, `sample`,
`record_and_update`, `reward`, `observe_loss`, the real-unit helpers) is pure
TensorFlow on tensors with fixed shapes and no Python state or tf.Variable, so
it can be called inside a ``tff.tensorflow.computation`` or ``tf.function``.
Build-time helpers (`normalized_grid`, `grid_values`, `bounds`,
`initial_state`) return numpy values, which TFF computations may capture.

Intended round of a TFF server (seed derived by the caller from (experiment
seed, round)):

    index, state = sample(state, points, seed)
    h = tf.gather(grid_values(config), index)       # broadcast to clients
    ... clients train, server aggregates, evaluates L_{t+1} ...
    state, r = observe_loss(state, loss_after, config.hyper_lr, bounds(config),
                            config.min_reward)

The raw grid values are float32; integer dimensions (local steps) are cast by
the caller, e.g. ``tf.cast(tf.round(h[1]), tf.int32)``.
"""

from __future__ import annotations

import collections
import math
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.methods.ah.hparam_grid import (Bounds, PolicyConfig, grid_values, normalize,
                                                 normalized_grid, shift_scale)

class PolicyState(NamedTuple):
  """Policy state: a flat structure of fixed-shape tensors (D dims, window Z).

  Attributes:
    mu: [D] f32, μ in normalised units.
    log_prec: [D] f32, log of the diagonal precision A.
    rewards: [Z+1] f32, reward window; the newest entry is last, the valid
      entries are the last ``count``.
    scores: [Z+1, 2D] f32, ∇_ψ log P(h_τ|ψ_τ) aligned with ``rewards``;
      columns [0, D) are ∂/∂μ, [D, 2D) are ∂/∂log_prec.
    count: i32, number of valid window entries, min(t, Z+1) after round t.
    last_index: i32, the grid point sampled this round (−1 before any).
    last_score: [2D] f32, score of ``last_index`` at the ψ it was sampled at.
    last_loss: f32, L_t, the loss of the current aggregate model (NaN if unknown).
    last_reward: f32, the most recent reward (0 before any).
  """

  mu: tf.Tensor
  log_prec: tf.Tensor
  rewards: tf.Tensor
  scores: tf.Tensor
  count: tf.Tensor
  last_index: tf.Tensor
  last_score: tf.Tensor
  last_loss: tf.Tensor
  last_reward: tf.Tensor


# ----------------------------------------------------------------------------
# Build time (numpy).


def initial_state(config: PolicyConfig, initial_loss: float = float("nan")) -> PolicyState:
  """ψ_1 and an empty window (numpy values). ``initial_loss`` is L_1 if known."""
  d, z1 = config.dims, config.window + 1
  if config.init_mu is None:
    mu = np.zeros([d], np.float32)
  else:
    mu = normalize(config, config.init_mu)
  return PolicyState(
      mu=mu,
      log_prec=np.full([d], -2.0 * math.log(config.init_std), np.float32),
      rewards=np.zeros([z1], np.float32),
      scores=np.zeros([z1, 2 * d], np.float32),
      count=np.int32(0),
      last_index=np.int32(-1),
      last_score=np.zeros([2 * d], np.float32),
      last_loss=np.float32(initial_loss),
      last_reward=np.float32(0.0))


# ----------------------------------------------------------------------------
# Per round (pure TF).


def _energies(points, mu, log_prec) -> tuple[tf.Tensor, tf.Tensor]:
  """Unnormalised log-density e_j [N] and A (h_j − μ) [N, D]."""
  points = tf.convert_to_tensor(points, tf.float32)
  prec = tf.exp(tf.convert_to_tensor(log_prec, tf.float32))
  diff = points - tf.convert_to_tensor(mu, tf.float32)[tf.newaxis, :]
  return -0.5 * tf.reduce_sum(prec * tf.square(diff), axis=-1), diff


def log_probs(points, mu, log_prec) -> tf.Tensor:
  """log P(h_j|ψ) for every grid point, [N] (seed 000 §3.3, discrete Gaussian)."""
  e, _ = _energies(points, mu, log_prec)
  return e - tf.reduce_logsumexp(e)


def score(points, mu, log_prec, index) -> tf.Tensor:
  """Analytic ∇_ψ log P(h_index|ψ), [2D] = [∂/∂μ, ∂/∂log_prec] (Eq. 5)."""
  e, diff = _energies(points, mu, log_prec)
  p = tf.nn.softmax(e)
  prec = tf.exp(tf.convert_to_tensor(log_prec, tf.float32))
  d_mu = prec * diff                      # ∂e_j/∂μ, [N, D]
  d_lp = -0.5 * prec * tf.square(diff)    # ∂e_j/∂log_prec, [N, D]
  grads = tf.concat([d_mu, d_lp], axis=-1)
  return tf.gather(grads, index) - tf.linalg.matvec(grads, p, transpose_a=True)


def sample(state: PolicyState, points, seed) -> tuple[tf.Tensor, PolicyState]:
  """Draws h_t ~ P(·|ψ_t) (Algorithm 1, line 4), reproducibly for ``seed``.

  Args:
    state: the policy state.
    points: normalised grid [N, D].
    seed: int tensor of shape [2] (stateless RNG seed), derived by the caller
      from (experiment seed, round).

  Returns:
    (index, state) with the int32 grid index and the state whose
    ``last_index``/``last_score`` hold the sample and its score at ψ_t.
  """
  logits = log_probs(points, state.mu, state.log_prec)[tf.newaxis, :]
  index = tf.random.stateless_categorical(logits, 1, seed=seed, dtype=tf.int32)[0, 0]
  s = score(points, state.mu, state.log_prec, index)
  return index, state._replace(last_index=index, last_score=s)


def reward(loss_before, loss_after, min_reward: Optional[float] = -1.0) -> tf.Tensor:
  """r_t = (L_t − L_{t+1}) / L_t (seed 000 §3.2), guarded.

  0 if L_t is not finite or not > 0 (no relative reduction can be formed);
  ``min_reward`` if L_{t+1} is not finite (divergence; 0 if ``min_reward`` is
  None); otherwise clipped below at ``min_reward`` (if not None).
  """
  lb = tf.cast(loss_before, tf.float32)
  la = tf.cast(loss_after, tf.float32)
  valid_before = tf.logical_and(tf.math.is_finite(lb), lb > 0.0)
  safe_lb = tf.where(valid_before, lb, 1.0)
  safe_la = tf.where(tf.math.is_finite(la), la, 0.0)
  r = (safe_lb - safe_la) / safe_lb
  bad_after = 0.0 if min_reward is None else float(min_reward)
  if min_reward is not None:
    r = tf.maximum(r, float(min_reward))
  r = tf.where(tf.math.is_finite(la), r, bad_after)
  return tf.where(valid_before, r, 0.0)


def baseline_values(rewards, count, kind: str = "mean") -> tf.Tensor:
  """r̂ for every window entry, [Z+1] (0 outside the ``count`` valid, newest, entries).

  "mean"/"hold": r̂_t of eq. 7, the mean of the valid rewards, for every entry.
  "detrended": r̂_τ = a + b·τ, the least-squares line through the valid (τ, r_τ), so a
  reward that only falls (or rises) with t gives no advantage; with fewer than 3
  valid entries the line passes through them all and the update is 0.
  """
  rewards = tf.cast(rewards, tf.float32)
  size = tf.shape(rewards)[0]
  valid = tf.cast(tf.range(size) >= size - count, tf.float32)
  n = tf.maximum(tf.cast(count, tf.float32), 1.0)
  mean_r = tf.reduce_sum(valid * rewards) / n
  if kind != "detrended":
    return valid * mean_r
  tau = tf.cast(tf.range(size), tf.float32)
  mean_tau = tf.reduce_sum(valid * tau) / n
  dt = valid * (tau - mean_tau)
  slope = tf.math.divide_no_nan(tf.reduce_sum(dt * (rewards - mean_r)), tf.reduce_sum(dt * dt))
  return valid * (mean_r + slope * (tau - mean_tau))


def record_and_update(state: PolicyState, reward_t, hyper_lr, clamp: Bounds,
                      baseline_kind: str = "mean") -> PolicyState:
  """Pushes (r_t, score of h_t at ψ_t) into the window and applies Eq. 7 (ascent).

  ψ_{t+1} = ψ_t + η_H Σ_{valid τ} (r_τ − r̂_τ) ∇_ψ log P(h_τ|ψ_τ), r̂ from
  `baseline_values` (eq. 7 for "mean": the mean of the valid rewards, Algorithm 1
  lines 16–18 with Z' = min(Z, t−1); "hold" leaves ψ unchanged until the window
  holds Z + 1 rewards); then μ and log_prec are clamped to ``clamp``. The seed's
  "ψ − η_H" is a sign typo: the objective (Eq. 3) is maximised. A non-finite
  reward is recorded as 0.
  """
  r = tf.cast(reward_t, tf.float32)
  r = tf.where(tf.math.is_finite(r), r, 0.0)
  rewards = tf.concat([state.rewards[1:], r[tf.newaxis]], axis=0)
  scores = tf.concat([state.scores[1:], state.last_score[tf.newaxis, :]], axis=0)
  size = tf.shape(rewards)[0]
  count = tf.minimum(state.count + 1, size)
  valid = tf.cast(tf.range(size) >= size - count, tf.float32)
  weights = valid * (rewards - baseline_values(rewards, count, baseline_kind))
  if baseline_kind == "hold":
    weights *= tf.cast(count >= size, tf.float32)
  step = tf.cast(hyper_lr, tf.float32) * tf.linalg.matvec(scores, weights, transpose_a=True)
  d = tf.shape(state.mu)[0]
  mu = tf.clip_by_value(state.mu + step[:d], clamp.mu_lo, clamp.mu_hi)
  log_prec = tf.clip_by_value(state.log_prec + step[d:], clamp.log_prec_lo, clamp.log_prec_hi)
  return state._replace(mu=mu, log_prec=log_prec, rewards=rewards, scores=scores,
                        count=count, last_reward=r)


def observe_loss(state: PolicyState, loss_after, hyper_lr, clamp: Bounds,
                 min_reward: Optional[float] = -1.0,
                 baseline_kind: str = "mean") -> tuple[PolicyState, tf.Tensor]:
  """End of round: r_t from (state.last_loss, L_{t+1}), Eq. 7 update, last_loss ← L_{t+1}.

  If ``state.last_loss`` (L_t) is unknown (non-finite), the round only records
  L_{t+1}: no reward is pushed and ψ is unchanged. Returns (state, r_t).
  """
  la = tf.cast(loss_after, tf.float32)
  r = reward(state.last_loss, la, min_reward)
  known = tf.math.is_finite(state.last_loss)
  updated = record_and_update(state, r, hyper_lr, clamp, baseline_kind)
  new_state = tf.nest.map_structure(lambda u, s: tf.where(known, u, s), updated,
                                    tf.nest.map_structure(tf.convert_to_tensor, state))
  return new_state._replace(last_loss=la), r


def baseline(state: PolicyState, kind: str = "mean") -> tf.Tensor:
  """r̂ of the newest window entry (eq. 7: the mean of the valid rewards; 0 if empty)."""
  return baseline_values(state.rewards, state.count, kind)[-1]


# ----------------------------------------------------------------------------
# Real units, for metrics (pure TF; config is static).


def to_real_units(config: PolicyConfig, normalized_values) -> tf.Tensor:
  """Normalised values [..., D] to raw units: g = u·scale + shift, 10**g on log dims."""
  shift, scale = shift_scale(config)
  is_log = tf.constant(config.log_scale)
  g = tf.cast(normalized_values, tf.float64) * scale + shift
  real = tf.where(is_log, tf.pow(tf.constant(10.0, tf.float64), tf.where(is_log, g, 0.0)), g)
  return tf.cast(real, tf.float32)


def marginal_stats(config: PolicyConfig, mu, log_prec) -> tuple[tf.Tensor, tf.Tensor]:
  """Mean and std [D] of each dimension's marginal of P(h|ψ) over the grid, in raw units."""
  p = tf.cast(tf.exp(log_probs(normalized_grid(config), mu, log_prec)), tf.float64)
  raw = tf.constant(grid_values(config), tf.float64)
  mean = tf.linalg.matvec(raw, p, transpose_a=True)
  var = tf.linalg.matvec(tf.square(raw - mean[tf.newaxis, :]), p, transpose_a=True)
  return tf.cast(mean, tf.float32), tf.cast(tf.sqrt(tf.maximum(var, 0.0)), tf.float32)


def policy_metrics(config: PolicyConfig, state: PolicyState) -> collections.OrderedDict:
  """Scalars for logging: per dimension ``<name>_mu`` (μ in raw units, e.g.
  10**μ for the learning rate), ``<name>_mean`` and ``<name>_std`` (marginal of
  P over the grid, raw units), ``<name>_sigma`` (1/sqrt(A) in normalised units);
  plus ``reward`` (last r_t) and ``reward_baseline`` (r̂)."""
  mu_real = to_real_units(config, state.mu)
  mean, std = marginal_stats(config, state.mu, state.log_prec)
  sigma = tf.exp(-0.5 * tf.cast(state.log_prec, tf.float32))
  out = collections.OrderedDict()
  for p, name in enumerate(config.names):
    out[f"{name}_mu"] = mu_real[p]
    out[f"{name}_mean"] = mean[p]
    out[f"{name}_std"] = std[p]
    out[f"{name}_sigma"] = sigma[p]
  out["reward"] = tf.cast(state.last_reward, tf.float32)
  out["reward_baseline"] = baseline(state, config.baseline)
  return out
