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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms import client_work, evaluation, process  # noqa: E402
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
        f"over {args.rounds} rounds; AH validation set {args.ah_val_examples} examples")
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
      cells = [f"{med[m]:.3f} ({statistics.pstdev(runs[m][2]):.3f}) ×{med[m] / med['FA']:.2f}"
               for m in METHODS]
      print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
      out["tasks"][name] = {m: {"median": med[m], "std": statistics.pstdev(runs[m][2]),
                                "ratio_to_fa": med[m] / med["FA"]} for m in METHODS}
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
