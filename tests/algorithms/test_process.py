"""The learning process against hand computations of generalized FedAvg (seed 004, Alg. 2-4)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import client_work, evaluation, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.tasks.base import sparse_accuracy

from helpers.toy import (SPEC, datasets, loss_fn, make_clients, manual_client_delta,

                         model_fn, weighted_mean)

def build(opt="sgd", lr=1.0, weighting="num_examples", **server):
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=4, batch_size=8),
                      server=ServerConfig(opt=opt, lr=lr, **server), weighting=weighting, seed=3)
  return process.build_process(SPEC, cfg)


@pytest.fixture(scope="module")
def sgd_process(tff_rt):
  return build()


def test_one_round_is_weighted_fedavg(sgd_process):
  clients = make_clients()
  state = sgd_process.initialize()
  w0 = [np.asarray(v) for v in sgd_process.get_model_weights(state).trainable]
  out = sgd_process.next(state, datasets(clients))
  w1 = sgd_process.get_model_weights(out.state).trainable
  deltas = [manual_client_delta(w0, x, y, 0.1, 4, 8) for x, y in clients]
  expected = weighted_mean(deltas, [len(y) for _, y in clients])
  for got, w, d in zip(w1, w0, expected):
    np.testing.assert_allclose(got, w + d, atol=2e-5)
  assert float(out.metrics["num_clients"]) == 3
  assert float(out.metrics["examples_trained"]) == 3 * 4 * 8


@pytest.fixture(scope="module")
def epochs_process(tff_rt):
  """--local_steps=0 --local_epochs=2: the process of both whole-pass tests below, built once."""
  return process.build_process(SPEC, ProcessConfig(
      client=ClientConfig(lr=0.1, local_steps=0, local_epochs=2, batch_size=8), seed=3))


def test_one_round_equals_tff_build_weighted_fed_avg(epochs_process):
  """The default process (aggregator and zeroing included) makes TFF's own FedAvg round: client
  SGD, server SGD at lr 1, whole passes over unequal clients so both weight a delta by its
  examples. Ours makes E = 2 passes (the local-epochs test's process), TFF's one pass over each
  dataset repeated twice: the same batches (repeat, then batch; the last one short)."""
  clients = make_clients(sizes=(13, 20, 7))
  ours = epochs_process
  data = datasets(clients)
  batched = [d.repeat(2).batch(8) for d in data]

  def tff_model_fn():
    return tff.learning.models.from_keras_model(model_fn(), loss=loss_fn(),
                                                input_spec=batched[0].element_spec)
  fedavg = tff.learning.algorithms.build_weighted_fed_avg(
      tff_model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  state = ours.initialize()
  theirs = fedavg.set_model_weights(fedavg.initialize(), ours.get_model_weights(state))
  got = ours.get_model_weights(ours.next(state, data).state).trainable
  want = fedavg.get_model_weights(fedavg.next(theirs, batched).state).trainable
  assert not np.allclose(got[0], ours.get_model_weights(state).trainable[0])
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_local_epochs_round_is_weighted_fedavg_over_whole_passes(epochs_process):
  """--local_steps=0 --local_epochs=E (seed 004's E = 1, seed 003's E = 5): E passes, last batch short."""
  clients = make_clients(sizes=(13, 20))
  p = epochs_process
  state = p.initialize()
  w0 = [np.asarray(v) for v in p.get_model_weights(state).trainable]
  out = p.next(state, datasets(clients))
  deltas = [manual_client_delta(w0, x, y, 0.1, None, 8, epochs=2) for x, y in clients]
  expected = weighted_mean(deltas, [len(y) for _, y in clients])
  for got, w, d in zip(p.get_model_weights(out.state).trainable, w0, expected):
    np.testing.assert_allclose(got, w + d, atol=2e-5)
  assert float(out.metrics["examples_trained"]) == 2 * (13 + 20)


def test_nonfinite_client_never_reaches_model(sgd_process):
  clients = make_clients(nan_client=1)
  state = sgd_process.initialize()
  out = sgd_process.next(state, datasets(clients))
  good = sgd_process.next(state, datasets([clients[0], clients[2]]))
  for a, b in zip(sgd_process.get_model_weights(out.state).trainable,
                  sgd_process.get_model_weights(good.state).trainable):
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert float(out.metrics["nonfinite_clients"]) == 1
  assert float(out.metrics["train_loss"]) == pytest.approx(float(good.metrics["train_loss"]))


def test_all_clients_nonfinite_keeps_model(sgd_process):
  clients = make_clients(sizes=(10,), nan_client=0)
  state = sgd_process.initialize()
  out = sgd_process.next(state, datasets(clients))
  for a, b in zip(sgd_process.get_model_weights(out.state).trainable,
                  sgd_process.get_model_weights(state).trainable):
    np.testing.assert_array_equal(a, b)


def test_uniform_weighting_and_yogi_server_step(tff_rt):
  """Uniform weights, then Reddi et al.'s FedYogi step on that mean (β1, β2, τ, v_{-1}=τ²)."""
  clients = make_clients()
  p = build(opt="yogi", lr=0.05, weighting="uniform", beta1=0.9, beta2=0.99, tau=1e-2)
  state = p.initialize()
  w0 = [np.asarray(v) for v in p.get_model_weights(state).trainable]
  out = p.next(state, datasets(clients))
  deltas = [manual_client_delta(w0, x, y, 0.1, 4, 8) for x, y in clients]
  mean = weighted_mean(deltas, [1, 1, 1])
  tau = 1e-2
  for got, w, d in zip(p.get_model_weights(out.state).trainable, w0, mean):
    m = 0.1 * d
    v = tau**2 - 0.01 * d**2 * np.sign(tau**2 - d**2)
    np.testing.assert_allclose(got, w + 0.05 * m / (np.sqrt(v) + tau), atol=2e-5, rtol=1e-4)
  assert p.get_hparams(out.state)["learning_rate"] == pytest.approx(0.05)


def test_toy_problem_is_solved(sgd_process):
  clients = make_clients(sizes=(60, 60, 60, 60), seed=1)
  state = sgd_process.initialize()
  for _ in range(40):
    state = sgd_process.next(state, datasets(clients)).state
  weights = sgd_process.get_model_weights(state)
  evaluate = evaluation.make_evaluator(model_fn, loss_fn, sparse_accuracy)
  x = np.concatenate([c[0] for c in clients])
  y = np.concatenate([c[1] for c in clients])
  result = evaluate(weights.trainable, weights.non_trainable,
                    tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
  assert result["accuracy"] > 0.9


def skip_class_0(y_true, logits):
  """A masked accuracy (as Shakespeare's): targets of class 0 are not scored."""
  y = tf.reshape(tf.cast(y_true, tf.int64), [-1])
  keep = tf.cast(tf.not_equal(y, 0), tf.float32)
  hit = tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32)
  return tf.reduce_sum(hit * keep), tf.reduce_sum(keep)


def test_accuracy_divides_by_scored_predictions_not_examples(tff_rt):
  """Sequence tasks score tokens, not examples: accuracy = correct / scored, in eval and training."""
  (x, y), = make_clients(sizes=(24,), seed=5)
  weights = process.initial_weights(model_fn, 0)
  model = model_fn()
  for v, w in zip(model.trainable_variables, weights.trainable):
    v.assign(w)
  hit = np.argmax(model(x), 1) == y
  expected = hit[y != 0].mean()
  assert 0 < (y == 0).sum() < len(y)
  ev = evaluation.make_evaluator(model_fn, loss_fn, skip_class_0)
  got = ev(weights.trainable, weights.non_trainable, tf.data.Dataset.from_tensor_slices((x, y)).batch(5))
  assert got["accuracy"] == pytest.approx(expected)
  spec = client_work.ModelSpec(model_fn, loss_fn, skip_class_0, SPEC.element_spec)
  p = process.build_process(spec, ProcessConfig(client=ClientConfig(lr=0.1, local_steps=1, batch_size=24),
                                                seed=0))
  out = p.next(p.initialize(), datasets([(x, y)]))  # one full-batch step: scored on w_0's logits
  assert float(out.metrics["train_accuracy"]) == pytest.approx(expected)


def test_val_accuracy_weighting_uses_client_validation(tff_rt):
  """Seed 003's heuristic: each client's delta weighted by its held-out accuracy."""
  p = build(weighting="val_accuracy")
  clients = make_clients(sizes=(40, 40, 40), seed=2)
  state = p.initialize()
  w0 = [np.asarray(v) for v in p.get_model_weights(state).trainable]
  inputs = [collections.OrderedDict(data=tf.data.Dataset.from_tensor_slices((x[10:], y[10:])),
                                    val=tf.data.Dataset.from_tensor_slices((x[:10], y[:10])))
            for x, y in clients]
  out = p.next(state, inputs)
  deltas, accs = [], []
  for x, y in clients:
    d = manual_client_delta(w0, x[10:], y[10:], 0.1, 4, 8)
    model = model_fn()
    for v, w, dd in zip(model.trainable_variables, w0, d):
      v.assign(w + dd)
    accs.append(np.mean(np.argmax(model(x[:10]).numpy(), 1) == y[:10]))
    deltas.append(d)
  assert len(set(accs)) > 1, "the test needs clients with different validation accuracy"
  expected = weighted_mean(deltas, accs)
  for got, w, d in zip(p.get_model_weights(out.state).trainable, w0, expected):
    np.testing.assert_allclose(got, w + d, atol=2e-5)
  assert float(out.metrics["client_val_accuracy"]) == pytest.approx(np.mean(accs), abs=1e-6)


@pytest.mark.parametrize("opt,server", [("sgd", {}), ("sgdm", {"momentum": 0.5})])
def test_server_lr_decays_per_round(tff_rt, opt, server):
  """η_t = η γ^t: FedAvg(M) rounds 0, 1, 2 step with 0.8, 0.8·0.5, 0.8·0.25 (seed 002's arms)."""
  clients = make_clients(sizes=(30, 50))
  p = build(opt=opt, lr=0.8, lr_decay=0.5, **server)
  state = p.initialize()
  momentum = server.get("momentum", 0.0)
  m = None
  for t in range(3):
    w = [np.asarray(v) for v in p.get_model_weights(state).trainable]
    state = p.next(state, datasets(clients)).state
    deltas = [manual_client_delta(w, x, y, 0.1, 4, 8) for x, y in clients]
    mean = weighted_mean(deltas, [30, 50])
    m = mean if m is None else [momentum * a + d for a, d in zip(m, mean)]
    for got, w_t, m_t in zip(p.get_model_weights(state).trainable, w, m):
      np.testing.assert_allclose(got, w_t + 0.8 * 0.5**t * m_t, atol=3e-5, rtol=1e-4)
