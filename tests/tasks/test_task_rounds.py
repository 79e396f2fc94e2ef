"""One federated round of the learning process on every task, from same-format test data
(speech_commands' round is test_tasks_more's, on the keyword corpus that module builds anyway)."""

import dataclasses
import math

import pytest
import tensorflow as tf

from tff_robust import tasks
from tff_robust.tasks import TaskOptions

from helpers import data_makers
from helpers import data_makers_more
from helpers.task_round import one_round


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("round_data"))
  data_makers_more.make_cifar100_sqlite(d)
  data_makers_more.make_shakespeare_sqlite(d)
  data_makers_more.make_stackoverflow_sqlite(d)
  data_makers_more.make_stackoverflow_counts(d)
  data_makers.make_emnist_sqlite(d)
  return d


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


@pytest.fixture(scope="module")
def cifar10_task():
  """CIFAR-10 from TFDS's mock data, iid over 4 clients: one task for both rounds below."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  with tfds.testing.mock_data(num_examples=40):
    return tasks.load_task("cifar10", TaskOptions(partition="iid", num_clients=4))


@pytest.mark.parametrize("rm_weight", [0.0, 1.0])
def test_round_on_cifar10_tfds(tff_rt, cifar10_task, rm_weight):
  m = one_round(cifar10_task, rm_weight=rm_weight)
  if rm_weight:  # the conv stack's matching terms: input <- conv1 <- conv2 (unpooled) <- dense <- logits
    terms = [float(m[f"rm_loss_{j}"]) for j in range(4)]
    assert all(math.isfinite(t) and t > 0 for t in terms)
    assert math.isclose(sum(terms), float(m["rm_loss"]), rel_tol=1e-5)
