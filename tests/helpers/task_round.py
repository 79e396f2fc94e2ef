"""One federated round of the learning process on a task (`one_round`): test_task_rounds' check of
every task, shared with test_tasks_more, whose keyword corpus serves the speech_commands round."""

from __future__ import annotations

import math

import numpy as np

from tff_robust.algorithms import client_work, process, server_state
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig
from tff_robust.algorithms.methods.rm.options import RMConfig


def one_round(task, server_opt: str = "sgd", rm_weight: float = 0.0):
  """Builds the process for ``task``'s model and runs one round on two of its clients: both are
  counted, none non-finite, the loss is finite and the weights moved. Returns the round's metrics.
  The weights before the round are read from the initial state, which is already here: a
  `get_model_weights` of it would send the whole state (model and server optimizer) to the
  worker and back (about 0.7 CPU-s for EMNIST's autoencoder with Adam's moments)."""
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
  before = server_state.core(state)[server_state.MODEL].trainable
  after = p.get_model_weights(out.state).trainable
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
  return m
