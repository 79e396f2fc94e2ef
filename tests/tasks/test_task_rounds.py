"""One federated round of the learning process on every task, from same-format test data."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from tff_robust import tasks
from tff_robust.algorithms import client_work, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.tasks import TaskOptions
from tff_robust.tasks import espeak_corpus

from helpers import data_makers
from helpers import data_makers_more


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("round_data"))
  data_makers_more.make_cifar100_sqlite(d)
  data_makers_more.make_shakespeare_sqlite(d)
  data_makers_more.make_stackoverflow_sqlite(d)
  data_makers_more.make_stackoverflow_counts(d)
  data_makers.make_emnist_sqlite(d)
  return d


def one_round(task, server_opt="sgd", rm_weight=0.0):
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  p = process.build_process(spec, ProcessConfig(
      client=ClientConfig(lr=0.01, local_steps=1, batch_size=4),
      server=ServerConfig(opt=server_opt, lr=0.01), methods=(RMConfig(weight=rm_weight, client_state="reset"),)))
  ids = sorted(task.train.client_ids)[:2]
  state = p.initialize()
  out = p.next(state, [task.train.create_tf_dataset_for_client(c) for c in ids])
  m = out.metrics
  assert float(m["num_clients"]) == 2 and float(m["nonfinite_clients"]) == 0
  assert math.isfinite(float(m["train_loss"]))
  before = p.get_model_weights(state).trainable
  after = p.get_model_weights(out.state).trainable
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
  return m


@pytest.mark.parametrize("name", ["shakespeare", "emnist_ae", "emnist_cr", "stackoverflow_nwp",
                                  "stackoverflow_lr"])
def test_round_on_tff_sqlite_tasks(tff_rt, data_dir, name):
  one_round(tasks.load_task(name, TaskOptions(data_dir=data_dir)), server_opt="adam")


def _small_cifar100_cnn() -> tf.keras.Model:
  return tf.keras.Sequential([tf.keras.Input((24, 24, 3)), tf.keras.layers.Conv2D(4, 3, strides=4),
                              tf.keras.layers.Flatten(), tf.keras.layers.Dense(100)])


def test_round_on_tff_sqlite_cifar100_data(tff_rt, data_dir):
  """CIFAR-100's client data through a round, with a small CNN in place of the ResNet-18 (whose
  round is in the slow suite; its logits are checked in test_tasks_more)."""
  task = tasks.load_task("cifar100", TaskOptions(data_dir=data_dir))
  one_round(dataclasses.replace(task, model_fn=_small_cifar100_cnn), server_opt="adam")


@pytest.mark.slow
def test_round_on_tff_sqlite_cifar100_resnet(tff_rt, data_dir):
  one_round(tasks.load_task("cifar100", TaskOptions(data_dir=data_dir)), server_opt="adam")


@pytest.mark.parametrize("rm_weight", [0.0, 1.0])
def test_round_on_cifar10_tfds(tff_rt, rm_weight):
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=40):
    task = tasks.load_task("cifar10", TaskOptions(partition="iid", num_clients=4))
  m = one_round(task, rm_weight=rm_weight)
  if rm_weight:  # the conv stack's matching terms: input <- conv1 <- conv2 (unpooled) <- dense <- logits
    terms = [float(m[f"rm_loss_{j}"]) for j in range(4)]
    assert all(math.isfinite(t) and t > 0 for t in terms)
    assert math.isclose(sum(terms), float(m["rm_loss"]), rel_tol=1e-5)


@pytest.mark.skipif(espeak_corpus.espeak_binary() is None,
                    reason="espeak-ng is not installed (apt-get install -y espeak-ng)")
def test_round_on_speech_commands_folder(tff_rt, tmp_path):
  data_makers_more.make_espeak_folder(str(tmp_path), num_speakers=6, repeats=1, seed=1)
  task = tasks.load_task("speech_commands", TaskOptions(data_dir=str(tmp_path), partition="iid",
                                                         num_clients=3))
  x, _ = next(iter(task.train.create_tf_dataset_for_client(task.train.client_ids[0])))
  assert x.shape == (32, 32, 1) and x.dtype == tf.float32
  one_round(task)
