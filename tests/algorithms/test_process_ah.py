"""Adaptive hyper-parameters inside the process: h_t sampling, reward, eq. 7 update, resume."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import client_work, evaluation, process
from tff_robust.algorithms.methods.ah import reinforce
from tff_robust.algorithms.methods.ah import hparam_grid
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.methods.ah.policy import AdaptiveHparams
from tff_robust.simulation import loop

from helpers import toy

AH = AHConfig(lr_grid=(0.01, 0.03, 0.1, 0.3), steps_grid=(2, 4, 8), window=3, hyper_lr=0.5)


def _val(clients):
  x = np.concatenate([c[0] for c in clients])[:40]
  y = np.concatenate([c[1] for c in clients])[:40]
  return x, y


@functools.lru_cache(maxsize=None)
def _evaluator():
  """One evaluator (one model, traced once per batch shape) for every loss of the module."""
  return evaluation.make_evaluator(toy.model_fn, toy.loss_fn, None)


def _loss(weights, val):
  return _evaluator()(weights.trainable, weights.non_trainable,
                      tf.data.Dataset.from_tensor_slices(val).batch(256))["loss"]


def test_server_source_round_matches_policy_functions(tff_rt):
  clients = toy.make_clients(sizes=(40, 40, 40), seed=4)
  val = _val(clients)
  cfg = ProcessConfig(client=ClientConfig(local_steps=4, batch_size=8),
                      server=ServerConfig(opt="sgd", lr=1.0), ah=AH, seed=7)
  p = process.build_process(toy.SPEC, cfg, server_val=val)
  policy = AH.policy_config()
  points, values = hparam_grid.normalized_grid(policy), hparam_grid.grid_values(policy)
  state = p.initialize()
  ah0 = AdaptiveHparams.policy_state(state)
  # L_1 = Loss(w_1) on the server's validation set (Algorithm 1, line 2).
  assert float(ah0.last_loss) == pytest.approx(_loss(p.get_model_weights(state), val), rel=1e-5)
  for t in (1, 2, 3, 4):
    before = AdaptiveHparams.policy_state(state)
    seed = tf.constant([7, t], tf.int64)
    index, sampled = reinforce.sample(before, points, seed)
    out = p.next(state, toy.datasets(clients))
    m = out.metrics
    assert float(m["client_lr"]) == pytest.approx(values[int(index), 0], rel=1e-6)
    assert int(m["local_steps"]) == int(round(values[int(index), 1]))
    l_next = _loss(p.get_model_weights(out.state), val)
    assert float(m["ah_loss"]) == pytest.approx(l_next, rel=1e-4)
    assert float(m["ah_reward"]) == pytest.approx(
        (float(before.last_loss) - l_next) / float(before.last_loss), rel=1e-3, abs=1e-6)
    expected, _ = reinforce.observe_loss(sampled, float(m["ah_loss"]), policy.hyper_lr,
                                         hparam_grid.bounds(policy), policy.min_reward)
    after = AdaptiveHparams.policy_state(out.state)
    np.testing.assert_allclose(after.mu, expected.mu, atol=1e-5)
    np.testing.assert_allclose(after.log_prec, expected.log_prec, atol=1e-5)
    assert int(after.count) == min(t, AH.window + 1)
    state = out.state
  assert not np.allclose(AdaptiveHparams.policy_state(state).mu, ah0.mu)  # ψ moved


def test_client_source_reports_pre_training_loss(tff_rt):
  clients = toy.make_clients(sizes=(40, 40), seed=5)
  ah = AHConfig(lr_grid=(0.03, 0.1), steps_grid=(2, 4), window=2, loss_source="clients",
                client_eval_batches=1)
  cfg = ProcessConfig(client=ClientConfig(local_steps=4, batch_size=8), ah=ah, seed=1)
  p = process.build_process(toy.SPEC, cfg)
  state = p.initialize()
  weights = p.get_model_weights(state)
  out = p.next(state, toy.datasets(clients))
  # L_t: the received model on each client's first batch, example-weighted.
  first = [(x[:8], y[:8]) for x, y in clients]
  expected = np.mean([_loss(weights, b) for b in first])
  assert float(out.metrics["ah_loss"]) == pytest.approx(expected, rel=1e-4)
  assert int(AdaptiveHparams.policy_state(out.state).count) == 0  # L_{t-1} unknown in round 1: no update yet
  out2 = p.next(out.state, toy.datasets(clients))
  assert int(AdaptiveHparams.policy_state(out2.state).count) == 1


def test_policy_state_survives_checkpoint_bit_for_bit(tff_rt, tmp_path):
  task = toy.toy_task()
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  x, y = next(iter(task.test.batch(60)))
  proc = process.build_process(spec, ProcessConfig(
      client=ClientConfig(local_steps=3, batch_size=16), ah=AH, seed=2),
      server_val=(x.numpy(), y.numpy()))
  full, _ = toy.run_loop(task, str(tmp_path / "full"), 4, proc)
  toy.run_loop(task, str(tmp_path / "resumed"), 2, proc)
  resumed, _ = toy.run_loop(task, str(tmp_path / "resumed"), 4, proc)
  a, b = AdaptiveHparams.policy_state(full.state), AdaptiveHparams.policy_state(resumed.state)
  for field in reinforce.PolicyState._fields:
    np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)))
  assert [h["local_steps"] for h in full.history[2:]] == [h["local_steps"] for h in resumed.history]
