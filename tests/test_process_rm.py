"""Representation matching, entropy regularisation and weight divergence as TFF client work."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tasks.base import Task, sparse_accuracy
from tasks.partition import client_data_from_arrays, partition
from tff_robust import client_work, evaluation, loop, matching, process, regularizers
from tff_robust.config import ClientConfig, ProcessConfig, ServerConfig

import test_process


def rm_process(rm_client_state, rm_weight=0.05, **client):
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=4, batch_size=8, rm_weight=rm_weight,
                                          **client), seed=3)
  return process.build_process(test_process.SPEC, cfg, rm_client_state=rm_client_state)


def manual_rm_client(w0, theta0, x, y, cfg: ClientConfig):
  """Eq. 2 (+ ER, WD) by hand in eager TF: the client's SGD on w^i and θ^i."""
  model, frozen = test_process.model_fn(), test_process.model_fn()
  for v, w in zip(model.trainable_variables, w0):
    v.assign(w)
  for v, w in zip(frozen.trainable_variables, w0):
    v.assign(w)
  matcher = matching.RepresentationMatcher(model, seed=3)
  for v, t in zip(matcher.theta, theta0):
    v.assign(t)
  loss = test_process.loss_fn()
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(cfg.batch_size).take(cfg.local_steps)
  for xb, yb in ds:
    _, facts, _ = matcher.forward(frozen, xb, training=False, record_argmax=False)
    with tf.GradientTape() as tape:
      logits, acts, arg = matcher.forward(model, xb, training=True, record_argmax=True)
      total = loss(yb, logits) + cfg.rm_weight * matcher.matching_loss(acts, arg, facts)
      if cfg.er_h_min > 0:
        total += regularizers.entropy_regularizer(logits, cfg.er_h_min)
      if cfg.wd_mu > 0:
        total += cfg.wd_mu * regularizers.weight_divergence(model.trainable_variables, w0)
    variables = model.trainable_variables + matcher.theta
    for v, g in zip(variables, tape.gradient(total, variables)):
      v.assign_sub(cfg.lr * g)
  return ([v.numpy() - w for v, w in zip(model.trainable_variables, w0)],
          [v.numpy() for v in matcher.theta])


def test_persisted_theta_round_trip_matches_hand_computation(tff_rt):
  p = rm_process("persist", er_h_min=0.5, wd_mu=0.1)
  assert p.next_with_client_states is not None
  clients = test_process.make_clients()
  theta0 = client_work.initial_theta(test_process.SPEC, seed=3)
  state = p.initialize()
  w0 = [np.asarray(v) for v in p.get_model_weights(state).trainable]
  inputs = [collections.OrderedDict(data=d, theta=theta0) for d in test_process.datasets(clients)]
  output, thetas = p.next_with_client_states(state, inputs)
  cfg = ClientConfig(lr=0.1, local_steps=4, batch_size=8, rm_weight=0.05, er_h_min=0.5, wd_mu=0.1)
  manual = [manual_rm_client(w0, theta0, x, y, cfg) for x, y in clients]
  expected = test_process.weighted_mean([m[0] for m in manual], [len(y) for _, y in clients])
  for got, w, d in zip(p.get_model_weights(output.state).trainable, w0, expected):
    np.testing.assert_allclose(got, w + d, atol=5e-5)
  for client_theta, (_, manual_theta) in zip(thetas, manual):
    for got, want, start in zip(client_theta, manual_theta, theta0):
      np.testing.assert_allclose(got, want, atol=5e-5)
    assert any(not np.allclose(g, s) for g, s in zip(client_theta, theta0))  # θ trained


def test_theta_is_not_in_the_aggregate(tff_rt):
  """The update a client sends holds only model deltas: θ never leaves it."""
  p = rm_process("persist")
  state_type = p.next.type_signature.result.state.member
  n_theta = len(client_work.theta_specs(test_process.SPEC, 3))
  trainable = state_type.core.model.trainable
  assert len(trainable) == len(test_process.model_fn().trainable_variables)
  assert n_theta > 0


def test_reset_uses_fresh_theta_each_round(tff_rt):
  """With reset, a round equals a persisted round started from the fresh θ."""
  reset, persist = rm_process("reset"), rm_process("persist")
  clients = test_process.make_clients()
  theta0 = client_work.initial_theta(test_process.SPEC, seed=3)
  state = reset.initialize()
  out_reset = reset.next(state, test_process.datasets(clients))
  inputs = [collections.OrderedDict(data=d, theta=theta0) for d in test_process.datasets(clients)]
  out_persist, _ = persist.next_with_client_states(persist.initialize(), inputs)
  for a, b in zip(reset.get_model_weights(out_reset.state).trainable,
                  persist.get_model_weights(out_persist.state).trainable):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_loop_persists_theta_by_client_id(tff_rt, tmp_path):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(120, 6)).astype(np.float32)
  y = np.argmax(x @ rng.normal(size=(6, 3)), 1).astype(np.int32)
  task = Task("toy", client_data_from_arrays(x, y, partition(y, 4, "iid")),
              tf.data.Dataset.from_tensor_slices((x, y)), test_process.model_fn,
              test_process.loss_fn, sparse_accuracy)
  p = rm_process("persist")
  theta0 = client_work.initial_theta(test_process.SPEC, seed=3)
  cfg = loop.LoopConfig(output_dir=str(tmp_path), rounds=3, clients_per_round=2, rounds_per_eval=3,
                        rounds_per_checkpoint=3, seed=1)
  driver = loop.TrainingLoop(p, task, cfg, initial_theta_fn=lambda cid: theta0)
  seen = {}
  original_put = driver.theta_store.put

  def spy(cid, state, round_num):
    seen.setdefault(cid, []).append(([np.array(s) for s in state], round_num))
    original_put(cid, state, round_num)

  driver.theta_store.put = spy
  original_input = driver.client_input
  received = {}

  def spy_input(cid, round_num, *args):
    out = original_input(cid, round_num, *args)
    received.setdefault(cid, []).append(([np.array(t) for t in out["theta"]], round_num))
    return out

  driver.client_input = spy_input
  driver.run()
  repeated = [cid for cid, rounds in received.items() if len(rounds) > 1]
  assert repeated, "the test needs a client sampled twice"
  for cid in repeated:
    # The θ a client receives is the one it trained the last time it was sampled.
    for (got, _), (last, _) in zip(received[cid][1:], seen[cid][:-1]):
      for g, l in zip(got, last):
        np.testing.assert_array_equal(g, l)
    for g, t in zip(received[cid][0][0], theta0):
      np.testing.assert_array_equal(g, t)


def test_fa_rm_trains_on_one_class_clients(tff_rt):
  """FA+RM learns a 3-class problem whose clients each hold a single class."""
  rng = np.random.default_rng(1)
  w = rng.normal(size=(6, 3))
  x = rng.normal(size=(600, 6)).astype(np.float32)
  y = np.argmax(x @ w, 1).astype(np.int32)
  parts = partition(y, 3, "one_class")
  clients = [(x[p], y[p]) for p in parts]
  p = rm_process("reset", rm_weight=0.05)
  state = p.initialize()
  for _ in range(30):
    state = p.next(state, test_process.datasets(clients)).state
  weights = p.get_model_weights(state)
  evaluate = evaluation.make_evaluator(test_process.model_fn, test_process.loss_fn, sparse_accuracy)
  acc = evaluate(weights.trainable, weights.non_trainable,
                 tf.data.Dataset.from_tensor_slices((x, y)).batch(100))["accuracy"]
  assert acc > 0.8  # chance is about 1/3
