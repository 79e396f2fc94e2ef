"""Tests for tff_robust.algorithms.fedex: FedEx's exponentiated-gradient update (seed 002)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms.methods.fedex import update as fx
from tff_robust.algorithms.methods.fedex import space as fedex_space

# ---------------------------------------------------------------------------
# Hand (numpy) computation of seed 002's update, client by client.
# ---------------------------------------------------------------------------


def _np_gradient(theta, configs, losses, sizes, baseline):
  """grad_j = sum_i |V_i| (L_i - lambda) 1[c_i = j] / (theta_j sum_i |V_i|)."""
  k = len(theta)
  grad = np.zeros(k)
  for j in range(k):
    for c, loss, n in zip(configs, losses, sizes):
      if c == j:
        grad[j] += n * (loss - baseline)
    grad[j] /= theta[j] * sum(sizes)
  return grad


def _np_eta(kind, eta0, t, grad):
  if kind == 'constant':
    return eta0
  if kind == 'invsqrt':
    return eta0 / math.sqrt(t)
  return eta0 / np.max(np.abs(grad))


def _np_update(theta, grad, eta):
  new = theta * np.exp(-eta * grad)
  return new / new.sum()


def _client_round(theta, configs, losses, sizes, k):
  """The round's federated sums from per-client (index, loss, |V|) via client_sums."""
  s_loss = s_count = s_total = 0.0
  for c, loss, n in zip(configs, losses, sizes):
    a, b, d = fx.client_sums(c, loss, n, k)
    s_loss, s_count, s_total = s_loss + a, s_count + b, s_total + d
  return s_loss, s_count, s_total


ROUNDS = [  # (clients' configs, losses, |V_i|) for three rounds; k = 4, repeated configs
    ([0, 2, 2, 1, 0], [1.2, 0.7, 0.9, 1.0, 1.4], [10, 20, 5, 8, 12]),
    ([2, 2, 3, 0], [0.6, 0.8, 1.5, 1.1], [7, 9, 3, 30]),
    ([1, 2, 2, 2, 3, 3], [0.9, 0.5, 0.6, 0.55, 1.3, 1.2], [4, 10, 10, 6, 2, 15]),
]


@pytest.mark.parametrize('kind', fedex_space.ETA_SCHEDULES)
def test_theta_update_matches_hand_computation(kind):
  k, gamma = 4, 0.9
  opts = fedex_space.FedExOptions(k=k, eta_schedule=kind, eta0=0.7, discount=gamma)
  theta = fx.initial_theta(k)
  np_theta = np.full(k, 0.25)
  np.testing.assert_allclose(theta, np_theta)
  num = den = 0.0
  past_means = []
  for t, (configs, losses, sizes) in enumerate(ROUNDS, start=1):
    mean = np.dot(losses, sizes) / np.sum(sizes)
    if past_means:  # lambda_t = sum_{s<t} gamma^(t-1-s) Lbar_s / sum_{s<t} gamma^(t-1-s)
      w = np.array([gamma**(t - 1 - s) for s in range(1, t)])
      baseline = np.dot(w, past_means) / w.sum()
    else:
      baseline = mean
    grad = _np_gradient(np_theta, configs, losses, sizes, baseline)
    eta = _np_eta(kind, 0.7, t, grad)
    np_theta = _np_update(np_theta, grad, eta)
    past_means.append(mean)

    sums = _client_round(theta, configs, losses, sizes, k)
    # The sums-based gradient equals the per-client formula.
    np.testing.assert_allclose(
        fx.fedex_gradient(*sums, theta, baseline).numpy(),
        _np_gradient(np.asarray(theta, np.float64), configs, losses, sizes, baseline),
        rtol=1e-5)
    theta, num, den, metrics = fx.server_update(theta, num, den, *sums, t, opts)
    np.testing.assert_allclose(metrics['baseline'].numpy(), baseline, rtol=1e-5)
    np.testing.assert_allclose(metrics['mean_val_loss'].numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(metrics['eta'].numpy(), eta, rtol=1e-5)
    np.testing.assert_allclose(theta.numpy(), np_theta, rtol=1e-4, atol=1e-7)
    assert np.all(theta.numpy() >= 0)
    np.testing.assert_allclose(theta.numpy().sum(), 1.0, rtol=1e-6)
  # Config 2 (the lowest losses) gained the most mass.
  assert np.argmax(np_theta) == 2


def test_baseline_discounted_mean():
  num = den = 0.0
  means = [2.0, 1.0, 4.0, 3.0]
  gamma = 0.5
  got = []
  for m in means:
    num, den, lam = fx.update_baseline(num, den, m, gamma)
    got.append(float(lam))
  # Round 1: the current mean; then sum_{s<t} g^(t-1-s) L_s / sum g^(t-1-s).
  expected = [2.0, 2.0, (0.5 * 2 + 1) / 1.5, (0.25 * 2 + 0.5 * 1 + 4) / 1.75]
  np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_step_sizes():
  grad = tf.constant([0.5, -2.0, 1.0])
  assert float(fx.step_size('constant', 0.3, 9, grad)) == pytest.approx(0.3)
  assert float(fx.step_size('invsqrt', 0.3, 9, grad)) == pytest.approx(0.1)
  assert float(fx.step_size('adaptive', 0.3, 9, grad)) == pytest.approx(0.15)
  assert float(fx.step_size('adaptive', 0.3, 9, tf.zeros([3]))) == pytest.approx(0.3)
  rows = fx.step_size('adaptive', 1.0, 1, tf.constant([[0.5, -2.0], [0.25, 0.1]]))
  np.testing.assert_allclose(rows.numpy(), [[0.5], [4.0]])
  assert fedex_space.FedExOptions(k=5).resolved_eta0 == pytest.approx(math.sqrt(2 * math.log(5)))
  with pytest.raises(ValueError, match='--fedex_eta_schedule.*adaptive'):
    fx.step_size('adagrad', 1.0, 1, grad)


def test_update_theta_is_stable_for_huge_steps():
  theta = tf.constant([0.25, 0.25, 0.25, 0.25])
  new = fx.update_theta(theta, tf.constant([1e4, -1e4, 0.0, 3e4]), 10.0).numpy()
  assert np.all(np.isfinite(new))
  np.testing.assert_allclose(new, [0, 1, 0, 0], atol=1e-6)
  # A configuration with theta = 0 stays at 0 (and never yields NaN).
  z = fx.update_theta(tf.constant([0.0, 0.5, 0.5]), tf.constant([0.0, 1.0, -1.0]), 1.0).numpy()
  assert z[0] == 0 and np.all(np.isfinite(z))
  e = np.array([math.exp(-1), math.exp(1)])
  np.testing.assert_allclose(z[1:], e / e.sum(), rtol=1e-6)


def test_round_without_validation_data_changes_nothing():
  opts = fedex_space.FedExOptions(k=3)
  theta = np.array([0.2, 0.3, 0.5], np.float32)
  new, num, den, _ = fx.server_update(theta, 1.5, 2.0, np.zeros(3), np.zeros(3), 0.0, 4, opts)
  np.testing.assert_allclose(new.numpy(), theta)
  assert float(num) == 1.5 and float(den) == 2.0


def test_entropy_cutoff_freezes_and_uses_argmax():
  theta = np.array([0.01, 0.97, 0.01, 0.01], np.float32)
  h = float(fx.entropy(theta))
  expected = -sum(p * math.log(p) for p in theta)
  assert h == pytest.approx(expected, rel=1e-5)
  assert float(fx.entropy(fx.initial_theta(4))) == pytest.approx(math.log(4), rel=1e-6)
  # Below the cutoff every client uses argmax; above it, clients sample.
  picks = {int(fx.effective_index(theta, h + 0.01, [s, 1])) for s in range(30)}
  assert picks == {1}
  uniform = fx.initial_theta(4)
  picks = {int(fx.effective_index(uniform, h + 0.01, [s, 1])) for s in range(30)}
  assert len(picks) > 1
  # A converged theta is not updated any more.
  opts = fedex_space.FedExOptions(k=4, entropy_cutoff=h + 0.01)
  sums = _client_round(theta, [0, 1], [0.1, 2.0], [5, 5], 4)
  new, *_ = fx.server_update(theta, 0.0, 0.0, *sums, 1, fedex_space.FedExOptions(k=4))
  assert not np.allclose(new.numpy(), theta)
  frozen, *_ = fx.server_update(theta, 0.0, 0.0, *sums, 1, opts)
  np.testing.assert_allclose(frozen.numpy(), theta)


def test_client_sampling_differs_between_clients_and_is_deterministic():
  theta = fx.initial_theta(6)
  picks = [int(fx.sample_client_config(theta, fx.client_seed(3, 1, i))) for i in range(20)]
  assert len(set(picks)) >= 3
  again = [int(fx.sample_client_config(theta, fx.client_seed(3, 1, i))) for i in range(20)]
  assert picks == again
  assert all(0 <= p < 6 for p in picks)
  # Frequencies follow theta.
  skewed = np.array([0.7, 0.1, 0.1, 0.1], np.float32)
  draws = np.array([int(fx.sample_client_config(skewed, [s, 0])) for s in range(400)])
  assert 0.6 < np.mean(draws == 0) < 0.8
  # Product space: one index per row.
  idx = fx.sample_client_config(fx.initial_theta(5, num_rows=3), 7)
  assert idx.shape == (3,)


# ---------------------------------------------------------------------------
# Toy problem: config j* always has clearly lower validation loss.
# ---------------------------------------------------------------------------

K, B = 5, 20
BASE = np.array([1.0, 0.9, 0.95, 0.5, 1.1], np.float32)  # j* = 3
BASE2 = np.array([0.8, 0.4, 0.9, 0.85, 0.7], np.float32)  # product space, 2nd hparam: j* = 1


def _make_round(opts: fedex_space.FedExOptions, product: bool):
  """One simulated round in a tf.function: B clients sample from theta with their own seeds."""

  def one_client(theta, t, seed, i):
    cs = fx.client_seed(seed, t, i)
    idx = fx.sample_client_config(theta, cs)
    noise = tf.random.stateless_normal([], cs + 7, stddev=0.1)
    n_val = tf.random.stateless_uniform([], cs + 11, 5, 30, dtype=tf.int32)
    if product:
      loss = tf.gather(BASE, idx[0]) + tf.gather(BASE2, idx[1]) + noise
    else:
      loss = tf.gather(BASE, idx) + noise
    return fx.client_sums(idx, loss, n_val, K)

  @tf.function
  def round_fn(theta, num, den, t, seed):
    per_client = tf.map_fn(lambda i: one_client(theta, t, seed, i), tf.range(B),
                           fn_output_signature=(tf.float32, tf.float32, tf.float32))
    sums = [tf.reduce_sum(x, axis=0) for x in per_client]  # the federated sum
    return fx.server_update(theta, num, den, *sums, t, opts)

  return round_fn


@pytest.mark.parametrize('product', [False, True], ids=['joint', 'product'])
@pytest.mark.parametrize('kind', fedex_space.ETA_SCHEDULES)
def test_theta_concentrates_on_best_config(kind, product):
  round_fn = _make_round(fedex_space.FedExOptions(k=K, eta_schedule=kind), product)
  for seed in range(3):
    theta = tf.constant(fx.initial_theta(K, 2 if product else None))
    num = den = tf.constant(0.0)
    for t in range(1, 41):
      theta, num, den, _ = round_fn(theta, num, den, tf.constant(t), tf.constant(seed))
      th = theta.numpy()
      np.testing.assert_allclose(th.sum(axis=-1), 1.0, rtol=1e-5)
      assert np.all(th >= 0)
      best = [th[0, 3], th[1, 1]] if product else [th[3]]
      if min(best) > 0.9:
        break
    assert min(best) > 0.9, (kind, product, seed, th)


def test_product_space_gradient_per_row():
  k = 3
  theta = np.array([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]], np.float32)
  clients = [((0, 1), 1.0, 4), ((2, 1), 0.5, 6), ((2, 0), 2.0, 10)]
  sums = _client_round(theta, [c[0] for c in clients], [c[1] for c in clients],
                       [c[2] for c in clients], k)
  assert sums[0].shape == (2, 3)
  grad = fx.fedex_gradient(*sums, theta, 1.1).numpy()
  for h in range(2):
    expected = _np_gradient(theta[h].astype(np.float64), [c[0][h] for c in clients],
                            [c[1] for c in clients], [c[2] for c in clients], 1.1)
    np.testing.assert_allclose(grad[h], expected, rtol=1e-5)
  new, *_ = fx.server_update(theta, 0.0, 0.0, *sums, 1, fedex_space.FedExOptions(k=k, eta0=0.5,
                                                                         eta_schedule='constant'))
  mean = (4 * 1.0 + 6 * 0.5 + 10 * 2.0) / 20
  for h in range(2):
    g = _np_gradient(theta[h].astype(np.float64), [c[0][h] for c in clients],
                     [c[1] for c in clients], [c[2] for c in clients], mean)
    np.testing.assert_allclose(new.numpy()[h], _np_update(theta[h], g, 0.5), rtol=1e-5)


# ---------------------------------------------------------------------------
# Search space and configurations.
# ---------------------------------------------------------------------------


def _space():
  return fedex_space.SearchSpace(
      learning_rate=fedex_space.Range(1e-4, 1.0, log=True), momentum=fedex_space.Range(0.0, 0.9),
      weight_decay=None, local_epochs=fedex_space.Range(1, 5), batch_size=(8, 16, 32, 64, 128),
      dropout=(0.0, 0.1, 0.2, 0.3, 0.5))


def test_sample_configs_respects_radius_bounds_and_is_deterministic():
  space = _space()
  center = {'learning_rate': 1e-2, 'momentum': 0.85, 'local_epochs': 2, 'batch_size': 32,
            'dropout': 0.1}
  k, radius = 200, 0.25
  cfg = fedex_space.sample_configs(space, center, radius, k, seed=4)
  assert set(cfg) == set(space.names) == set(center)
  for name, arr in cfg.items():
    assert arr.shape == (k,)
    assert arr[0] == pytest.approx(center[name], rel=1e-6)  # config 0 = center
  lr = np.log(cfg['learning_rate'].astype(np.float64))
  half = radius * math.log(1.0 / 1e-4)
  assert np.all(np.abs(lr - math.log(1e-2)) <= half + 1e-5)
  assert lr.max() - lr.min() > half  # the radius is used, not just the center
  mom = cfg['momentum']
  assert np.all((mom >= 0.0) & (mom <= 0.9 + 1e-7))  # clipped to the space
  assert np.all(np.abs(mom - 0.85) <= radius * 0.9 + 1e-6)
  assert np.isclose(mom.max(), 0.9)  # clipping happened at the upper bound
  assert cfg['local_epochs'].dtype == np.int32 and cfg['batch_size'].dtype == np.int32
  assert set(cfg['local_epochs']) <= {1, 2, 3}  # 2 +- 0.25 * 4
  assert set(cfg['batch_size']) <= {16, 32, 64}  # one position either way (0.25 * 4)
  assert set(cfg['dropout'].astype(np.float64).round(6)) <= {0.0, 0.1, 0.2}
  again = fedex_space.sample_configs(space, center, radius, k, seed=4)
  for name in cfg:
    np.testing.assert_array_equal(cfg[name], again[name])
  other = fedex_space.sample_configs(space, center, radius, k, seed=5)
  assert not np.array_equal(cfg['learning_rate'], other['learning_rate'])
  # radius 0 repeats the center; radius 1 covers the whole space.
  still = fedex_space.sample_configs(space, center, 0.0, 5, seed=1)
  assert np.allclose(still['learning_rate'], 1e-2) and set(still['batch_size']) == {32}
  wide = fedex_space.sample_configs(space, center, 1.0, 400, seed=1)
  assert set(wide['batch_size']) == {8, 16, 32, 64, 128}
  assert wide['learning_rate'].min() < 1e-3 and wide['learning_rate'].max() > 0.3


def test_gather_config_in_tf_function():
  space = _space()
  cfg = fedex_space.sample_configs(space, space.midpoint(), 0.5, 4, seed=0)

  @tf.function
  def pick(theta, seed):
    return fx.gather_config(cfg, fx.sample_client_config(theta, seed), space.names)

  got = pick(tf.constant([0.0, 0.0, 1.0, 0.0]), tf.constant([1, 2]))
  for name in space.names:
    assert got[name].numpy() == cfg[name][2]
  rows = fx.initial_theta(4, len(space.names)) * 0
  rows[:, 1] = 1.0
  got = pick(tf.constant(rows), tf.constant([1, 2]))
  for name in space.names:
    assert got[name].numpy() == cfg[name][1]


def test_search_space_validation_names_flags():
  with pytest.raises(ValueError, match=r'--fedex_learning_rate.*low=0'):
    fedex_space.SearchSpace(learning_rate=fedex_space.Range(0.0, 1.0))
  with pytest.raises(ValueError, match=r'--fedex_momentum.*1\.5.*\[0, 1\)'):
    fedex_space.SearchSpace(momentum=(0.0, 1.5))
  with pytest.raises(ValueError, match=r'--fedex_batch_size.*12\.5.*integer'):
    fedex_space.SearchSpace(batch_size=(8, 12.5))
  with pytest.raises(ValueError, match=r'--fedex_weight_decay.*log range needs low > 0'):
    fedex_space.SearchSpace(weight_decay=fedex_space.Range(0.0, 0.1, log=True))
  with pytest.raises(ValueError, match=r'--fedex_local_epochs and --fedex_local_steps'):
    fedex_space.SearchSpace(local_steps=(10, 20))
  with pytest.raises(ValueError, match=r'--fedex_dropout.*low <= high'):
    fedex_space.SearchSpace(dropout=fedex_space.Range(0.5, 0.1))
  with pytest.raises(ValueError, match=r'--fedex_radius'):
    fedex_space.sample_configs(fedex_space.SearchSpace(), fedex_space.SearchSpace().midpoint(), 1.5, 3, 0)
  with pytest.raises(ValueError, match=r'--fedex_k'):
    fedex_space.FedExOptions(k=0)
  with pytest.raises(ValueError, match=r'--fedex_discount'):
    fedex_space.FedExOptions(discount=1.5)
  with pytest.raises(ValueError, match=r'--fedex_batch_size values'):
    bad = {**fedex_space.SearchSpace().midpoint(), 'batch_size': 33}
    fedex_space.sample_configs(fedex_space.SearchSpace(), bad, 0.1, 3, 0)
  with pytest.raises(ValueError, match=r'missing'):
    fedex_space.sample_configs(fedex_space.SearchSpace(), {'learning_rate': 0.1}, 0.1, 3, 0)


def test_parse_hparam():
  assert fedex_space.parse_hparam('learning_rate', '1e-3:0.5:log') == fedex_space.Range(1e-3, 0.5, log=True)
  assert fedex_space.parse_hparam('momentum', '0:0.9') == fedex_space.Range(0.0, 0.9)
  assert fedex_space.parse_hparam('batch_size', '16,32') == (16.0, 32.0)
  assert fedex_space.parse_hparam('dropout', 'none') is None
  with pytest.raises(ValueError, match=r"--fedex_momentum='a:b'.*choices"):
    fedex_space.parse_hparam('momentum', 'a:b')


def test_random_center_inside_space():
  space = _space()
  for s in range(20):
    c = space.midpoint() if s == 0 else fedex_space.random_center(space, s)
    fedex_space.sample_configs(space, c, 0.3, 3, s)  # validates the center
  assert fedex_space.random_center(space, 3) == fedex_space.random_center(space, 3)


# ---------------------------------------------------------------------------
# Inside a TFF computation: clients' sums are federated-summed, server updates theta.
# ---------------------------------------------------------------------------


def test_server_update_in_tff_computation(tff_rt):
  import tensorflow_federated as tff

  k = 4
  opts = fedex_space.FedExOptions(k=k, eta_schedule='adaptive')
  client_type = tff.StructType([('index', np.int32), ('loss', np.float32), ('n', np.float32)])
  theta_t = tff.TensorType(np.float32, [k])

  @tff.tensorflow.computation(client_type)
  def client_fn(x):
    return fx.client_sums(x.index, x.loss, x.n, k)

  sums_type = client_fn.type_signature.result

  @tff.tensorflow.computation(theta_t, np.float32, np.float32, sums_type, np.int32)
  def server_fn(theta, num, den, sums, t):
    new_theta, new_num, new_den, _ = fx.server_update(theta, num, den, sums[0], sums[1],
                                                      sums[2], t, opts)
    return new_theta, new_num, new_den

  @tff.federated_computation(tff.FederatedType(theta_t, tff.SERVER),
                             tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(client_type, tff.CLIENTS),
                             tff.FederatedType(np.int32, tff.SERVER))
  def step(theta, num, den, clients, t):
    sums = tff.federated_sum(tff.federated_map(client_fn, clients))
    return tff.federated_map(server_fn, tff.federated_zip((theta, num, den, sums, t)))

  configs, losses, sizes = ROUNDS[0]
  clients = [{'index': np.int32(c), 'loss': np.float32(l), 'n': np.float32(n)}
             for c, l, n in zip(configs, losses, sizes)]
  theta = fx.initial_theta(k)
  new_theta, num, den = step(theta, np.float32(0), np.float32(0), clients, np.int32(1))
  sums = _client_round(theta, configs, losses, sizes, k)
  want, want_num, want_den, _ = fx.server_update(theta, 0.0, 0.0, *sums, 1, opts)
  np.testing.assert_allclose(new_theta, want.numpy(), rtol=1e-5)
  assert num == pytest.approx(float(want_num)) and den == pytest.approx(float(want_den))
  mean = np.dot(losses, sizes) / np.sum(sizes)
  grad = _np_gradient(np.full(k, 0.25), configs, losses, sizes, mean)
  np.testing.assert_allclose(new_theta, _np_update(np.full(k, 0.25), grad,
                                                   opts.resolved_eta0 / np.abs(grad).max()),
                             rtol=1e-4)
