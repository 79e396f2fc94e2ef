"""Evaluation on the clients' own data, as in seed 002's tuning protocol.

Each client's examples are split by position (`ClientSplits`): every
``test_every``-th one is its test data T_i, every ``client_val_every``-th of the
rest its validation data V_i; neither is ever trained on. With per-example
loss l(w; x, y):

* federated validation loss (ranks the arms of a study)
    L_V(w) = sum_i sum_{(x,y) in V_i} l(w; x, y) / sum_i |V_i|
* "global": the global model w on the pooled T_i, example-weighted the same way;
* "refine": client i first fine-tunes w with its local training Loc_c on its own
  training data (c the most likely configuration of FedEx's theta, or c ~ theta;
  without FedEx the run's client configuration), then is evaluated on T_i.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import client_work
from tff_robust.algorithms import evaluation
from tff_robust.algorithms.methods.fedex import update as fedex_lib
from tff_robust.algorithms import round_protocol
from tff_robust.algorithms.methods.fedex import FedExSampling, FedExServer
from tff_robust.simulation.client_data import split_validation

REFINE_CONFIGS = ("most_likely", "sample")
ModelWeights = tff.learning.models.ModelWeights


def _parts(dataset: tf.data.Dataset, test_every: int, val_every: int):
  rest, test = split_validation(dataset, test_every)
  train, val = split_validation(rest, val_every)
  return train, val, test


@dataclasses.dataclass(frozen=True)
class ClientSplits:
  """Each client's train / validation / test parts, by position: test every ``test_every``-th
  example, validation every ``val_every``-th of the rest, train what is left."""

  client_data: tff.simulation.datasets.ClientData  # the full data
  test_every: int
  val_every: int

  def __post_init__(self):
    if self.test_every < 2:
      raise ValueError(f"--tune_test_every must be >= 2, got {self.test_every}")
    if self.val_every < 2:
      raise ValueError(f"--client_val_every must be >= 2, got {self.val_every}")

  def _of(self, cid: str):
    return _parts(self.client_data.create_tf_dataset_for_client(cid), self.test_every, self.val_every)

  def train(self, cid: str) -> tf.data.Dataset:
    return self._of(cid)[0]

  def val(self, cid: str) -> tf.data.Dataset:
    return self._of(cid)[1]

  def test(self, cid: str) -> tf.data.Dataset:
    return self._of(cid)[2]

  def training_data(self) -> tff.simulation.datasets.ClientData:
    """The clients' data without their validation and test parts (what arms train on)."""
    t, v = self.test_every, self.val_every
    return self.client_data.preprocess(lambda ds: _parts(ds, t, v)[0])


def _pooled(sums: Sequence[tuple[float, float, float, float]], has_accuracy: bool) -> dict[str, float]:
  """Example-weighted loss (and pooled accuracy) from per-client `evaluation.evaluate` sums."""
  total = np.sum(np.asarray(sums, np.float64), axis=0) if sums else np.zeros(4)
  return {**evaluation.metrics_from_sums(*total, has_accuracy=has_accuracy),
          "examples": float(total[3])}


class FederatedEvaluator:
  """Global-model metrics summed over clients' datasets; the model is built and traced once."""

  def __init__(self, spec: client_work.ModelSpec, batch_size: int = 256):
    self._spec = spec
    self._batch = batch_size
    self._sums = evaluation.make_sums(spec.model_fn, spec.loss_fn, spec.accuracy_fn)

  def client_sums(self, weights: ModelWeights,
                  dataset: tf.data.Dataset) -> tuple[float, float, float, float]:
    out = self._sums(list(weights.trainable), list(weights.non_trainable), dataset.batch(self._batch))
    return tuple(float(v) for v in out)

  def pooled(self, weights: ModelWeights, datasets: Sequence[tf.data.Dataset]) -> dict[str, float]:
    """Loss (accuracy) of ``weights`` over the union of ``datasets``, example-weighted."""
    return _pooled([self.client_sums(weights, d) for d in datasets], self._spec.accuracy_fn is not None)


def refine_theta(theta: np.ndarray, how: str) -> np.ndarray:
  """The distribution refine samples from: θ itself, or one-hot at argmax θ (per row)."""
  if how not in REFINE_CONFIGS:
    raise ValueError(f"--tune_refine={how!r} is not valid; choices: {', '.join(REFINE_CONFIGS)}")
  theta = np.asarray(theta, np.float32)
  if how == "sample":
    return theta
  return np.eye(theta.shape[-1], dtype=np.float32)[np.argmax(theta, axis=-1)]


class Refiner:
  """Seed 002's "refine": each client runs its local training Loc_c from w on its own
  training data, then the tuned model is evaluated on its test data. Traced once."""

  def __init__(self, trainer: client_work.ClientTrainer, batch_size: int = 256):
    spec = trainer.spec
    self._trainer = trainer
    self._spec = spec
    # The client state's initial values (RM's θ) come from a private graph, and Keras invalidates
    # the eager models made before a model is built in a graph: take them before any model here.
    self._state0 = trainer.initial_state()
    local = trainer.local_trainer()
    model, loss = spec.model_fn(), spec.loss_fn()

    @tf.function
    def refine(broadcast, data, val, state, seed, test):
      out = local(broadcast, data, val, state, seed)
      weights = broadcast.model
      tuned = [w + d for w, d in zip(weights.trainable, out.delta)]
      evaluation.assign_weights(model, tuned, weights.non_trainable)
      return evaluation.evaluate(model, test.batch(batch_size), loss, spec.accuracy_fn)

    self._refine = refine

  def __call__(self, weights: ModelWeights, lr: float, steps: int, splits: ClientSplits,
               client_ids: Sequence[str], *, fedex_theta: Optional[np.ndarray] = None,
               how: str = "most_likely", seed: int = 0) -> dict[str, float]:
    """Pooled test metrics after every client in ``client_ids`` fine-tuned ``weights``."""
    model = ModelWeights(trainable=list(weights.trainable), non_trainable=list(weights.non_trainable))
    hparams = round_protocol.RoundHparams(lr=np.float32(lr), steps=np.int32(steps))
    parts, entries = [], {}
    if self._trainer.component(FedExSampling.key) is not None:
      if fedex_theta is None:
        raise ValueError("a FedEx run's refine evaluation needs its θ")
      parts.append(FedExServer)  # what the round would broadcast, with θ as refine draws from it
      entries[FedExServer.key] = FedExServer.entry_of(refine_theta(fedex_theta, how))
    broadcast = round_protocol.make_broadcast(model, hparams, parts, entries)
    sums = []
    for index, cid in enumerate(client_ids):
      data, val = splits.train(cid), splits.val(cid)
      client_seed = np.asarray(fedex_lib.client_seed(seed, -1, index), np.int64)
      out = self._refine(broadcast, data, val, self._state0, client_seed, splits.test(cid))
      sums.append(tuple(float(v) for v in out))
    return _pooled(sums, self._spec.accuracy_fn is not None)
