"""The public entry point: the learning process of a task for a `ProcessConfig`.

`build_process_for_task` is what `python -m tff_robust.main` builds (through
`simulation.loop.build_training_loop`), and what the benchmarks, the studies and the notebook
build: the task's `ModelSpec`, the server-held validation sample a method asks for (AH's with
``--ah_loss_source=server``), N for ``--aggregation_norm=all`` and K for a method that needs it, passed to
`process.build_process`. Call it inside a TFF execution context
(`tff_robust.runtime.context.tff_runtime`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from tff_robust.algorithms import evaluation
from tff_robust.algorithms.client_work import ModelSpec
from tff_robust.algorithms.config import ProcessConfig
from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.process import RobustProcess, build_process
from tff_robust.tasks.base import Task


class ProcessForTask(NamedTuple):
  """The built process with the pieces it was built from (for evaluators, FLOP counts, ...)."""

  process: RobustProcess
  spec: ModelSpec
  server_val: Optional[tuple[np.ndarray, ...]]  # the server-held sample, when a method needs one


def model_spec(task: Task) -> ModelSpec:
  """The task's model, loss, accuracy and element spec: what the computations need of it."""
  return ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn, task.train.element_type_structure)


def total_train_examples(client_data, val_every: int = 0) -> int:
  """N = Σ_k n_k over all K clients, of the examples they train on (without every
  ``val_every``-th one when `split_validation` holds those out)."""
  total = 0
  for cid in client_data.client_ids:
    n = evaluation.num_examples(client_data.create_tf_dataset_for_client(cid))
    total += n - (-(-n // val_every) if val_every > 0 else 0)
  return total


def build_process_for_task(task: Task, config: ProcessConfig, *, client_val_every: int = 0,
                           server_val: Optional[tuple[np.ndarray, ...]] = None,
                           client_reports: bool = False) -> ProcessForTask:
  """The learning process of ``config`` over ``task``, as `main` builds it.

  Args:
    task: the loaded task (its model, loss, metrics and federated training data).
    config: the process' configuration (client, server, methods, robustness).
    client_val_every: the driver's ``--client_val_every`` (N leaves out each client's
      validation examples when the config holds them out).
    server_val: a server-held ``(x, y)``; by default, when a method needs one
      (`registry.server_val_examples`), `evaluation.server_sample` of the task's validation set
      (else of its clients).
    client_reports: also build the round with its clients' reports (``--client_metrics``).
  """
  spec = model_spec(task)
  examples = registry.server_val_examples(config)
  if server_val is None and examples > 0:
    server_val = evaluation.server_sample(task.train, task.validation, examples, config.seed)
  total = None
  if config.aggregation_norm == "all":  # N of Algorithm 1 line 13
    total = total_train_examples(task.train, client_val_every if config.needs_client_val else 0)
  process = build_process(spec, config, server_val=server_val, total_examples=total,
                          num_clients=len(task.train.client_ids), client_reports=client_reports)
  return ProcessForTask(process, spec, server_val)
