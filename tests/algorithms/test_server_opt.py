"""Tests for tff_robust.algorithms.server_opt against hand (numpy) computations of seed 004's updates."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import server_opt

# Hand-made mean client deltas Delta_t for 3 rounds on a [3]-vector and a [2, 2]-matrix.
X0 = [np.array([0.5, -1.0, 2.0], np.float32), np.array([[1.0, 0.0], [-0.5, 0.25]], np.float32)]
DELTAS = [
    [np.array([1.0, -2.0, 0.5], np.float32), np.array([[0.3, -0.1], [0.0, 2.0]], np.float32)],
    [np.array([0.01, 0.02, -3.0], np.float32), np.array([[-0.05, 1.5], [0.4, 0.02]], np.float32)],
    [np.array([-0.5, 0.03, 1.0], np.float32), np.array([[0.2, 0.01], [-1.0, 0.0]], np.float32)],
]
SPECS = [tf.TensorSpec(x.shape, tf.float32) for x in X0]


def _ref_adaptive(kind, lr, beta1, beta2, tau, v0, x0=X0, deltas=DELTAS):
  """Algorithms 3-4 of seed 004 with momentum, per leaf, in float64. Returns xs and yogi signs."""
  x = [a.astype(np.float64) for a in x0]
  m = [np.zeros_like(a) for a in x]
  v = [np.full_like(a, v0) for a in x]
  xs, signs = [], []
  for delta in deltas:
    step_signs = []
    for i, d in enumerate(delta):
      d = d.astype(np.float64)
      m[i] = beta1 * m[i] + (1 - beta1) * d
      if kind == 'adagrad':
        v[i] = v[i] + d**2
      elif kind == 'adam':
        v[i] = beta2 * v[i] + (1 - beta2) * d**2
      else:
        s = np.sign(v[i] - d**2)
        step_signs.append(s)
        v[i] = v[i] - (1 - beta2) * d**2 * s
      x[i] = x[i] + lr * m[i] / (np.sqrt(v[i]) + tau)
    xs.append([a.copy() for a in x])
    signs.append(step_signs)
  return xs, signs


def _run(opt, x0=X0, deltas=DELTAS):
  """Feeds pseudo-gradients -Delta_t to ``opt`` eagerly; returns weights after each round."""
  state = opt.initialize(SPECS)
  weights = [tf.constant(a) for a in x0]
  xs = []
  for delta in deltas:
    state, weights = opt.next(state, weights, [tf.constant(-d) for d in delta])
    xs.append([w.numpy() for w in weights])
  return state, xs


def _assert_close(actual, expected):
  for a_round, e_round in zip(actual, expected, strict=True):
    for a, e in zip(a_round, e_round, strict=True):
      np.testing.assert_allclose(a, e, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize('kind', ['adagrad', 'adam', 'yogi'])
@pytest.mark.parametrize('beta1,tau,initial_v', [(0.9, 1e-3, None), (0.0, 0.1, 0.25)])
def test_adaptive_matches_hand_computation(kind, beta1, tau, initial_v):
  lr, beta2 = 0.3, 0.5
  opt = server_opt.build_server_optimizer(kind, lr, beta1=beta1, beta2=beta2, tau=tau,
                                          initial_v=initial_v)
  v0 = tau**2 if initial_v is None else initial_v
  expected, _ = _ref_adaptive(kind, lr, beta1, beta2, tau, v0)
  state, xs = _run(opt)
  _assert_close(xs, expected)
  # The state holds m_t in the paper's sign (a mean of Deltas, not of -Deltas).
  m_expected = (1 - beta1) * (beta1**2 * DELTAS[0][0] + beta1 * DELTAS[1][0] + DELTAS[2][0])
  np.testing.assert_allclose(state[server_opt.M_KEY][0].numpy(), m_expected, rtol=1e-5, atol=1e-7)


def test_beta1_zero_is_slide_version_by_hand():
  """beta1 = 0: x_1 = x_0 + eta Delta_0 / (sqrt(v_0) + tau), with v_0 = tau^2 + Delta_0^2 (FedAdagrad)."""
  opt = server_opt.build_server_optimizer('adagrad', 0.5, beta1=0.0, tau=0.5)
  state = opt.initialize([tf.TensorSpec([1], tf.float32)])
  _, (x1,) = opt.next(state, [tf.constant([1.0])], [tf.constant([-1.5])])
  # v_0 = 0.25 + 2.25 = 2.5; x_1 = 1 + 0.5 * 1.5 / (sqrt(2.5) + 0.5)
  np.testing.assert_allclose(x1.numpy(), [1.0 + 0.75 / (np.sqrt(2.5) + 0.5)], rtol=1e-6)


def test_yogi_sign_branches_both_ways():
  """Yogi's v grows when v_{t-1} < Delta^2 and shrinks when v_{t-1} > Delta^2."""
  beta2 = 0.5
  _, signs = _ref_adaptive('yogi', 0.3, 0.9, beta2, 1e-3, 1e-6)
  flat = np.concatenate([s.ravel() for step in signs for s in step])
  assert (flat > 0).any() and (flat < 0).any()  # the hand-made deltas exercise both branches
  opt = server_opt.build_server_optimizer('yogi', 0.3, beta2=beta2, tau=1e-3)
  state = opt.initialize(SPECS)
  weights = [tf.constant(a) for a in X0]
  v_prev = np.full(3, 1e-6)
  for delta in DELTAS:
    state, weights = opt.next(state, weights, [tf.constant(-d) for d in delta])
    v = state[server_opt.V_KEY][0].numpy()
    d2 = delta[0].astype(np.float64)**2
    grew = v_prev < d2
    np.testing.assert_allclose(v[grew], (v_prev + (1 - beta2) * d2)[grew], rtol=1e-5)
    np.testing.assert_allclose(v[~grew], (v_prev - (1 - beta2) * d2)[~grew], rtol=1e-5)
    v_prev = v.astype(np.float64)
  # Round 2, coordinate 0: v_1 = 1e-6 + 0.5 * 1 > 0.01^2, so v shrank there.
  _, xs_adam = _run(server_opt.build_server_optimizer('adam', 0.3, beta2=beta2, tau=1e-3))
  _, xs_yogi = _run(server_opt.build_server_optimizer('yogi', 0.3, beta2=beta2, tau=1e-3))
  assert not np.allclose(xs_adam[-1][0], xs_yogi[-1][0])


@pytest.mark.parametrize('name,momentum', [('sgd', 0.0), ('sgdm', 0.9), ('sgdm', 0.0)])
def test_sgd_and_fedavgm_match_hand_computation(name, momentum):
  lr = 0.7
  x = [a.astype(np.float64) for a in X0]
  m = [np.zeros_like(a) for a in x]
  expected = []
  for delta in DELTAS:
    m = [momentum * mi + d for mi, d in zip(m, delta)]  # m_t = mu m_{t-1} + Delta_t
    x = [xi + lr * mi for xi, mi in zip(x, m)]  # x_{t+1} = x_t + eta m_t
    expected.append([a.copy() for a in x])
  _, xs = _run(server_opt.build_server_optimizer(name, lr, momentum=momentum))
  _assert_close(xs, expected)


def test_hparams_read_and_set():
  opt = server_opt.build_server_optimizer('adam', 0.3, beta1=0.8, beta2=0.95, tau=0.01)
  state = opt.initialize(SPECS)
  hp = opt.get_hparams(state)
  assert list(hp) == ['learning_rate', 'beta_1', 'beta_2', 'tau']
  np.testing.assert_allclose([hp[k] for k in hp], [0.3, 0.8, 0.95, 0.01])
  state = opt.set_hparams(state, {'learning_rate': 0.0})
  assert opt.get_hparams(state)['learning_rate'] == 0.0
  _, weights = opt.next(state, [tf.constant(a) for a in X0], [tf.constant(-d) for d in DELTAS[0]])
  np.testing.assert_array_equal(weights[0].numpy(), X0[0])  # lr 0: no move
  with pytest.raises(ValueError, match='momentum'):
    opt.set_hparams(state, {'momentum': 0.5})
  sgdm = server_opt.build_server_optimizer('sgdm', 1.0, momentum=0.9)
  assert dict(sgdm.get_hparams(sgdm.initialize(SPECS))) == {'learning_rate': 1.0, 'momentum': 0.9}


def _traced(opt):
  init = tff.tensorflow.computation(lambda: opt.initialize(SPECS))
  weights_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s.shape) for s in SPECS], list)
  step = tff.tensorflow.computation(
      lambda state, w, g: opt.next(state, w, g),
      init.type_signature.result, weights_type, weights_type)
  return init, step


def test_state_traces_inside_tff_computation():
  opt = server_opt.build_server_optimizer('yogi', 0.3, beta2=0.5)
  init, step = _traced(opt)
  state_type = init.type_signature.result
  assert [name for name, _ in tff.structure.iter_elements(state_type)] == [
      'learning_rate', 'beta_1', 'beta_2', 'tau', 'm', 'v']
  assert state_type.learning_rate == tff.TensorType(np.float32)
  for key in ('m', 'v'):
    assert [t for _, t in tff.structure.iter_elements(state_type[key])] == [
        tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [2, 2])]
  new_state_type, new_weights_type = step.type_signature.result
  assert new_state_type.is_equivalent_to(state_type)
  assert new_weights_type.is_equivalent_to(step.type_signature.parameter[1])


def test_tff_computation_executes_like_eager(tff_rt):
  del tff_rt
  opt = server_opt.build_server_optimizer('yogi', 0.3, beta2=0.5)
  init, step = _traced(opt)
  expected, _ = _ref_adaptive('yogi', 0.3, 0.9, 0.5, 1e-3, 1e-6)
  state, weights = init(), list(X0)
  xs = []
  for delta in DELTAS:
    state, weights = step(state, weights, [-d for d in delta])
    xs.append(list(weights))
  _assert_close(xs, expected)
  assert opt.get_hparams(state)['beta_2'] == pytest.approx(0.5)


@pytest.mark.parametrize('kwargs,message', [
    (dict(name='lamb'), r"--server_opt must be one of \('sgd', 'sgdm', 'adagrad', 'adam', 'yogi'\), got 'lamb'"),
    (dict(learning_rate=0.0), '--server_lr must be > 0, got 0.0'),
    (dict(learning_rate=-1.0), '--server_lr must be > 0, got -1.0'),
    (dict(name='sgdm', momentum=1.0), r'--server_momentum must be in \[0, 1\), got 1.0'),
    (dict(name='sgdm', momentum=-0.1), r'--server_momentum must be in \[0, 1\), got -0.1'),
    (dict(name='sgd', momentum=0.9), '--server_momentum=0.9 has no effect with --server_opt=sgd'),
    (dict(beta1=1.0), r'--server_beta1 must be in \[0, 1\), got 1.0'),
    (dict(beta1=-0.5), r'--server_beta1 must be in \[0, 1\), got -0.5'),
    (dict(beta2=0.0), r'--server_beta2 must be in \(0, 1\), got 0.0'),
    (dict(beta2=1.0), r'--server_beta2 must be in \(0, 1\), got 1.0'),
    (dict(tau=-1.0), '--server_tau must be > 0, got -1.0'),
    (dict(tau=0.0), '--server_tau must be > 0, got 0.0'),
    (dict(tau=0.1, initial_v=0.001), '--server_initial_v must be >= --server_tau\\*\\*2'),
])
def test_validation_messages(kwargs, message):
  args = dict(name='adam', learning_rate=0.1)
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    server_opt.build_server_optimizer(**args)


def test_valid_boundaries_accepted():
  assert set(server_opt.SERVER_OPTIMIZERS) == {'sgd', 'sgdm', 'adagrad', 'adam', 'yogi'}
  for name in server_opt.SERVER_OPTIMIZERS:
    opt = server_opt.build_server_optimizer(name, 0.1, beta1=0.0)
    assert isinstance(opt, tff.learning.optimizers.Optimizer)
  # v_{-1} = tau^2 exactly is allowed even though 1e-3 ** 2 != 1e-6 in floating point.
  server_opt.build_server_optimizer('yogi', 0.1, tau=1e-3, initial_v=1e-6)
