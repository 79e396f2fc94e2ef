"""Per-round wall time: tff_robust's process vs TFF's `build_weighted_fed_avg` vs a plain TF loop.

All three run the same clients, the same K SGD steps of batch B per client and
the same server step (SGD, lr 1), in one process so the ratios share the
machine's state; the rounds of the two TFF processes alternate. The plain loop is the
limit: the same SGD steps with no federated runtime at all.

    uv run python bench/round_time.py --task=mnist --rounds=10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms import client_work, process  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.runtime.context import tff_runtime  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402


def _time_rounds(steps: dict, rounds: int) -> dict[str, list[float]]:
  """Seconds per round of each step, rounds interleaved (round r of every step, then r + 1) so
  that the machine's drift over the run falls on every step alike."""
  for step in steps.values():
    step()  # warm-up (tracing, worker start-up)
  times: dict[str, list[float]] = {name: [] for name in steps}
  for _ in range(rounds):
    for name, step in steps.items():
      t0 = time.perf_counter()
      step()
      times[name].append(time.perf_counter() - t0)
  return times


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", default="mnist")
  parser.add_argument("--model", default="default")
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--lr", type=float, default=0.05)
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--json_out", default=None, help="also write the medians and ratios here")
  args = parser.parse_args()

  task = tasks.load_task(args.task, TaskOptions(num_clients=args.clients, partition="iid",
                                                model=args.model))
  cids = sorted(task.train.client_ids)[:args.clients]
  raw = [task.train.create_tf_dataset_for_client(c) for c in cids]
  batched = [d.repeat().batch(args.batch_size).take(args.steps) for d in raw]
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  results = {}
  with tff_runtime():
    # tff_robust process.
    ours = process.build_process(spec, ProcessConfig(
        client=ClientConfig(lr=args.lr, local_steps=args.steps, batch_size=args.batch_size),
        server=ServerConfig(opt="sgd", lr=1.0)))
    state = [ours.initialize()]

    def ours_step():
      state[0] = ours.next(state[0], raw).state

    # TFF's own weighted FedAvg on the same batches.
    def tff_model_fn():
      return tff.learning.models.from_keras_model(
          task.model_fn(), loss=task.loss_fn(), input_spec=batched[0].element_spec,
          metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
        tff_model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(args.lr),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
    tstate = [fedavg.initialize()]

    def tff_step():
      tstate[0] = fedavg.next(tstate[0], batched).state
    results.update(_time_rounds({"tff_robust": ours_step, "tff_fedavg": tff_step}, args.rounds))

  # Plain TF: the same SGD steps, clients one after another, no federated runtime.
  model = task.model_fn()
  loss_fn = task.loss_fn()
  global_w = [tf.Variable(v) for v in model.trainable_variables]

  @tf.function
  def client(ds):
    for v, g in zip(model.trainable_variables, global_w):
      v.assign(g)
    for x, y in ds:
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      for v, g in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
        v.assign_sub(args.lr * g)
    return [v - g for v, g in zip(model.trainable_variables, global_w)]

  def plain_step():
    deltas = [client(ds) for ds in batched]
    for i, g in enumerate(global_w):
      g.assign_add(tf.add_n([d[i] for d in deltas]) / len(deltas))
  results.update(_time_rounds({"plain_tf": plain_step}, args.rounds))

  med = {k: statistics.median(v) for k, v in results.items()}
  print(f"task={args.task} clients={len(cids)} steps={args.steps} batch={args.batch_size} "
        f"rounds={args.rounds} (median seconds per round)")
  for k, v in med.items():
    print(f"  {k:12s} {v:.3f}s  (min {min(results[k]):.3f}, max {max(results[k]):.3f})")
  print(f"  ratio tff_robust / tff_fedavg = {med['tff_robust'] / med['tff_fedavg']:.2f}")
  print(f"  ratio tff_robust / plain_tf   = {med['tff_robust'] / med['plain_tf']:.2f}")
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump({"task": args.task, "clients": len(cids), "steps": args.steps,
                 "batch_size": args.batch_size, "rounds": args.rounds, "median_seconds": med,
                 "ratio_to_tff_fedavg": med["tff_robust"] / med["tff_fedavg"],
                 "ratio_to_plain_tf": med["tff_robust"] / med["plain_tf"]}, f, indent=1)


if __name__ == "__main__":
  main()
