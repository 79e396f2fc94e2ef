"""DP-FedAvg's aggregator (`algorithms.privacy`) on constructed client updates, through TFF's runtime:
the noise on the mean is z·C/m, each client's contribution is clipped to C, adaptive clipping takes
Andrew et al.'s geometric step, and a process without DP builds nothing of it."""

import dataclasses
import functools
import math

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.computation import computation_impl

from tff_robust.algorithms import aggregation, privacy, process
from tff_robust.algorithms.config import ProcessConfig, RobustConfig

from helpers.toy import SPEC

WEIGHT = tff.TensorType(np.float32)


def dp(z, clip=None, m=4, **kwargs):
  return privacy.DPConfig(noise_multiplier=z, clip=clip, clients_per_round=m, num_clients=10, **kwargs)


@functools.lru_cache(maxsize=None)
def _aggregator(config, shapes, zeroing, zeroing_norm, check_nonfinite):
  """The DP aggregation process, built once per setting (a process holds no state between calls:
  each `aggregate` starts from its ``initialize()``)."""
  value_type = tff.types.to_type([tff.TensorType(np.float32, s) for s in shapes])
  return privacy.build_dp_aggregator(config, "mean", zeroing=zeroing, zeroing_norm=zeroing_norm,
                                     check_nonfinite=check_nonfinite).create(value_type, WEIGHT)


def aggregate(config, deltas, shapes, rounds=1, zeroing=False, zeroing_norm=None, check_nonfinite=False):
  """``rounds`` rounds of the DP aggregator over ``deltas`` (one list of leaves per client)."""
  agg = _aggregator(config, tuple(tuple(s) for s in shapes), zeroing, zeroing_norm, check_nonfinite)
  state, outs = agg.initialize(), []
  for _ in range(rounds):
    # Weights are ignored: every client weighs 1 whatever it sends.
    out = agg.next(state, deltas, [np.float32(7.0 * (i + 1)) for i in range(len(deltas))])
    state = out.state
    outs.append(out)
  return outs


def flat(result):
  return np.concatenate([np.ravel(r) for r in result])


# ---- the noise: std z·C/m per coordinate of the mean --------------------------------------

def test_noise_on_the_mean_has_std_z_clip_over_m(tff_rt):
  shapes = ([200, 100], [100])  # 20,100 coordinates: the std is read to ±0.5 %
  z, clip, m = 0.5, 2.0, 4
  zeros = [[np.zeros(s, np.float32) for s in shapes] for _ in range(3)]  # 3 of the m = 4 reported
  first, second = (flat(o.result) for o in aggregate(dp(z, clip, m), zeros, shapes, rounds=2))
  want = z * clip / m
  for noise in (first, second):
    assert abs(np.std(noise) / want - 1) < 0.03
    assert abs(np.mean(noise)) < 5 * want / math.sqrt(noise.size)
  assert abs(np.corrcoef(first, second)[0, 1]) < 0.05  # fresh noise every round


def test_without_noise_the_mean_divides_the_clipped_sum_by_m(tff_rt):
  rng = np.random.default_rng(0)
  shapes = ([3, 2], [4])
  small = [rng.normal(size=s).astype(np.float32) for s in shapes]
  small = [x * (0.5 / np.linalg.norm(flat(small))) for x in small]  # norm 0.5 < C: kept as it is
  big = [rng.normal(size=s).astype(np.float32) for s in shapes]
  big = [x * (10.0 / np.linalg.norm(flat(big))) for x in big]  # norm 10: scaled to C = 1
  out = aggregate(dp(0.0, 1.0, m=4), [big, small], shapes)[0]
  want = (flat(big) / 10.0 + flat(small)) / 4  # the divisor is m, not the 2 who reported
  np.testing.assert_allclose(flat(out.result), want, rtol=1e-5, atol=1e-7)


def test_one_client_moves_the_mean_by_at_most_2c_over_m(tff_rt):
  """Replace-one sensitivity: whatever one client sends, the clipped mean moves ≤ 2C/m."""
  rng = np.random.default_rng(1)
  shapes = ([5], [3])
  others = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(2)]
  clip, m = 1.5, 3
  base = flat(aggregate(dp(0.0, clip, m), [[np.zeros(s, np.float32) for s in shapes]] + others,
                        shapes)[0].result)
  moved = []
  for scale in (0.1, 1.0, 1e3):
    client = [scale * rng.normal(size=s).astype(np.float32) for s in shapes]
    moved.append(np.linalg.norm(flat(aggregate(dp(0.0, clip, m), [client] + others, shapes)[0].result) - base))
  assert max(moved) <= clip / m * (1 + 1e-5)  # from 0, a clipped update reaches ≤ C: C/m
  assert moved[-1] == pytest.approx(clip / m, rel=1e-4)  # a huge one is clipped to exactly C
  far = [[1e3 * rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(2)]
  a, b = (flat(aggregate(dp(0.0, clip, m), [f] + others, shapes)[0].result) for f in far)
  assert np.linalg.norm(a - b) <= 2 * clip / m * (1 + 1e-5)


def test_a_nonfinite_update_counts_as_zero_and_zeroing_at_a_fixed_norm_composes(tff_rt):
  shapes = ([2],)
  clients = [[np.array([np.nan, 1.0], np.float32)], [np.array([0.3, 0.4], np.float32)],
             [np.array([5.0, 0.0], np.float32)]]
  out = aggregate(dp(0.0, 10.0, m=3), clients, shapes, zeroing=True, zeroing_norm=2.0, check_nonfinite=True)[0]
  np.testing.assert_allclose(out.result[0], [0.1, 0.4 / 3], rtol=1e-5)  # NaN: 0; ‖·‖∞ 5 > 2: zeroed
  assert (out.measurements["nonfinite_count"], out.measurements["zeroed_count"]) == (1, 1)


def test_adaptive_clip_takes_the_geometric_step_towards_the_quantile(tff_rt):
  """C ← C·exp(−η(b − γ)), b the share of norms ≤ C (Andrew et al. 2021; no noise: b exact)."""
  shapes = ([2],)
  clients = [[np.array([3.0, 4.0], np.float32)]] * 3  # norm 5 > C = 0.1: b = 0
  config = dp(0.0, 0.1, m=3, clip_quantile=0.5, clip_lr=0.2)
  # With the non-finite guard, as `build_dp_aggregator(config)` builds it by default: the
  # measurements' names below are that process's.
  first, second = aggregate(config, clients, shapes, rounds=2, check_nonfinite=True)
  np.testing.assert_allclose(first.result[0], [0.06, 0.08], rtol=1e-5)  # clipped at 0.1 this round
  assert first.measurements["clip"] == pytest.approx(0.1 * math.exp(0.2 * 0.5), rel=1e-5)
  assert second.measurements["clip"] == pytest.approx(0.1 * math.exp(0.2), rel=1e-5)
  assert first.measurements["nonfinite_count"] == 0
  default = _aggregator(config, ((2,),), False, None, True)  # the process `aggregate` ran (cached)
  names = [n for n, _ in structure.iter_elements(default.next.type_signature.result.measurements.member)]
  assert names == ["nonfinite_count", "clip"]


# ---- configuration -----------------------------------------------------------------------

def test_adaptive_clipping_needs_z_below_a_tenth_of_the_cohort():
  privacy.check_cohort(dp(0.9, clip_quantile=0.5), 10)
  privacy.check_cohort(dp(5.0, 1.0), 10)  # fixed clipping: no such bound
  with pytest.raises(ValueError, match=r"--dp_noise_multiplier=1.0 is not valid: .*< 0.1·m = 1 for m = 10"):
    privacy.check_cohort(dp(1.0, clip_quantile=0.5), 10)
  with pytest.raises(ValueError, match=r"--dp_clip=None is not valid: DP-FedAvg needs a clip"):
    privacy.DPConfig(noise_multiplier=1.0)
  with pytest.raises(ValueError, match=r"clients_per_round is not set"):
    privacy.dp_factory(privacy.DPConfig(noise_multiplier=1.0, clip=1.0))


def _proto(config: ProcessConfig) -> bytes:
  built = process.build_process(SPEC, config)
  return computation_impl.ConcreteComputation.get_proto(built.next).SerializeToString()


def test_without_dp_nothing_of_it_is_built(tff_rt):
  """The default process is built by `aggregation.build_aggregator` itself: no noise op is traced;
  with DP the round draws Gaussian noise."""
  assert privacy.with_dp(aggregation.build_aggregator, None) is aggregation.build_aggregator
  plain = ProcessConfig(weighting="uniform", robust=RobustConfig(zeroing=False))
  assert b"RandomStandardNormal" not in _proto(plain)
  assert b"RandomStandardNormal" in _proto(dataclasses.replace(plain, dp=dp(1.0, 1.0, m=3)))
