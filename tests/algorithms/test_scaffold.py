"""SCAFFOLD (option II control variates) against a hand computation of two rounds in NumPy."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import client_work, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.algorithms.methods.scaffold import ScaffoldServer
from tff_robust.simulation import loop

from helpers import toy
from helpers.flag_parse import parse

LR, STEPS, SERVER_LR, N = 0.1, 2, 0.5, 3  # N: the task's clients; 2 of them train each round


def model_fn():
  return tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])  # ŷ = x W + b


SPEC = client_work.ModelSpec(model_fn, tf.keras.losses.MeanSquaredError, None,
                             (tf.TensorSpec([2], tf.float32), tf.TensorSpec([1], tf.float32)))


def clients():
  rng = np.random.default_rng(0)
  out = []
  for shift in (1.0, -2.0):  # two clients whose optima differ (client drift)
    x = rng.normal(size=(4, 2)).astype(np.float32)
    out.append((x, (x @ np.array([[1.0], [-1.0]]) + shift).astype(np.float32)))
  return out


def grad(w, x, y):
  """∇ of mean((x W + b − y)²) at w = [W, b]."""
  r = x @ w[0] + w[1] - y
  return [2.0 * x.T @ r / len(x), 2.0 * r.sum(0) / len(x)]


def hand_round(x, c, c_is, data):
  """Algorithm 1 of Karimireddy et al. (option II) for one round over all of ``data``'s clients."""
  ys, new_cs = [], []
  for c_i, (xs, ts) in zip(c_is, data):
    y = [v.copy() for v in x]
    for _ in range(STEPS):  # one batch = the client's 4 examples
      g = grad(y, xs, ts)
      y = [v - LR * (gv - a + b) for v, gv, a, b in zip(y, g, c_i, c)]
    ys.append(y)
    new_cs.append([a - b + (xv - yv) / (STEPS * LR) for a, b, xv, yv in zip(c_i, c, x, y)])
  dx = [np.mean([y[j] - x[j] for y in ys], 0) for j in range(2)]
  dc = [np.mean([n[j] - o[j] for n, o in zip(new_cs, c_is)], 0) for j in range(2)]
  s = len(data)
  return ([xv + SERVER_LR * d for xv, d in zip(x, dx)], [cv + s / N * d for cv, d in zip(c, dc)], new_cs)


@functools.lru_cache(maxsize=None)
def hand_process():
  """SCAFFOLD on `SPEC` as `hand_round` computes it, built once: the tests start from their own
  ``initialize()`` (a process holds no training state)."""
  cfg = ProcessConfig(client=ClientConfig(lr=LR, local_steps=STEPS, batch_size=4),
                      server=ServerConfig(opt="sgd", lr=SERVER_LR), weighting="uniform", algorithm="scaffold")
  return process.build_process(SPEC, cfg, num_clients=N)


def test_two_rounds_match_the_hand_computation_with_the_control_variates(tff_rt):
  p = hand_process()
  data = clients()
  state = p.initialize()
  x = [np.asarray(v, np.float64) for v in p.get_model_weights(state).trainable]
  c = [np.zeros_like(v) for v in x]
  c_is = [[np.zeros_like(v) for v in x] for _ in data]
  received = [collections.OrderedDict(scaffold=[v.astype(np.float32) for v in ci]) for ci in c_is]
  for _ in range(2):
    inputs = [collections.OrderedDict(data=tf.data.Dataset.from_tensor_slices(d), state=s)
              for d, s in zip(data, received)]
    out, received = p.next_with_client_states(state, inputs)
    state = out.state
    x, c, c_is = hand_round(x, c, c_is, data)
    for got, want in zip(p.get_model_weights(state).trainable, x):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(ScaffoldServer.control(state), c):  # the server's c
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got_client, want_client in zip(received, c_is):  # each client's c_i
      for got, want in zip(got_client["scaffold"], want_client):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(c[0]).max() > 1e-3  # the control variates moved
    # c stays the mean of all N clients' c_i (the third client's is still 0)
    np.testing.assert_allclose(c[0], sum(ci[0] for ci in c_is) / N, atol=1e-6)
  assert float(out.metrics["scaffold_c_norm"]) == pytest.approx(
      float(np.sqrt(sum(np.sum(v ** 2) for v in c))), rel=1e-5)


def test_a_dropped_client_keeps_its_control_variate(tff_rt):
  p = hand_process()  # the hand computation's setup (uniform weights, server lr 0.5): any will do
  (xa, ya), (xb, yb) = clients()
  xb = xb.copy()
  xb[0, 0] = np.nan
  start = [np.full([2, 1], 0.25, np.float32), np.full([1], -0.5, np.float32)]
  inputs = [collections.OrderedDict(data=tf.data.Dataset.from_tensor_slices(d), state={"scaffold": start})
            for d in ((xa, ya), (xb, yb))]
  out, states = p.next_with_client_states(p.initialize(), inputs)
  assert float(out.metrics["nonfinite_clients"]) == 1
  for got, want in zip(states[1]["scaffold"], start):
    np.testing.assert_array_equal(got, want)
  assert all(np.all(np.isfinite(v)) for v in ScaffoldServer.control(out.state))


def test_the_flag_fails_fast_naming_flag_value_and_choices():
  with pytest.raises(Exception, match=r"(?s)algorithm.*nope.*fedavg.*scaffold"):
    parse("--algorithm=nope")
  with pytest.raises(ValueError, match=r"--algorithm='nope' is not valid: choose one of fedavg, scaffold"):
    ProcessConfig(algorithm="nope")
  with pytest.raises(ValueError, match=r"--rm_weight=0.1 is not valid: must be 0 with --algorithm=scaffold"):
    parse("--algorithm=scaffold", "--rm_weight=0.1")
  assert parse("--algorithm=scaffold").process.algorithm == "scaffold"


def test_the_driver_keeps_each_clients_c_i_and_a_resumed_run_equals_an_uninterrupted_one(tff_rt, tmp_path):
  """c_i lives in the driver's state store (with --rm_client_state=reset too: that flag is RM's)
  and in the checkpoint: 2 + 2 rounds equal 4 rounds, weights and every stored c_i."""
  task = toy.toy_task()
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn, task.train.element_type_structure)
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=3, batch_size=8),
                      methods=(RMConfig(client_state="reset"),), algorithm="scaffold", seed=1)

  # One built process serves the three runs: a process holds no training state (c lives in the
  # state the driver checkpoints, the c_i in its state store), so the resumed run starts from
  # nothing but what the first run wrote.
  p = process.build_process(spec, cfg, num_clients=len(task.train.client_ids))

  def run(out, rounds):
    driver = loop.TrainingLoop(p, task, loop.LoopConfig(output_dir=out, rounds=rounds, clients_per_round=3,
                                                        rounds_per_eval=2, rounds_per_checkpoint=2, seed=5))
    driver.run()
    return driver

  full = run(str(tmp_path / "full"), 4)
  run(str(tmp_path / "resumed"), 2)
  resumed = run(str(tmp_path / "resumed"), 4)
  for a, b in zip(full.process.get_model_weights(full.state).trainable,
                  resumed.process.get_model_weights(resumed.state).trainable):
    np.testing.assert_array_equal(a, b)
  stored = 0
  for cid in task.train.client_ids:
    a, b = full.state_store.get(cid)["scaffold"], resumed.state_store.get(cid)["scaffold"]
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)
    stored += any(np.abs(x).max() > 0 for x in a)
  assert stored >= 3  # the clients that trained keep a non-zero c_i
  assert full.history[-1]["scaffold_c_norm"] == resumed.history[-1]["scaffold_c_norm"] > 0


def test_the_console_names_the_algorithm():
  from tff_robust.algorithms.config import ProcessConfig  # pylint: disable=g-import-not-at-top
  from tff_robust.algorithms.methods import registry  # pylint: disable=g-import-not-at-top
  assert registry.describe(ProcessConfig(algorithm="scaffold")).startswith("SCAFFOLD, server sgd")
  assert registry.describe(ProcessConfig()).startswith("server sgd")
