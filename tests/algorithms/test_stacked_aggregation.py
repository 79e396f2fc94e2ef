"""The Byzantine-robust aggregators as TFF aggregation factories, run through TFF's C++ runtime:
the same numbers as their definitions on the flattened updates, clients of weight 0 left out,
the clients' shares in client order, and each rule near the honest mean under the project's
attacks with as many attackers as it tolerates, where the mean is not."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import aggregation, attacks
from tff_robust.algorithms import robust_statistics as rs
from tff_robust.algorithms.stacked_aggregation import CLIENT_SHARES

from test_robust_statistics import np_bulyan, np_geometric_median, np_multi_krum, np_scores

SHAPES = ([3, 2], [4])
VALUE_TYPE = tff.types.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
WEIGHT_TYPE = tff.TensorType(np.float32)
RULES = ("krum", "multi_krum", "bulyan", "geometric_median")


def make_deltas(n, seed=0):
  rng = np.random.default_rng(seed)
  return [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in range(n)]


def flat(delta):
  return np.concatenate([t.reshape(-1) for t in delta])


def unflat(v):
  out, i = [], 0
  for s in SHAPES:
    size = int(np.prod(s))
    out.append(v[i:i + size].reshape(s))
    i += size
  return out


def run(kind, deltas, weights, **kwargs):
  kwargs.setdefault("zeroing", False)
  process = aggregation.build_aggregator(kind, **kwargs).create(VALUE_TYPE, WEIGHT_TYPE)
  return process.next(process.initialize(), deltas, [np.float32(w) for w in weights])


def reference(kind, x, w, f):
  if kind == "krum":
    best = int(np.argmin(np_scores(x, f)))
    return x[best], np.eye(len(x))[best]
  if kind == "multi_krum":
    return np_multi_krum(x, f, len(x) - f)
  if kind == "bulyan":
    return np_bulyan(x, f)
  return np_geometric_median(x, w, 10, 1e-6)


@pytest.mark.parametrize("kind", RULES)
def test_factory_computes_the_rule_and_leaves_out_weight_zero(tff_rt, kind):
  honest = make_deltas(7, seed=1)
  dropped = [np.full(s, 1e3, np.float32) for s in SHAPES]  # weight 0: never in any rule
  deltas = honest[:3] + [dropped] + honest[3:]
  weights = [1.0, 2.0, 1.0, 0.0, 3.0, 1.0, 1.0, 2.0]
  out = run(kind, deltas, weights, byzantine_f=1, client_shares=True)
  x = np.stack([flat(d) for d in honest])
  w = np.array([1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0])
  expected, shares = reference(kind, x, w, 1)
  for got, want in zip(out.result, unflat(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert out.measurements["included_count"] == 7
  np.testing.assert_allclose(out.measurements[CLIENT_SHARES], np.insert(shares, 3, 0.0), atol=1e-5)


@pytest.mark.parametrize("kind, beta", [("median", 0.2), ("trimmed_mean", 0.2), ("trimmed_mean", 0.3)])
def test_shares_leave_the_coordinatewise_result_unchanged(tff_rt, kind, beta):
  """With shares, the median and trimmed mean run on the stacked updates: same result."""
  deltas, weights = make_deltas(8, seed=2), [1.0, 0.0] + [1.0] * 6
  plain = run(kind, deltas, weights, trim_fraction=beta)
  with_shares = run(kind, deltas, weights, trim_fraction=beta, client_shares=True)
  for a, b in zip(plain.result, with_shares.result):
    np.testing.assert_array_equal(a, b)
  shares = with_shares.measurements[CLIENT_SHARES]
  assert shares[1] == 0.0 and shares.sum() == pytest.approx(1.0, abs=1e-6)


def test_nonfinite_update_never_reaches_krum(tff_rt):
  deltas = make_deltas(6, seed=3)
  deltas[2][1][0] = np.nan
  out = run("krum", deltas, [1.0] * 6, byzantine_f=1, zeroing=True, client_shares=True)
  assert out.measurements["nonfinite_count"] == 1 and out.measurements["included_count"] == 5
  assert all(np.all(np.isfinite(r)) for r in out.result)
  assert out.measurements[CLIENT_SHARES][2] == 0.0


# ---- robustness under the project's attacks -----------------------------------------------

N, DIM = 10, 40


def honest_and_attacked(attack, num_byzantine, seed=0):
  """N clients: honest updates μ + N(0, 0.1²) around μ = 0.5·1; the last ``num_byzantine``
  replace theirs by `attacks.apply_attack` of it (sign_flip: −Δ, scaled: 10Δ, gaussian: σ = 1)."""
  rng = np.random.default_rng(seed)
  mu = np.full(DIM, 0.5, np.float32)
  honest = [mu + 0.1 * rng.normal(size=DIM).astype(np.float32) for _ in range(N)]
  sent = list(honest)
  for i in range(N - num_byzantine, N):
    sent[i] = attacks.apply_attack(attack, [tf.constant(honest[i])], seed=i)[0].numpy()
  honest_mean = np.mean(honest[:N - num_byzantine], axis=0)
  return sent, honest_mean, float(np.linalg.norm(mu))


@pytest.fixture(scope="module")
def processes(tff_rt):
  vtype = tff.types.to_type([tff.TensorType(np.float32, [DIM])])
  built = {}
  for kind in RULES + ("mean",):
    f = 0 if kind == "mean" else rs.largest_f(kind, N)
    process = aggregation.build_aggregator(kind, byzantine_f=f, zeroing=False).create(vtype, WEIGHT_TYPE)
    built[kind] = (process, f)
  return built


@pytest.mark.parametrize("attack", ["sign_flip", "scaled", "gaussian"])
@pytest.mark.parametrize("kind", RULES)
def test_each_rule_stays_near_the_honest_mean_with_f_attackers(processes, kind, attack):
  process, f = processes[kind]
  assert f == {"krum": 3, "multi_krum": 3, "bulyan": 1, "geometric_median": 4}[kind]
  sent, honest_mean, scale = honest_and_attacked(attack, f)
  error = lambda p: float(np.linalg.norm(  # noqa: E731
      p.next(p.initialize(), [[s] for s in sent], [1.0] * N).result[0] - honest_mean))
  # one honest client lies ≈ 0.1·√40 ≈ 0.63 from the honest mean; |μ| ≈ 3.2
  ours, mean = error(process), error(processes["mean"][0])
  assert ours < 0.25 * scale
  assert mean > 1.5 * ours  # the same attack moves the plain mean further
