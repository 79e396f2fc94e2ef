"""The driver: reproducible sampling, per-client state, checkpoint and exact resume."""

import json
import math
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import client_work, evaluation, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.common import run_lock
from tff_robust.simulation import client_data, client_states, loop, selection

from helpers.toy import run_loop as _run
from helpers.toy import toy_task as _task


def test_sample_clients_reproducible_and_distinct():
  ids = [str(i) for i in range(20)]
  a = selection.sample_clients(ids, 5, seed=1, round_num=3)
  assert a == selection.sample_clients(ids, 5, seed=1, round_num=3)
  assert len(set(a)) == 5
  rounds = {tuple(selection.sample_clients(ids, 5, seed=1, round_num=r)) for r in range(1, 20)}
  assert len(rounds) > 10  # different rounds draw different clients
  assert selection.num_sampled(10, 0, 0.5) == 5
  assert selection.num_sampled(10, 3, 0.5) == 3
  assert selection.num_sampled(10, 0, 0.01) == 1


def test_split_validation_every_nth():
  ds = tf.data.Dataset.range(25)
  train, val = client_data.split_validation(ds, 10)
  assert list(val.as_numpy_iterator()) == [0, 10, 20]
  assert len(list(train.as_numpy_iterator())) == 22


def test_client_state_store_spills_and_restores(tmp_path):
  fresh = lambda cid: {"c": [np.zeros(2, np.float32)]}  # noqa: E731
  store = client_states.ClientStateStore(str(tmp_path), fresh, max_in_memory=1)
  get = lambda cid: store.get(cid)["c"][0]  # noqa: E731
  np.testing.assert_array_equal(get("a"), [0, 0])
  store.put("a", {"c": [np.array([1.0, 1.0])]}, round_num=1)
  store.put("b", {"c": [np.array([2.0, 2.0])]}, round_num=1)  # spills "a" to disk
  np.testing.assert_array_equal(get("a"), [1, 1])
  store.checkpoint(2)
  store.put("a", {"c": [np.array([3.0, 3.0])]}, round_num=3)
  store.put("b", {"c": [np.array([4.0, 4.0])]}, round_num=3)
  store.checkpoint(4)  # hypothetical crash after this point is handled by restore(4)
  store.put("a", {"c": [np.array([5.0, 5.0])]}, round_num=5)
  store.put("c", {"c": [np.array([6.0, 6.0])]}, round_num=5)  # spills to disk after the checkpoint
  store.restore(4)
  np.testing.assert_array_equal(get("a"), [3, 3])
  np.testing.assert_array_equal(get("b"), [4, 4])
  np.testing.assert_array_equal(get("c"), [0, 0])


def test_client_state_store_keeps_components_apart_and_reads_the_old_layout(tmp_path):
  """Each component's leaves come back under its key; a file of the layout before client
  components (RM's θ^i as arr_0, arr_1, ...) is RM's state."""
  store = client_states.ClientStateStore(str(tmp_path), lambda cid: {}, max_in_memory=0)
  two = {"rm": [np.ones([2, 2]), np.zeros(3)], "scaffold": [np.full(2, 7.0)]}
  store.put("a", two, round_num=1)  # spilled at once (nothing is kept in memory)
  got = store.get("a")
  assert list(got) == ["rm", "scaffold"]
  for key, leaves in two.items():
    for g, w in zip(got[key], leaves):
      np.testing.assert_array_equal(g, w)
  np.savez(os.path.join(str(tmp_path), "old.r3.npz"), np.ones(2), np.full([2, 2], 2.0))
  old = client_states.ClientStateStore(str(tmp_path), lambda cid: {}).get("old")  # lists it anew
  assert list(old) == [client_states.LEGACY_KEY] == ["rm"]
  np.testing.assert_array_equal(old["rm"][1], np.full([2, 2], 2.0))


@pytest.fixture(scope="module")
def full_run(tff_rt, tmp_path_factory):
  """The toy task with a server-held validation set (the test split's last 40 examples of its
  first 60, reversed), one built process and its uninterrupted 4-round run (evaluated and
  checkpointed every 2 rounds): the resume test's reference and the held-out validation test's
  run (each built and ran its own before, about 3.5 CPU-s)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  del tff_rt
  task = _task()
  x, y = next(iter(task.test.batch(60)))
  val = tf.data.Dataset.from_tensor_slices((x.numpy()[::-1][:40], y.numpy()[::-1][:40]))
  task = dataclasses.replace(task, validation=val)
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  proc = process.build_process(spec, ProcessConfig(
      client=ClientConfig(lr=0.1, local_steps=3, batch_size=16),
      server=ServerConfig(opt="adam", lr=0.01), seed=1))
  out = str(tmp_path_factory.mktemp("full"))
  driver, result = _run(task, out, 4, proc)
  return types.SimpleNamespace(task=task, val=val, proc=proc, out=out, driver=driver, result=result)


def test_resume_equals_uninterrupted_run(full_run, tmp_path):
  task, proc, full, full_result = full_run.task, full_run.proc, full_run.driver, full_run.result
  # Another process holds the directory: the loop refuses it and writes nothing.
  with run_lock.hold(str(tmp_path / "resumed")):
    with pytest.raises(run_lock.RunDirBusyError, match=f"pid {os.getpid()}"):
      _run(task, str(tmp_path / "resumed"), 2, proc)
  assert not os.listdir(tmp_path / "resumed" / "checkpoints")
  assert not (tmp_path / "resumed" / "metrics.csv").exists()  # no record opened, no TensorBoard file
  assert not (tmp_path / "resumed" / "tensorboard").exists()
  # "Interrupted" after the checkpoint of round 2, then the same command again.
  _run(task, str(tmp_path / "resumed"), 2, proc)
  resumed, resumed_result = _run(task, str(tmp_path / "resumed"), 4, proc)
  assert [h["round"] for h in resumed.history] == [3, 4]
  for a, b in zip(proc.get_model_weights(full.state).trainable,
                  proc.get_model_weights(resumed.state).trainable):
    np.testing.assert_array_equal(a, b)
  assert resumed_result == full_result
  assert full.history[-1]["train_loss"] == resumed.history[-1]["train_loss"]
  rows = open(os.path.join(tmp_path, "resumed", "metrics.csv")).read().strip().splitlines()
  assert len(rows) == 1 + 4  # header + one row per round, none duplicated
  assert os.path.exists(os.path.join(full_run.out, "final_metrics.json"))


def test_held_out_validation_is_evaluated_beside_the_test_split(full_run):
  """A task with server-held validation data reports val_loss / val_accuracy at every evaluation
  (the numbers of the final model on exactly that data) and in final_metrics.json."""
  task, val, proc, driver, result = (full_run.task, full_run.val, full_run.proc, full_run.driver,
                                     full_run.result)
  assert [("val_accuracy" in h) for h in driver.history] == [False, True, False, True]
  w = proc.get_model_weights(driver.state)
  ev = evaluation.make_evaluator(task.model_fn, task.loss_fn, task.accuracy_fn)
  expected = ev(w.trainable, w.non_trainable, val.batch(7))
  assert result["val_accuracy"] == pytest.approx(expected["accuracy"])
  assert result["val_loss"] == pytest.approx(expected["loss"], rel=1e-5)
  assert result["test_accuracy"] != result["val_accuracy"] or result["test_loss"] != result["val_loss"]
  with open(os.path.join(full_run.out, "final_metrics.json")) as f:
    final = json.load(f)
  assert final["val_accuracy"] == result["val_accuracy"] and final["val_loss"] == result["val_loss"]


def test_client_selection_draws_the_functions_clients_and_a_byzantine_share():
  ids = [str(i) for i in range(20)]
  pick = selection.ClientSelection(ids, per_round=10, seed=4, dropout_rate=0.3, byzantine_fraction=0.2)
  for t in (1, 2, 7):
    clients = pick(t)
    assert clients.sampled == selection.sample_clients(ids, 10, 4, t)
    assert clients.training == selection.surviving_clients(clients.sampled, 0.3, 4, t)
    assert len(clients.byzantine) == len(clients.training)
    assert clients.byzantine.sum() == math.floor(0.2 * len(clients.training) + 0.5)
    again = pick(t)  # the same draw from (seed, round) on every call, e.g. after a resume
    assert again.sampled == clients.sampled and again.training == clients.training
    assert np.array_equal(again.byzantine, clients.byzantine)


def test_per_client_state_grows_with_the_clients_that_trained_not_with_the_task(tff_rt, tmp_path):
  """SCAFFOLD's c_i over 3,000 clients, 2 rounds of 3: a state is made, held and written for
  each client that trained and for no other; the store never lists its directory per client."""
  from tff_robust.tasks.base import Task, sparse_accuracy  # pylint: disable=g-import-not-at-top
  from tff_robust.tasks.partition import client_data_from_arrays  # pylint: disable=g-import-not-at-top
  toy = _task()
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6000, 5)).astype(np.float32)
  y = rng.integers(3, size=6000).astype(np.int32)
  train = client_data_from_arrays(x, y, [np.arange(2 * k, 2 * k + 2) for k in range(3000)])
  task = Task(name="many", train=train, test=toy.test, model_fn=toy.model_fn, loss_fn=toy.loss_fn,
              accuracy_fn=sparse_accuracy)
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn, train.element_type_structure)
  proc = process.build_process(spec, ProcessConfig(
      client=ClientConfig(lr=0.1, local_steps=1, batch_size=2), algorithm="scaffold"), num_clients=3000)
  state0, made = proc.trainer.initial_state(), []
  cfg = loop.LoopConfig(output_dir=str(tmp_path), rounds=2, clients_per_round=3, seed=5)
  driver = loop.TrainingLoop(proc, task, cfg,
                             initial_state_fn=lambda cid: made.append(cid) or state0)
  listed = []
  real_listdir = os.listdir
  os.listdir = lambda d: listed.append(d) or real_listdir(d)  # pylint: disable=unnecessary-lambda
  try:
    driver.run()
  finally:
    os.listdir = real_listdir
  trained = [c for r in (1, 2) for c in driver.selection(r).training]
  assert sorted(made) == sorted(set(trained)) and len(set(trained)) >= 3
  names = real_listdir(os.path.join(str(tmp_path), "client_states"))
  assert sorted({n.split(".r")[0] for n in names}) == sorted(set(trained))
  assert len(driver.state_store._cache) == len(set(trained))  # pylint: disable=protected-access
  assert listed.count(driver.state_store.directory) <= 1  # at most once (a resume's restore)
