"""Evaluation on the clients' own data (seed 002): splits, pooled loss, and "refine"."""

import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import client_work, process
from tff_robust.algorithms.methods import fedex as fedex_method
from tff_robust.algorithms.methods.fedex import update as fedex
from tff_robust.algorithms.methods.rm import matching_client
from tff_robust.algorithms.methods.fedex import space as fedex_space
from tff_robust.algorithms.config import ClientConfig, ProcessConfig
from tff_robust.algorithms.methods.fedex.space import FedExConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.tuning import federated_eval

from helpers.rm_by_hand import manual_rm_client
from helpers.toy import SPEC, loss_fn, make_clients, manual_client_delta, model_fn


def client_data(clients):
  data = {f"c{k}": c for k, c in enumerate(clients)}
  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      sorted(data), lambda cid: tf.data.Dataset.from_tensor_slices(data[cid]))


class KeptSplits(federated_eval.ClientSplits):
  """`ClientSplits` that makes each client's parts once: each call of ``train``/``val``/``test``
  splits the client's data anew, tracing the map and filter functions of all three parts (about
  0.1 CPU-s a call, 10-20 calls per refine test between the refiner and the hand computation).
  The parts are the same datasets; `test_splits_are_disjoint_and_cover_each_client` checks them on
  `ClientSplits` itself."""

  @functools.lru_cache(maxsize=None)
  def train(self, cid):
    return super().train(cid)

  @functools.lru_cache(maxsize=None)
  def val(self, cid):
    return super().val(cid)

  @functools.lru_cache(maxsize=None)
  def test(self, cid):
    return super().test(cid)


def as_array(ds):
  return np.array([x for x, _ in ds.as_numpy_iterator()])


def test_splits_are_disjoint_and_cover_each_client():
  clients = make_clients(sizes=(23, 40))
  splits = federated_eval.ClientSplits(client_data(clients), test_every=5, val_every=4)
  for k, (x, _) in enumerate(clients):
    cid = f"c{k}"
    parts = [as_array(splits.train(cid)), as_array(splits.val(cid)), as_array(splits.test(cid))]
    assert sum(len(p) for p in parts) == len(x)
    np.testing.assert_array_equal(parts[2], x[::5])  # positions 0, 5, 10, ...
    rest = np.delete(x, np.arange(0, len(x), 5), axis=0)
    np.testing.assert_array_equal(parts[1], rest[::4])
    trained = as_array(splits.training_data().create_tf_dataset_for_client(cid))
    np.testing.assert_array_equal(trained, parts[0])
  with pytest.raises(ValueError, match="--tune_test_every must be >= 2, got 1"):
    federated_eval.ClientSplits(client_data(clients), test_every=1, val_every=4)


def test_pooled_metrics_weight_clients_by_examples():
  clients = make_clients(sizes=(10, 30))
  weights = process.initial_weights(model_fn, 0)
  evaluator = federated_eval.FederatedEvaluator(SPEC, batch_size=7)
  got = evaluator.pooled(weights, [tf.data.Dataset.from_tensor_slices(c) for c in clients])
  model = model_fn()
  for v, w in zip(model.trainable_variables, weights.trainable):
    v.assign(w)
  x = np.concatenate([c[0] for c in clients])
  y = np.concatenate([c[1] for c in clients])
  logits = model(x)
  per_example = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
  assert got["loss"] == pytest.approx(float(np.mean(per_example)), rel=1e-5)
  assert got["accuracy"] == pytest.approx(float(np.mean(np.argmax(logits, 1) == y)))
  assert got["examples"] == 40


def refine_by_hand(weights, clients, splits, lr, steps, batch, local=None):
  """Each client: plain SGD (or ``local(w0, x, y)``'s delta) from w on its training part, then
  CE/accuracy on its test part."""
  loss_sum, correct, count = 0.0, 0.0, 0
  model = model_fn()
  for k in range(len(clients)):
    cid = f"c{k}"
    train = list(splits.train(cid).as_numpy_iterator())
    x = np.array([a for a, _ in train])
    y = np.array([b for _, b in train])
    w0 = [np.asarray(v) for v in weights.trainable]
    delta = local(w0, x, y) if local else manual_client_delta(w0, x, y, lr, steps, batch)
    for v, w, d in zip(model.trainable_variables, w0, delta):
      v.assign(w + d)
    test = list(splits.test(cid).as_numpy_iterator())
    xt, yt = np.array([a for a, _ in test]), np.array([b for _, b in test])
    logits = model(xt)
    loss_sum += float(np.sum(loss_fn()(yt, logits) * len(yt)))
    correct += float(np.sum(np.argmax(logits, 1) == yt))
    count += len(yt)
  return loss_sum / count, correct / count


def test_refine_is_local_sgd_then_test_metrics():
  clients = make_clients(sizes=(40, 60), seed=2)
  splits = KeptSplits(client_data(clients), test_every=4, val_every=5)
  weights = process.initial_weights(model_fn, 1)
  trainer = client_work.ClientTrainer(SPEC, ClientConfig(lr=0.2, local_steps=6, batch_size=8),
                                      "num_examples")
  got = federated_eval.Refiner(trainer, batch_size=4)(weights, 0.2, 6, splits, ["c0", "c1"])
  loss, acc = refine_by_hand(weights, clients, splits, 0.2, 6, 8)
  assert got["loss"] == pytest.approx(loss, rel=1e-4)
  assert got["accuracy"] == pytest.approx(acc)
  untuned = federated_eval.FederatedEvaluator(SPEC).pooled(weights, [splits.test("c0"), splits.test("c1")])
  assert got["loss"] < untuned["loss"]  # fine-tuning on the client's own data helps here


def test_refine_trains_an_rm_client_as_eq2_by_hand():
  """A study with --rm_weight > 0: refine's local training is eq. 2 with a fresh θ^i (its own
  Adam), traced once for every client (θ's optimizer state is made with the models)."""
  clients = make_clients(sizes=(40, 60), seed=4)
  splits = KeptSplits(client_data(clients), test_every=4, val_every=5)
  weights = process.initial_weights(model_fn, 1)
  rm_cfg = RMConfig(weight=0.5, client_state="reset")  # θ fresh per client
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=5, batch_size=8), methods=(rm_cfg,))
  rm = matching_client.RepresentationMatching(SPEC, rm_cfg, cfg.client.lr, seed=3)
  trainer = client_work.ClientTrainer(SPEC, cfg.client, "num_examples", [rm])
  refiner = federated_eval.Refiner(trainer, batch_size=4)
  got = refiner(weights, 0.1, 5, splits, ["c0", "c1"])
  theta0 = matching_client.initial_theta(SPEC, 3)
  loss, acc = refine_by_hand(weights, clients, splits, 0.1, 5, 8,
                             local=lambda w0, x, y: manual_rm_client(w0, theta0, x, y, cfg)[0])
  plain, _ = refine_by_hand(weights, clients, splits, 0.1, 5, 8)
  assert got["loss"] == pytest.approx(loss, rel=1e-4)
  assert got["accuracy"] == pytest.approx(acc)
  assert abs(loss - plain) > 1e-3  # the matching term changed the local training
  again = refiner(weights, 0.1, 5, splits, ["c1", "c0"])  # same clients again: same tuned models
  assert again["loss"] == pytest.approx(got["loss"], rel=1e-5)


def test_refine_uses_the_most_likely_fedex_configuration():
  """θ puts most mass on configuration 2: refine must train with its learning rate and steps."""
  clients = make_clients(sizes=(40, 60), seed=3)
  splits = KeptSplits(client_data(clients), test_every=4, val_every=5)
  space = fedex_space.SearchSpace(learning_rate=fedex_space.Range(0.01, 0.5, log=True), momentum=None,
                            weight_decay=None, local_epochs=None, local_steps=(2, 4, 6, 8),
                            batch_size=None)
  options = fedex_space.FedExOptions(k=4, radius=1.0, seed=5)
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=4, batch_size=8),
                      fedex=FedExConfig(space=space, options=options))
  fx = fedex_method.fedex_client(cfg)
  trainer = client_work.ClientTrainer(SPEC, cfg.client, "num_examples", [fedex.FedExSampling(fx)])
  theta = np.array([0.2, 0.1, 0.4, 0.3], np.float32)
  weights = process.initial_weights(model_fn, 1)
  refiner = federated_eval.Refiner(trainer, batch_size=4)
  got = refiner(weights, 0.1, 4, splits, ["c0", "c1"], fedex_theta=theta, how="most_likely")
  lr, steps = float(fx.configs["learning_rate"][2]), int(fx.configs["local_steps"][2])
  loss, acc = refine_by_hand(weights, clients, splits, lr, steps, 8)
  assert got["loss"] == pytest.approx(loss, rel=1e-4)
  assert got["accuracy"] == pytest.approx(acc)
  np.testing.assert_array_equal(federated_eval.refine_theta(theta, "most_likely"), [0, 0, 1, 0])
  np.testing.assert_array_equal(federated_eval.refine_theta(theta, "sample"), theta)
  with pytest.raises(ValueError, match="--tune_refine='best' is not valid; choices: most_likely, sample"):
    federated_eval.refine_theta(theta, "best")
