"""Seed 000's Table 4: wall-clock time of one client doing 30 SGD steps at batch 64, per method.

Each method is one round of the learning process with a single client (AH
includes its server-side work: sampling h_t, the loss of the new model on the
server validation set and the ψ update). All methods run in one process, rounds
interleaved method by method, so the ratios to FA share the machine's state.
AH's steps are pinned to 30 (a one-point steps grid) so every method does the
same SGD work.

    uv run python bench/client_time.py --tasks=mnist,cifar10 --rounds=20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import ops as ops_lib  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms import client_work, evaluation, matching, process  # noqa: E402
from tff_robust.algorithms.config import AHConfig, ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.runtime.context import tff_runtime  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402

METHODS = ("FA", "FA+WD", "FA+RM+AH", "FA+RM", "FA+AH")


def load(name: str, data_dir: str | None):
  if name == "cifar10":
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    with tfds.testing.mock_data(num_examples=2000):  # random images of CIFAR-10's exact format
      return tasks.load_task("cifar10", TaskOptions(partition="iid", num_clients=1))
  if name == "speech_commands":
    return tasks.load_task(name, TaskOptions(partition="iid", num_clients=1, data_dir=data_dir))
  return tasks.load_task(name, TaskOptions(partition="iid", num_clients=10))


def config(method: str, steps: int, batch: int, lr: float) -> ProcessConfig:
  client = ClientConfig(lr=lr, local_steps=steps, batch_size=batch,
                        rm_weight=0.3 if "RM" in method else 0.0,
                        # as the seed-000 flagfiles: FA+RM+AH has no top matching term
                        rm_top_source="none" if method == "FA+RM+AH" else "logits",
                        wd_mu=0.01 if "WD" in method else 0.0)
  ah = AHConfig(lr_grid=(lr / 3, lr, lr * 3), steps_grid=(steps,)) if "AH" in method else None
  return ProcessConfig(client=client, server=ServerConfig(opt="sgd", lr=1.0), ah=ah)


def step_flops(spec: client_work.ModelSpec, cfg: ClientConfig, batch: int) -> int:
  """Floating-point operations of one local SGD step (TF's profiler on the traced step): the
  objective's forward pass and the gradients the client takes (w^i's, and θ^i's with RM), as
  `client_work.ClientTrainer` computes them; variable updates (element-wise) are left out."""
  model = spec.model_fn()
  matcher, frozen = None, None
  if cfg.rm_weight > 0:
    frozen = spec.model_fn()
    matcher = matching.RepresentationMatcher(model, 0, cfg.rm_top_source, cfg.rm_layers)
  models = types.SimpleNamespace(model=model, frozen=frozen, matcher=matcher, loss_fn=spec.loss_fn())
  x_spec, y_spec = (tf.TensorSpec([batch, *s.shape[1:]], s.dtype) for s in spec.element_spec)
  initial = [tf.identity(v) for v in model.trainable_variables]
  prox = tf.constant(cfg.wd_mu) if cfg.wd_mu > 0 else None

  @tf.function
  def step(x, y):
    with tf.GradientTape() as theta_tape:
      with tf.GradientTape() as tape:
        objective = client_work.local_objective(models, cfg, prox, initial, x, y)
      theta_loss = tf.reduce_sum(objective.terms)
    out = tape.gradient(objective.total, model.trainable_variables)
    if matcher is not None:
      out += theta_tape.gradient(theta_loss, matcher.theta)
    return out

  return graph_flops(step.get_concrete_function(x_spec, y_spec).graph)


def graph_flops(graph: tf.Graph) -> int:
  """FLOPs of the ops a call of ``graph`` runs: TF's registered per-op statistics (those the
  profiler sums) over the ops its outputs depend on. Ops nothing uses (e.g. the filter gradient
  of a conv whose weights are not differentiated) are left out, as TF's runtime prunes them
  before running a function; the profiler would count them."""
  live, stack = set(), [t.op for t in graph.outputs] + list(graph.control_outputs)
  while stack:
    op = stack.pop()
    if op.name in live:
      continue
    live.add(op.name)
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  total = 0
  for op in graph.get_operations():
    if op.name not in live:
      continue
    try:
      total += ops_lib.get_stats_for_node_def(graph, op.node_def, "flops").value or 0
    except ValueError:  # no statistics registered for this op type
      pass
  return int(total)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tasks", default="mnist,cifar10")
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--ah_val_examples", type=int, default=500)
  parser.add_argument("--data_dir", default=None, help="speech_commands folder")
  parser.add_argument("--json_out", default=None, help="also write the medians and ratios here")
  args = parser.parse_args()
  out = {"steps": args.steps, "batch_size": args.batch_size, "rounds": args.rounds, "tasks": {}}

  print(f"one client, {args.steps} SGD steps at batch {args.batch_size}; median (std) seconds "
        f"over {args.rounds} rounds, time ratio to FA and (ops ×) the ratio of one local step's "
        f"floating-point operations (TF's per-op statistics); AH validation set "
        f"{args.ah_val_examples} examples")
  print("| task | " + " | ".join(METHODS) + " |")
  print("| --- |" + " --- |" * len(METHODS))
  with tff_runtime():
    for name in args.tasks.split(","):
      task = load(name, args.data_dir)
      spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                                   task.train.element_type_structure)
      cid = sorted(task.train.client_ids)[0]
      data = [task.train.create_tf_dataset_for_client(cid)]
      val = evaluation.sample_examples(task.train.create_tf_dataset_for_client(cid),
                                       args.ah_val_examples, seed=0)
      runs = {}
      for method in METHODS:
        p = process.build_process(spec, config(method, args.steps, args.batch_size, 0.01),
                                  rm_client_state="reset", server_val=val)
        state = p.initialize()
        state = p.next(state, data).state  # warm-up
        runs[method] = [p, state, []]
      for _ in range(args.rounds):
        for method in METHODS:
          p, state, times = runs[method]
          t0 = time.perf_counter()
          runs[method][1] = p.next(state, data).state
          times.append(time.perf_counter() - t0)
      med = {m: statistics.median(r[2]) for m, r in runs.items()}
      flops = {m: step_flops(spec, config(m, args.steps, args.batch_size, 0.01).client,
                             args.batch_size) for m in METHODS}
      cells = [f"{med[m]:.3f} ({statistics.pstdev(runs[m][2]):.3f}) ×{med[m] / med['FA']:.2f} "
               f"(ops ×{flops[m] / flops['FA']:.2f})" for m in METHODS]
      print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
      out["tasks"][name] = {m: {"median": med[m], "std": statistics.pstdev(runs[m][2]),
                                "ratio_to_fa": med[m] / med["FA"], "step_flops": flops[m],
                                "ops_ratio_to_fa": flops[m] / flops["FA"]} for m in METHODS}
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
