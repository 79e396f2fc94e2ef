"""Seed 000's Table 4: wall-clock time of one client doing 30 SGD steps at batch 64, per method.

Each method is one round of the learning process with a single client (AH
includes its server-side work: sampling h_t, the loss of the new model on the
server validation set and the ψ update). All methods run in one process, rounds
interleaved method by method, so the ratios to FA share the machine's state; the first
``--warmup`` rounds of each are discarded and the series runs ``--repetitions`` times.
AH's steps are pinned to 30 (a one-point steps grid) so every method does the
same SGD work. Each cell: median [q1, q3] seconds, the ratio of medians to FA with the
median [q1, q3] of the round-by-round ratios, the ratio of CPU seconds per round (this
process and its TFF worker: it moves less with the machine's load) and the ratio of one local
step's floating-point operations (ops).

    uv run python bench/client_time.py --tasks=mnist,cifar10 --rounds=30
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import ops as ops_lib  # noqa: E402

import timing  # noqa: E402  (bench/timing.py; bench/ is this script's directory on sys.path)

from tff_robust import tasks  # noqa: E402
from tff_robust.common import strict_json  # noqa: E402
from tff_robust.algorithms import client, client_work, evaluation, methods  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task, model_spec  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.algorithms.methods.ah.options import AHConfig  # noqa: E402
from tff_robust.algorithms.methods.rm.options import RMConfig  # noqa: E402
from tff_robust.algorithms.methods.wd import WDConfig  # noqa: E402
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
  client = ClientConfig(lr=lr, local_steps=steps, batch_size=batch)
  rm = RMConfig(weight=0.3 if "RM" in method else 0.0,
                # as the seed-000 flagfiles: FA+RM+AH has no top matching term
                top_source="none" if method == "FA+RM+AH" else "logits")
  wd = WDConfig(mu=0.01 if "WD" in method else 0.0)
  ah = AHConfig(lr_grid=(lr / 3, lr, lr * 3), steps_grid=(steps,)) if "AH" in method else None
  return ProcessConfig(client=client, server=ServerConfig(opt="sgd", lr=1.0), ah=ah, methods=(rm, wd))


def _reset_theta(cfg: ProcessConfig) -> ProcessConfig:
  """``cfg`` with RM's θ fresh every round: θ's per-client state plays no part here."""
  return cfg.with_options(dataclasses.replace(cfg.options_of(RMConfig), client_state="reset"))


def step_flops(spec: client_work.ModelSpec, cfg: ProcessConfig, batch: int) -> int:
  """Floating-point operations of one local SGD step (TF's profiler on the traced step): the
  objective's forward pass and the gradients the client takes (w^i's, and θ^i's with RM), as
  `client_work.ClientTrainer` computes them with its client components (those of the client's
  training and the methods ``cfg.methods`` holds: RM, ER, WD; not AH's or FedEx's); variable
  updates (element-wise) are left out."""
  model = spec.model_fn()
  cfg = _reset_theta(ProcessConfig(client=cfg.client, methods=cfg.methods))
  parts = methods.components(methods.BuildContext(spec, cfg, [], None, None)).client
  built = {c.key: c.build(model) for c in parts}
  initial = [tf.identity(v) for v in model.trainable_variables]
  run = client.LocalRun(model, spec.loss_fn(), {"prox_mu": tf.constant(cfg.options_of(WDConfig).mu)}, {}, None,
                        initial, {}, built, {})
  x_spec, y_spec = (tf.TensorSpec([batch, *s.shape], s.dtype) for s in spec.element_spec)  # unbatched

  @tf.function
  def step(x, y):
    with tf.GradientTape() as theta_tape:
      with tf.GradientTape() as tape:
        forwards = [f for f in (c.forward(run, x) for c in parts) if f is not None]
        fwd = forwards[0] if forwards else client.Forward(model(x, training=True))
        terms = [t for t in (c.loss(run, x, y, fwd) for c in parts) if t is not None]
        total = run.loss_fn(y, fwd.logits)
        for term in terms:
          total += term.value
    out = tape.gradient(total, model.trainable_variables)
    if "rm" in built:
      own = [t.own_loss for t in terms if t.own_loss is not None]
      out += theta_tape.gradient(own[0], built["rm"].matcher.theta)
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
  parser.add_argument("--rounds", type=int, default=30, help="timed rounds per repetition")
  parser.add_argument("--warmup", type=int, default=3, help="rounds run first and discarded")
  parser.add_argument("--repetitions", type=int, default=2)
  parser.add_argument("--ah_val_examples", type=int, default=500)
  parser.add_argument("--data_dir", default=None, help="speech_commands folder")
  parser.add_argument("--json_out", default=None, help="also write the medians and ratios here")
  args = parser.parse_args()
  out = {"steps": args.steps, "batch_size": args.batch_size, "rounds": args.rounds,
         "warmup": args.warmup, "repetitions": args.repetitions, "tasks": {}}

  print(f"one client, {args.steps} SGD steps at batch {args.batch_size}; {args.repetitions} "
        f"repetitions of {args.rounds} interleaved rounds after {args.warmup} discarded; per cell: "
        f"median [q1, q3] seconds, ×time ratio to FA (round by round: median [q1, q3]), cpu × "
        f"the ratio of CPU seconds, ops × the ratio of one local step's floating-point operations "
        f"(TF's per-op statistics); AH validation set {args.ah_val_examples} examples")
  with tff_runtime() as runtime:
    for name in args.tasks.split(","):
      task = load(name, args.data_dir)
      spec = model_spec(task)
      cid = sorted(task.train.client_ids)[0]
      data = [task.train.create_tf_dataset_for_client(cid)]
      val = evaluation.sample_examples(task.train.create_tf_dataset_for_client(cid),
                                       args.ah_val_examples, seed=0)
      steps = {method: _round_step(task, config(method, args.steps, args.batch_size, 0.01), data, val)
               for method in METHODS}
      reps = [timing.interleaved(steps, args.rounds, args.warmup, runtime.worker_pids)
              for _ in range(args.repetitions)]
      flops = {m: step_flops(spec, config(m, args.steps, args.batch_size, 0.01), args.batch_size)
               for m in METHODS}
      print(f"\n{name}:\n| repetition | " + " | ".join(METHODS) + " |")
      print("| --- |" + " --- |" * len(METHODS))
      for i, rep in enumerate(reps, 1):
        print(f"| {i} | " + " | ".join(_cell(rep, m, flops) for m in METHODS) + " |", flush=True)
      pooled = {m: [x for rep in reps for x in rep[m].wall] for m in METHODS}
      med = {m: statistics.median(v) for m, v in pooled.items()}
      out["tasks"][name] = {m: {"median": med[m], "std": statistics.pstdev(pooled[m]),
                                "iqr": timing.summary(timing.Times(pooled[m], []))["iqr"],
                                "ratio_to_fa": med[m] / med["FA"],
                                "ratio_to_fa_by_repetition": [
                                    statistics.median(rep[m].wall) / statistics.median(rep["FA"].wall)
                                    for rep in reps],
                                "cpu_ratio_to_fa": sum(sum(rep[m].cpu) for rep in reps)
                                / sum(sum(rep["FA"].cpu) for rep in reps),
                                "step_flops": flops[m],
                                "ops_ratio_to_fa": flops[m] / flops["FA"]} for m in METHODS}
  if args.json_out:
    strict_json.write(args.json_out, out)


def _round_step(task, cfg: ProcessConfig, data: list, val):
  """One round of a method's process per call, its state carried from call to call."""
  cfg = _reset_theta(cfg)
  p = build_process_for_task(task, cfg, server_val=val).process
  state = [p.initialize()]

  def step():
    state[0] = p.next(state[0], data).state
  return step


def _cell(rep: dict, method: str, flops: dict) -> str:
  """``median [q1, q3] ×ratio (paired median [q1, q3]) cpu ×c ops ×o`` of one repetition."""
  t, fa = rep[method], rep["FA"]
  ratio = statistics.median(t.wall) / statistics.median(fa.wall)
  q1, q2, q3 = timing.quartiles(timing.paired_ratios(t.wall, fa.wall))
  return (f"{timing.fmt_quartiles(t.wall)} ×{ratio:.2f} ({q2:.2f} [{q1:.2f}, {q3:.2f}]) "
          f"cpu ×{sum(t.cpu) / sum(fa.cpu):.2f} ops ×{flops[method] / flops['FA']:.2f}")


if __name__ == "__main__":
  main()
