"""Aggregators against numpy on hand-made client deltas, run through TFF's C++ runtime."""

import collections
import inspect
import math

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import structure

from tff_robust.algorithms import aggregation

SHAPES = ([3, 2], [4])
VALUE_TYPE = tff.types.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
WEIGHT_TYPE = tff.TensorType(np.float32)


def make_deltas(n, seed=0, scale=1.0):
  rng = np.random.default_rng(seed)
  return [[(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES] for _ in range(n)]


def stack(deltas):
  return [np.stack([d[j] for d in deltas]) for j in range(len(SHAPES))]


def _setup(kind, kwargs):
  """``build_aggregator``'s arguments with their defaults filled in, ``clip_norm`` None for the
  kinds it does not reach (only norm_clip's factory reads it): calls that build the same process
  have the same setup."""
  bound = inspect.signature(aggregation.build_aggregator).bind(kind, **kwargs)
  bound.apply_defaults()
  args = dict(bound.arguments)
  if kind != "norm_clip":
    args["clip_norm"] = None
  return tuple(sorted(args.items()))


_PROCESSES = {}


def process_for(kind, **kwargs):
  """The process of ``build_aggregator(kind, **kwargs)`` on `VALUE_TYPE`, built once per setup
  (`_setup`) for the module. An aggregation process keeps no state of its own (each run starts
  from its ``initialize()``), and TFF pays a computation's first execution once per process
  object (measured: 0.3-0.9 CPU-s for a new process's first ``next``, 0.05-0.08 for a later call
  of the same process, with other clients too, against 0.1-0.6 to trace it): so the tests of one
  setup share its process."""
  key = _setup(kind, kwargs)
  if key not in _PROCESSES:
    _PROCESSES[key] = aggregation.build_aggregator(kind, **kwargs).create(VALUE_TYPE, WEIGHT_TYPE)
  return _PROCESSES[key]


def run(kind, deltas, weights, rounds=1, **kwargs):
  process = process_for(kind, **kwargs)
  state = process.initialize()
  outputs = []
  for _ in range(rounds):
    out = process.next(state, deltas, [np.float32(w) for w in weights])
    state = out.state
    outputs.append(out)
  return outputs if rounds > 1 else outputs[0]


def assert_close(result, expected, atol=1e-5):
  assert len(result) == len(expected)
  for r, e in zip(result, expected):
    np.testing.assert_allclose(r, e, atol=atol, rtol=1e-5)


# ---- validation ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="mode"), r"--aggregator='mode'.*mean, median, trimmed_mean, norm_clip, krum, multi_krum, "
                        r"bulyan, geometric_median"),
    (dict(kind="trimmed_mean", trim_fraction=0.5), r"--trim_fraction=0.5.*\[0, 0.5\)"),
    (dict(kind="trimmed_mean", trim_fraction=-0.1), r"--trim_fraction=-0.1"),
    (dict(kind="norm_clip", clip_norm=0.0), r"--clip_norm=0.0.*> 0"),
    (dict(kind="norm_clip", clip_norm=math.inf), r"--clip_norm=inf"),
    (dict(kind="mean", zeroing_norm=-1.0), r"--zeroing_norm=-1.0"),
])
def test_invalid_arguments_name_the_flag(kwargs, match):
  with pytest.raises(ValueError, match=match):
    aggregation.build_aggregator(**kwargs)


def test_rejects_integer_values():
  with pytest.raises(TypeError, match="floating-point"):
    aggregation.build_aggregator("median").create(tff.TensorType(np.int32, [2]), WEIGHT_TYPE)


@pytest.mark.parametrize("kind", aggregation.AGGREGATORS)
@pytest.mark.parametrize("zeroing", [True, False])
def test_measurements_are_flat_scalars_at_server(kind, zeroing):
  process = process_for(kind, zeroing=zeroing)
  mtype = process.next.type_signature.result.measurements
  assert mtype.placement is tff.SERVER
  names = [name for name, _ in structure.iter_elements(mtype.member)]
  expected = ["nonfinite_count"]
  expected += {"mean": [], "norm_clip": ["clipping_norm", "clipped_count"]}.get(kind, ["included_count"])
  expected += ["zeroing_norm", "zeroed_count"] if zeroing else []
  assert names == expected
  for _, t in structure.iter_elements(mtype.member):
    assert isinstance(t, tff.TensorType) and t.shape == () and t.dtype in (np.int32, np.float32)


# ---- the statistics --------------------------------------------------------------------

def test_mean_is_weighted_mean(tff_rt):
  deltas, weights = make_deltas(5, seed=1), [1.0, 2.0, 3.0, 0.5, 4.0]
  out = run("mean", deltas, weights)
  w = np.asarray(weights) / np.sum(weights)
  assert_close(out.result, [np.tensordot(w, s, axes=1) for s in stack(deltas)])
  assert out.measurements["nonfinite_count"] == 0 and out.measurements["zeroed_count"] == 0


@pytest.mark.parametrize("n", [7, 6])
def test_median_is_coordinatewise_median(tff_rt, n):
  deltas = make_deltas(n, seed=n)
  out = run("median", deltas, [1.0 + k for k in range(n)])  # weights do not matter
  assert_close(out.result, [np.median(s, axis=0) for s in stack(deltas)])
  assert out.measurements["included_count"] == n


@pytest.mark.parametrize("beta, n, k", [(0.2, 7, 1), (0.3, 10, 3), (0.0, 4, 0)])
def test_trimmed_mean_drops_floor_beta_m_per_side(tff_rt, beta, n, k):
  deltas = make_deltas(n, seed=10 + n)
  out = run("trimmed_mean", deltas, [1.0] * n, trim_fraction=beta)
  expected = [np.sort(s, axis=0)[k:n - k].mean(axis=0) for s in stack(deltas)]
  assert_close(out.result, expected)
  if k:  # differs from the plain mean, so the trimming is really applied
    assert not np.allclose(expected[0], stack(deltas)[0].mean(0), atol=1e-3)


def test_zero_weight_clients_excluded_from_median_and_trimmed_mean(tff_rt):
  honest = make_deltas(5, seed=3)
  dropped = [[np.full(s, 1e3, np.float32) for s in SHAPES] for _ in range(3)]  # weight 0
  deltas = honest[:2] + dropped[:2] + honest[2:] + dropped[2:]
  weights = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
  out = run("median", deltas, weights)
  assert_close(out.result, [np.median(s, axis=0) for s in stack(honest)])
  assert out.measurements["included_count"] == 5
  out = run("trimmed_mean", deltas, weights, trim_fraction=0.2)
  assert_close(out.result, [np.sort(s, axis=0)[1:4].mean(0) for s in stack(honest)])


@pytest.mark.parametrize("kind", ["mean", "median", "trimmed_mean"])
def test_all_weights_zero_gives_zero_delta(tff_rt, kind):
  out = run(kind, make_deltas(3), [0.0, 0.0, 0.0])
  assert_close(out.result, [np.zeros(s, np.float32) for s in SHAPES], atol=0)


def test_median_keeps_an_ordereddict_structure(tff_rt):
  vtype = tff.types.to_type(collections.OrderedDict(a=tff.TensorType(np.float32, [2]),
                                                    b=tff.TensorType(np.float32)))
  process = aggregation.build_aggregator("median").create(vtype, WEIGHT_TYPE)
  values = [collections.OrderedDict(a=np.array([k, -k], np.float32), b=np.float32(k * k))
            for k in (1.0, 3.0, 2.0)]
  out = process.next(process.initialize(), values, [1.0, 1.0, 1.0])
  np.testing.assert_allclose(out.result["a"], [2.0, -2.0])
  assert out.result["b"] == pytest.approx(4.0)


def test_norm_clip_fixed_norm(tff_rt):
  deltas, weights = make_deltas(5, seed=4, scale=0.3), [1.0, 2.0, 1.0, 3.0, 1.0]
  norms = [math.sqrt(sum(float(np.sum(t.astype(np.float64) ** 2)) for t in d)) for d in deltas]
  assert 0 < sum(n > 1.0 for n in norms) < 5  # some clipped, some not
  out = run("norm_clip", deltas, weights, clip_norm=1.0)
  factors = [min(1.0, 1.0 / n) for n in norms]
  w = np.asarray(weights) / np.sum(weights)
  expected = [np.tensordot(w * np.asarray(factors), s, axes=1) for s in stack(deltas)]
  assert_close(out.result, expected)
  assert out.measurements["clipped_count"] == sum(n > 1.0 for n in norms)
  assert out.measurements["clipping_norm"] == pytest.approx(1.0)


def test_norm_clip_adaptive_norm_follows_quantile_update(tff_rt):
  """C_{t+1} = C_t exp(-0.2 (b_t - 0.8)), b_t = fraction of norms <= C_t (Andrew et al. 2021)."""
  deltas = make_deltas(5, seed=4, scale=0.3)
  norms = np.array([math.sqrt(sum(float(np.sum(t.astype(np.float64) ** 2)) for t in d))
                    for d in deltas])
  outs = run("norm_clip", deltas, [1.0] * 5, rounds=2)
  c0 = outs[0].measurements["clipping_norm"]
  assert c0 == pytest.approx(1.0)
  b = np.mean(norms <= c0)
  assert outs[1].measurements["clipping_norm"] == pytest.approx(c0 * math.exp(-0.2 * (b - 0.8)),
                                                                rel=1e-5)
  assert outs[1].measurements["clipped_count"] == int(np.sum(norms > outs[1].measurements["clipping_norm"]))


# ---- zeroing ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kind", ["mean", "median", "trimmed_mean", "norm_clip"])  # the rest: test_stacked_aggregation
def test_nonfinite_update_is_excluded_and_counted(tff_rt, kind, bad):
  honest = make_deltas(4, seed=5, scale=0.1)
  corrupt = [t.copy() for t in make_deltas(1, seed=6)[0]]
  corrupt[1][2] = bad
  deltas = honest[:2] + [corrupt] + honest[2:]
  out = run(kind, deltas, [1.0, 2.0, 5.0, 1.0, 2.0], clip_norm=10.0)
  assert out.measurements["nonfinite_count"] == 1
  assert out.measurements["zeroed_count"] == 0  # the guard removed it before TFF's zeroing
  w = np.array([1.0, 2.0, 1.0, 2.0]) / 6.0
  if kind in ("median", "trimmed_mean"):  # ⌊0.2·4⌋ = 0 trimmed: the plain mean of 4
    expected = [(np.median if kind == "median" else np.mean)(s, axis=0) for s in stack(honest)]
  else:  # norms ≈ 0.3 < clip_norm
    expected = [np.tensordot(w, s, axes=1) for s in stack(honest)]
  assert_close(out.result, expected)
  assert all(np.all(np.isfinite(r)) for r in out.result)


def test_tff_zeroing_alone_misses_nan(tff_rt):
  """Why the guard exists: TFF zeroes when ‖Δ‖_∞ > norm, and NaN > norm is false."""
  deltas = make_deltas(3, seed=7)
  deltas[1][0][0, 0] = np.nan
  out = run("mean", deltas, [1.0, 1.0, 1.0], zeroing=False)
  assert out.measurements["nonfinite_count"] == 1  # counted, but not excluded
  assert np.isnan(out.result[0][0, 0])
  process = aggregation.GuardedFactory(
      tff.aggregators.zeroing_factory(100.0, tff.aggregators.MeanFactory()),
      exclude_nonfinite=False).create(VALUE_TYPE, WEIGHT_TYPE)
  out = process.next(process.initialize(), deltas, [1.0, 1.0, 1.0])
  assert out.measurements["zeroed_count"] == 0 and np.isnan(out.result[0][0, 0])


def test_huge_update_is_zeroed_keeping_its_weight(tff_rt):
  deltas = make_deltas(3, seed=8)
  deltas[2] = [t * 1e4 for t in deltas[2]]
  weights = [1.0, 3.0, 2.0]
  out = run("mean", deltas, weights, zeroing_norm=100.0)
  assert out.measurements["zeroed_count"] == 1 and out.measurements["nonfinite_count"] == 0
  assert out.measurements["zeroing_norm"] == pytest.approx(100.0)
  kept = stack(deltas[:2])
  assert_close(out.result, [(1.0 * s[0] + 3.0 * s[1]) / 6.0 for s in kept])


def test_zeroed_update_takes_part_in_median_as_zero(tff_rt):
  """TFF's zeroing keeps the client (weight > 0) with a zero delta: a zero vote."""
  deltas = [[np.full(s, v, np.float32) for s in SHAPES] for v in (1.0, 2.0, 3.0, 500.0)]
  out = run("median", deltas, [1.0] * 4, zeroing_norm=100.0)
  assert out.measurements["zeroed_count"] == 1 and out.measurements["included_count"] == 4
  assert_close(out.result, [np.full(s, 1.5, np.float32) for s in SHAPES])  # median(0, 1, 2, 3)


def test_validate_aggregator_checks_without_building():
  aggregation.validate_aggregator("trimmed_mean", trim_fraction=0.1, clip_norm=2.0)
  with pytest.raises(ValueError, match="--trim_fraction=0.7"):
    aggregation.validate_aggregator("median", trim_fraction=0.7)


@pytest.mark.parametrize("kind", aggregation.AGGREGATORS)
def test_unchecked_guard_equals_the_guard_on_finite_values(tff_rt, kind):
  """``check_nonfinite=False`` (values finite by construction) changes nothing but the work:
  the same result and measurements, with one aggregation and one client pass fewer."""
  deltas = make_deltas(5, seed=9)
  deltas[3] = [t * 1e3 for t in deltas[3]]  # zeroed by the fixed norm
  weights = [1.0, 2.0, 3.0, 0.5, 4.0]
  for zeroing in (dict(zeroing_norm=100.0), dict()):  # fixed, adaptive
    checked = run(kind, deltas, weights, rounds=2, clip_norm=1.0, **zeroing)
    unchecked = run(kind, deltas, weights, rounds=2, clip_norm=1.0, check_nonfinite=False, **zeroing)
    for a, b in zip(checked, unchecked):
      assert_close(b.result, a.result, atol=0)
      assert dict(b.measurements) == dict(a.measurements)
  fewer, full = process_for(kind, check_nonfinite=False), process_for(kind)
  assert fewer.next.type_signature == full.next.type_signature
  sums = lambda p: str(p.next.to_building_block()).count("federated_sum")  # noqa: E731
  assert sums(fewer) == sums(full) - 1
