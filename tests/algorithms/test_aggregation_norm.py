"""Seed 000's Algorithm 1 line 13 as an option: w_{t+1} = w_t + Σ_{i∈S_t} (n_k / N)(w_t^i − w_t),
N over all K clients, against a hand computation with C = 0.5 (one round, the real process)."""

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms import process, process_for_task
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.simulation import loop, selection
from tff_robust.tasks.base import Task, sparse_accuracy
from tff_robust.tasks.partition import client_data_from_arrays

SIZES = (6, 10, 8, 4)  # N = 28
DIM, CLASSES, LR = 5, 3, 0.5


def _task():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(sum(SIZES), DIM)).astype(np.float32)
  y = rng.integers(0, CLASSES, size=sum(SIZES)).astype(np.int32)
  offsets = np.cumsum((0,) + SIZES)
  parts = [np.arange(offsets[k], offsets[k + 1]) for k in range(len(SIZES))]
  return Task(name="linear", train=client_data_from_arrays(x, y, parts),
              test=tf.data.Dataset.from_tensor_slices((x, y)),
              model_fn=lambda: tf.keras.Sequential([tf.keras.Input(shape=(DIM,)),
                                                    tf.keras.layers.Dense(CLASSES)]),
              loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              accuracy_fn=sparse_accuracy, num_classes=CLASSES)


def _hand_delta(w, b, x, y):
  """One full-batch SGD step of softmax regression on mean CE: Δ = −η (xᵀ(p − Y)/n, Σ(p − Y)/n)."""
  z = x.astype(np.float64) @ w + b
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  g = (p - np.eye(CLASSES)[y]) / len(y)
  return -LR * (x.T @ g), -LR * g.sum(0)


@pytest.mark.parametrize("norm", ["all", "sampled"])
def test_one_round_with_half_the_clients_matches_hand_computation(tff_rt, tmp_path, norm):
  task = _task()
  # One epoch at a batch larger than any client: one full-batch step, whatever the data order.
  cfg = ProcessConfig(client=ClientConfig(lr=LR, local_steps=0, local_epochs=1, batch_size=64),
                      server=ServerConfig(opt="sgd", lr=1.0), aggregation_norm=norm, seed=4)
  lcfg = loop.LoopConfig(output_dir=str(tmp_path), rounds=1, client_fraction=0.5, seed=9,
                         rounds_per_eval=1)
  driver = loop.build_training_loop(task, cfg, lcfg)
  w0 = [np.asarray(v, np.float64) for v in
        driver.process.get_model_weights(driver.process.initialize()).trainable]
  driver.run()
  w1 = driver.process.get_model_weights(driver.state).trainable

  sampled = selection.sample_clients(sorted(task.train.client_ids), 2, 9, 1)  # C·K = 0.5 · 4
  total_w, total_b, n_sampled = np.zeros_like(w0[0]), np.zeros_like(w0[1]), 0
  for cid in sampled:
    x, y = (t.numpy() for t in next(iter(task.train.create_tf_dataset_for_client(cid).batch(100))))
    dw, db = _hand_delta(w0[0], w0[1], x, y)
    total_w += len(y) * dw
    total_b += len(y) * db
    n_sampled += len(y)
  denominator = sum(SIZES) if norm == "all" else n_sampled  # N = 28, or Σ_{S_t} n_k
  np.testing.assert_allclose(w1[0], w0[0] + total_w / denominator, atol=1e-6)
  np.testing.assert_allclose(w1[1], w0[1] + total_b / denominator, atol=1e-6)
  assert n_sampled < sum(SIZES) and np.abs(total_w).max() > 1e-3  # the two forms differ


def test_total_train_examples_counts_all_clients_without_held_out_ones():
  task = _task()
  assert process_for_task.total_train_examples(task.train) == 28
  # every 3rd example held out: 6 -> 4, 10 -> 6, 8 -> 5, 4 -> 2
  assert process_for_task.total_train_examples(task.train, 3) == 17


def test_build_process_for_task_takes_n_and_ahs_sample_from_the_task(tff_rt, monkeypatch):
  """The public entry point: the task's spec, N for --aggregation_norm=all, and with AH's server
  loss source its server-held sample (of the clients here: the task has no validation set)."""
  task = _task()
  built = process_for_task.build_process_for_task(task, ProcessConfig(
      client=ClientConfig(local_steps=1, batch_size=4), aggregation_norm="all",
      ah=AHConfig(lr_grid=(0.1, 0.3), steps_grid=(1, 2), val_examples=5)))
  assert built.spec.element_spec == task.train.element_type_structure
  assert [len(a) for a in built.server_val] == [5, 5]
  assert built.process.next.type_signature.parameter[1].member == built.process.client_input_type
  # The default configuration draws no server-held sample and gives the build none (nor N): what
  # `build_process` receives is checked, not built (a build costs about 1 CPU-s).
  calls = []
  monkeypatch.setattr(process_for_task, "build_process",
                      lambda spec, config, **kwargs: calls.append((config, kwargs)) or "built")
  plain = process_for_task.build_process_for_task(task, ProcessConfig())
  assert plain.server_val is None and plain.process == "built"
  [(config, kwargs)] = calls
  assert config == ProcessConfig() and kwargs["server_val"] is None and kwargs["total_examples"] is None


def test_all_needs_n():
  with pytest.raises(ValueError, match="total_examples"):
    process.build_process(None, ProcessConfig(aggregation_norm="all"))
