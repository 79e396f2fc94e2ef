"""Per-round wall time: tff_robust's process vs TFF's `build_weighted_fed_avg` vs a plain TF loop.

All three run the same clients, the same K SGD steps of batch B per client and
the same server step (SGD, lr 1), in one process so the ratios share the
machine's state; their rounds alternate (round r of each, then r + 1), the first
``--warmup`` rounds of each are discarded, and the whole series runs ``--repetitions`` times.
Per repetition: each step's median seconds with its interquartile range, the ratio of the
medians, the median [IQR] of the round-by-round ratios, and the ratio of CPU seconds per
round (this process and its TFF worker; it moves far less with the machine's load than wall
time). The plain loop is the limit: the same SGD steps with no federated runtime at all.

    uv run python bench/round_time.py --task=mnist --rounds=30
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

import timing  # noqa: E402  (bench/timing.py; bench/ is this script's directory on sys.path)

from tff_robust import tasks  # noqa: E402
from tff_robust.common import strict_json  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.runtime.context import tff_runtime  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402


def tff_fedavg(task, input_spec, lr: float):
  """TFF's own `build_weighted_fed_avg` of the task's model: client SGD at ``lr``, server SGD at 1."""
  def model_fn():
    return tff.learning.models.from_keras_model(
        task.model_fn(), loss=task.loss_fn(), input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", default="mnist")
  parser.add_argument("--model", default="default")
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--lr", type=float, default=0.05)
  parser.add_argument("--rounds", type=int, default=30, help="timed rounds per repetition")
  parser.add_argument("--warmup", type=int, default=3, help="rounds run first and discarded")
  parser.add_argument("--repetitions", type=int, default=2)
  parser.add_argument("--json_out", default=None, help="also write the medians and ratios here")
  args = parser.parse_args()

  task = tasks.load_task(args.task, TaskOptions(num_clients=args.clients, partition="iid",
                                                model=args.model))
  cids = sorted(task.train.client_ids)[:args.clients]
  raw = [task.train.create_tf_dataset_for_client(c) for c in cids]
  batched = [d.repeat().batch(args.batch_size).take(args.steps) for d in raw]
  reps = []
  with tff_runtime() as runtime:
    # tff_robust process.
    ours = build_process_for_task(task, ProcessConfig(
        client=ClientConfig(lr=args.lr, local_steps=args.steps, batch_size=args.batch_size),
        server=ServerConfig(opt="sgd", lr=1.0))).process
    state = [ours.initialize()]

    def ours_step():
      state[0] = ours.next(state[0], raw).state

    # TFF's own weighted FedAvg on the same batches.
    fedavg = tff_fedavg(task, batched[0].element_spec, args.lr)
    tstate = [fedavg.initialize()]

    def tff_step():
      tstate[0] = fedavg.next(tstate[0], batched).state

    plain_step = _plain_tf(task, batched, args.lr)  # its model made after TFF's tracing
    steps = {"tff_robust": ours_step, "tff_fedavg": tff_step, "plain_tf": plain_step}
    for _ in range(args.repetitions):
      reps.append(timing.interleaved(steps, args.rounds, args.warmup, runtime.worker_pids))

  print(f"task={args.task} clients={len(cids)} steps={args.steps} batch={args.batch_size}: "
        f"{args.repetitions} repetitions of {args.rounds} interleaved rounds after {args.warmup} "
        f"discarded; seconds per round, median [q1, q3]")
  out_reps = []
  for i, rep in enumerate(reps, 1):
    print(f"repetition {i}:")
    for name, t in rep.items():
      print(f"  {name:12s} {timing.fmt_quartiles(t.wall)} s  cpu {statistics.fmean(t.cpu):.3f} s")
    out_reps.append(_ratios(rep))
    for den in ("tff_fedavg", "plain_tf"):
      r = out_reps[-1][den]
      print(f"  tff_robust / {den:10s}: medians {r['median_ratio']:.3f}, round by round "
            f"{r['paired']:.3f} [{r['paired_q1']:.3f}, {r['paired_q3']:.3f}], cpu {r['cpu_ratio']:.3f}")
  pooled = {name: [x for rep in reps for x in rep[name].wall] for name in reps[0]}
  med = {k: statistics.median(v) for k, v in pooled.items()}
  print("ratio tff_robust / tff_fedavg per repetition (medians): "
        + ", ".join(f"{r['tff_fedavg']['median_ratio']:.3f}" for r in out_reps))
  if args.json_out:
    strict_json.write(args.json_out, {
        "task": args.task, "clients": len(cids), "steps": args.steps,
        "batch_size": args.batch_size, "rounds": args.rounds, "warmup": args.warmup,
        "median_seconds": med,
        "ratio_to_tff_fedavg": med["tff_robust"] / med["tff_fedavg"],
        "ratio_to_plain_tf": med["tff_robust"] / med["plain_tf"],
        "repetitions": [{"seconds": {k: timing.summary(t) for k, t in rep.items()},
                         "ratios": r} for rep, r in zip(reps, out_reps)]})


def _ratios(rep: dict) -> dict:
  """tff_robust over each other step: ratio of medians, round-by-round ratios, CPU ratio."""
  out = {}
  for den in ("tff_fedavg", "plain_tf"):
    paired = timing.paired_ratios(rep["tff_robust"].wall, rep[den].wall)
    q1, q2, q3 = timing.quartiles(paired)
    out[den] = {"median_ratio": statistics.median(rep["tff_robust"].wall) / statistics.median(rep[den].wall),
                "paired": q2, "paired_q1": q1, "paired_q3": q3,
                "cpu_ratio": sum(rep["tff_robust"].cpu) / sum(rep[den].cpu)}
  return out


def _plain_tf(task, batched: list, lr: float):
  """Plain TF: the same SGD steps, clients one after another, no federated runtime."""
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
        v.assign_sub(lr * g)
    return [v - g for v, g in zip(model.trainable_variables, global_w)]

  def plain_step():
    deltas = [client(ds) for ds in batched]
    for i, g in enumerate(global_w):
      g.assign_add(tf.add_n([d[i] for d in deltas]) / len(deltas))
  return plain_step


if __name__ == "__main__":
  main()
