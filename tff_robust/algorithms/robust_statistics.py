"""Byzantine-robust statistics of a round's client updates, and the number of byzantine clients
f each one tolerates.

The rules are TF functions of the stacked updates X ∈ R^{m×D} (row i: client i's update,
flattened; the m ≥ 1 clients with weight > 0) and their weights w ∈ R^m. Each returns the
aggregate ∈ R^D and the clients' *shares* ∈ R^m: client i's coefficient in the aggregate,
averaged over the D coordinates (they sum to 1); `client_metrics` reports it as the weight given.

* ``krum`` (Blanchard et al. 2017, "Machine Learning with Adversaries: Byzantine Tolerant
  Gradient Descent", Sec. 4): the score s(i) = Σ_{j ∈ N_i} ‖x_i − x_j‖² over the n − f − 2
  updates N_i nearest to x_i; the output is x_{i*}, i* = argmin_i s(i) (the lowest index on a
  tie). Assumes n ≥ 2f + 3.
* ``multi_krum`` (ibid., Sec. 5): the mean of the q updates with the smallest scores
  (q = ``--multi_krum_select``; 0 means n − f). Assumes n ≥ 2f + 3.
* ``bulyan`` (El Mhamdi et al. 2018, "The Hidden Vulnerability of Distributed Learning in
  Byzantium", Sec. 4): θ = n − 2f updates chosen one at a time by Krum over the updates not yet
  chosen (scores recomputed over those, with the same f); then, per coordinate, the mean of the
  β = θ − 2f chosen values closest to their median. Assumes n ≥ 4f + 3.
* ``geometric_median`` (Pillutla et al. 2022, "Robust Aggregation for Federated Learning", RFA):
  the smoothed Weiszfeld iteration from the weighted mean z = Σ α_i x_i, α_i = w_i / Σ w:
  R times β_i = α_i / max(ν, ‖z − x_i‖), z = Σ β_i x_i / Σ β_i (fixed R, ``--rfa_iterations``;
  ν = ``--rfa_nu``). Breakdown point 1/2: assumes n ≥ 2f + 1. R = 10 by default: RFA counts
  each step as a round of secure aggregation and stops after a few; here the server holds the
  stack and a step costs O(mD) server time. Started from the mean, with 4 of 10 updates
  sign-flipped or scaled ×10, 3 steps end 2–7 times as far from the honest mean as one honest
  update lies, 10 steps converge (the setting of tests/algorithms/test_stacked_aggregation.py).
* ``median`` and ``trimmed_mean`` (`aggregation`): n ≥ 2f + 1, and ⌊βn⌋ ≥ f for the trimmed
  mean (its trimming removes f values at each end). The mean and norm clipping tolerate none.

The assumptions are on n = the clients per round, and checked before anything is traced
(`resolve_f`). A round may bring fewer (dropout; non-finite updates are excluded before the
rule): with m < n the rules shrink their counts instead of failing — Krum's neighbours
k = min(max(m − f − 2, 1), m − 1), q ≤ m, θ = max(m − 2f, 1), β = max(θ − 2f, 1).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from tff_robust.algorithms import attacks
from tff_robust.common import options

# The rules of this module (`aggregation.AGGREGATORS` lists them after its own).
RULES = ("krum", "multi_krum", "bulyan", "geometric_median")
# The rules that read f; for the others f is only an assumption to check.
USES_F = ("krum", "multi_krum", "bulyan")
# What each aggregator assumes of n clients per round and f byzantine ones.
ASSUMPTIONS = {
    "mean": "f = 0 (the mean tolerates no byzantine client)",
    "norm_clip": "f = 0 (clipping bounds a byzantine client's effect but does not remove it)",
    "median": "n ≥ 2f+1 (Yin et al. 2018)",
    "trimmed_mean": "n ≥ 2f+1 and ⌊βn⌋ ≥ f, β = --trim_fraction (Yin et al. 2018)",
    "krum": "n ≥ 2f+3 (Blanchard et al. 2017)",
    "multi_krum": "n ≥ 2f+3 (Blanchard et al. 2017)",
    "bulyan": "n ≥ 4f+3 (El Mhamdi et al. 2018)",
    "geometric_median": "n ≥ 2f+1 (breakdown point 1/2; Pillutla et al. 2022)",
}


def tolerates(kind: str, n: int, f: int, trim_fraction: float = 0.2) -> bool:
  """Whether aggregator ``kind`` with ``n`` clients per round holds its assumption for ``f``."""
  if kind in ("mean", "norm_clip"):
    return f == 0
  if kind in ("krum", "multi_krum"):
    return n >= 2 * f + 3
  if kind == "bulyan":
    return n >= 4 * f + 3
  if kind == "trimmed_mean":
    return n >= 2 * f + 1 and int(trim_fraction * n) >= f
  return n >= 2 * f + 1  # median, geometric_median


def largest_f(kind: str, n: int, trim_fraction: float = 0.2) -> int:
  """The most byzantine clients ``kind`` tolerates with ``n`` clients per round (-1: not even 0)."""
  f = -1
  while f + 1 <= n and tolerates(kind, n, f + 1, trim_fraction):
    f += 1
  return f


def resolve_f(kind: str, f: Optional[int], n: int, byzantine_fraction: float = 0.0, *,
              trim_fraction: float = 0.2, multi_krum_select: int = 0) -> int:
  """The f the aggregator assumes, checked against its assumption with ``n`` clients per round.

  ``f`` None: the round's byzantine clients, round(``byzantine_fraction`` · n), and only the
  rules of this module are checked (the older aggregators ran with any fraction). An explicit
  ``f`` is checked for every aggregator. Raises ValueError naming the flag, the value and the
  requirement.
  """
  given = f is not None
  value = int(f) if given else attacks.num_byzantine(n, byzantine_fraction)
  if (given or kind in RULES) and not tolerates(kind, n, value, trim_fraction):
    source = "" if given else f" (from --byzantine_fraction={byzantine_fraction:g} of {n})"
    top = largest_f(kind, n, trim_fraction)
    if kind in ("mean", "norm_clip"):
      limit = "leave --byzantine_f unset, or choose a robust aggregator"
    elif top >= 0:
      limit = f"with n = {n} clients per round it tolerates f ≤ {top}"
    else:
      limit = f"n = {n} clients per round is too few even for f = 0"
    raise ValueError(f"--byzantine_f={value}{source} is not valid: --aggregator={kind} assumes "
                     f"{ASSUMPTIONS[kind]}; {limit} (--clients_per_round / --client_fraction set n).")
  if kind == "multi_krum":
    options.check(0 <= multi_krum_select <= n - value, "multi_krum_select", multi_krum_select,
                  f"choose 1..n − f = {n - value} updates to average, or 0 for n − f")
  return value


# ---- the rules, on X [m, D] --------------------------------------------------------------

def squared_distances(x: tf.Tensor) -> tf.Tensor:
  """‖x_i − x_j‖² for all pairs, [m, m] float64 (from the Gram matrix, in float64)."""
  x = tf.cast(x, tf.float64)
  gram = tf.matmul(x, x, transpose_b=True)
  sq = tf.linalg.diag_part(gram)
  return tf.maximum(sq[:, None] + sq[None, :] - 2.0 * gram, 0.0)


def krum_scores(dist: tf.Tensor, f: int, alive: Optional[tf.Tensor] = None) -> tf.Tensor:
  """s(i) = the sum of the k smallest ‖x_i − x_j‖², j ≠ i, over the ``alive`` rows (all when
  None), k = min(max(r − f − 2, 1), r − 1), r = alive count; +inf for the rows not alive."""
  m = tf.shape(dist)[0]
  alive = tf.ones([m], tf.bool) if alive is None else alive
  r = tf.reduce_sum(tf.cast(alive, tf.int32))
  k = tf.minimum(tf.maximum(r - f - 2, 1), r - 1)
  pair = tf.logical_and(alive[:, None], alive[None, :])
  pair = tf.logical_and(pair, tf.logical_not(tf.eye(m, dtype=tf.bool)))
  ordered = tf.sort(tf.where(pair, dist, tf.constant(float("inf"), tf.float64)), axis=1)
  nearest = tf.where(tf.range(m)[None, :] < k, ordered, tf.zeros_like(ordered))
  scores = tf.reduce_sum(nearest, axis=1)
  return tf.where(alive, scores, tf.constant(float("inf"), tf.float64))


def _mean_of(x: tf.Tensor, chosen: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """The mean of the rows ``chosen`` (bool [m]), and its shares (1/q on each of the q rows)."""
  share = tf.cast(chosen, x.dtype) / tf.cast(tf.reduce_sum(tf.cast(chosen, tf.int32)), x.dtype)
  return tf.linalg.matvec(x, share, transpose_a=True), share


def krum(x: tf.Tensor, w: tf.Tensor, f: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Krum: the update with the smallest score (weights unused)."""
  del w
  best = tf.argmin(krum_scores(squared_distances(x), f), output_type=tf.int32)
  return _mean_of(x, tf.equal(tf.range(tf.shape(x)[0]), best))


def multi_krum(x: tf.Tensor, w: tf.Tensor, f: int, select: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
  """Multi-Krum: the mean of the q = ``select`` (0: m − f, at least 1) best-scored updates."""
  del w
  m = tf.shape(x)[0]
  q = tf.constant(select, tf.int32) if select > 0 else m - f
  q = tf.clip_by_value(q, 1, m)
  order = tf.argsort(krum_scores(squared_distances(x), f), stable=True)
  chosen = tf.scatter_nd(order[:q, None], tf.ones([q], tf.bool), [m])
  return _mean_of(x, chosen)


def bulyan(x: tf.Tensor, w: tf.Tensor, f: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Bulyan: θ = m − 2f updates by iterated Krum, then per coordinate the mean of the
  β = θ − 2f chosen values closest to the chosen values' median (weights unused)."""
  del w
  m = tf.shape(x)[0]
  theta = tf.maximum(m - 2 * f, 1)
  beta = tf.maximum(theta - 2 * f, 1)
  dist = squared_distances(x)

  def pick(i, alive):
    best = tf.argmin(krum_scores(dist, f, alive), output_type=tf.int32)
    return i + 1, tf.logical_and(alive, tf.not_equal(tf.range(m), best))

  _, alive = tf.while_loop(lambda i, _: i < theta, pick, (0, tf.ones([m], tf.bool)))
  rows = tf.where(tf.logical_not(alive))[:, 0]  # the θ chosen, in client order
  chosen = tf.gather(x, rows)
  ordered = tf.sort(chosen, axis=0)
  median = 0.5 * (tf.gather(ordered, (theta - 1) // 2) + tf.gather(ordered, theta // 2))
  closest = tf.argsort(tf.abs(chosen - median[None, :]), axis=0, stable=True)[:beta]  # [β, D]
  picked = tf.gather(tf.transpose(chosen), tf.transpose(closest), batch_dims=1)  # [D, β]
  result = tf.reduce_mean(picked, axis=1)
  counts = tf.math.bincount(tf.reshape(closest, [-1]), minlength=theta, maxlength=theta,
                            dtype=x.dtype)
  per_chosen = counts / tf.cast(beta * tf.shape(x)[1], x.dtype)
  return result, tf.scatter_nd(rows[:, None], per_chosen, [m])


def geometric_median(x: tf.Tensor, w: tf.Tensor, iterations: int = 10,
                     nu: float = 1e-6) -> tuple[tf.Tensor, tf.Tensor]:
  """RFA's smoothed Weiszfeld: ``iterations`` steps from the weighted mean (see the module
  docstring); the shares are the last step's β_i / Σ β."""
  alpha = w / tf.reduce_sum(w)
  share = alpha
  z = tf.linalg.matvec(x, share, transpose_a=True)
  for _ in range(iterations):
    dist = tf.norm(tf.cast(x - z[None, :], tf.float64), axis=1)
    beta = tf.cast(alpha, tf.float64) / tf.maximum(tf.constant(nu, tf.float64), dist)
    share = tf.cast(beta / tf.reduce_sum(beta), x.dtype)
    z = tf.linalg.matvec(x, share, transpose_a=True)
  return z, share


def rank_range_shares(x: tf.Tensor, lo: tf.Tensor, hi: tf.Tensor) -> tf.Tensor:
  """Shares of a coordinate-wise rule that averages the values of ranks lo..hi−1 in each
  coordinate (the median: the middle one or two; the β-trimmed mean: ⌊βm⌋..m−⌊βm⌋−1)."""
  ranks = tf.argsort(tf.argsort(x, axis=0, stable=True), axis=0, stable=True)
  inside = tf.logical_and(ranks >= lo, ranks < hi)
  per = tf.reduce_sum(tf.cast(inside, tf.float64), axis=1)
  return tf.cast(per / tf.cast((hi - lo) * tf.shape(x)[1], tf.float64), x.dtype)
