"""One system of `bench/scale.py` on one file, in a process of its own (so its peak memory is its
own): start-up, round times, pooled evaluation and peak RSS, printed as one JSON line.

Systems, all on the same file and the same sampled clients (``selection.sample_clients``):

* ``ours``: the task as ``tff_robust.main`` loads it (`tasks.sql_reader`) and our process
  (one local epoch at batch B, server SGD at lr 1);
* ``tff_same``: TFF's ``tff.learning.algorithms.build_weighted_fed_avg`` of the same model on the
  same client datasets (``dataset.batch(B)``, one epoch): the process alone, against ours;
* ``pair``: ``ours`` and ``tff_same`` in one process, their rounds alternating on the same
  clients: the round-time ratio that the machine's load moves least;
* ``tff_sql``: TFF's own loader (``tff.simulation.datasets.<data set>.load_data``, its
  ``SqlClientData``: one scan of the file per client) under the task's preprocessing, with TFF's
  FedAvg: what TFF alone does with the file. Its pooled evaluation reads ``eval_clients`` of the
  clients (one scan each) and is scaled by their share when that is fewer than all;
* ``workers``: ours at the first client count, each round from the same state on the same
  clients on the local runtime and on two local TFF workers (``--workers``): the largest
  difference of the two next states (the model's dropout off: its masks are drawn afresh in
  every run), round times, and the last round's pooled evaluation from each.

    uv run python bench/scale_run.py --system=ours --task=emnist_cr --data_dir=D --clients=10,50
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

import anchors  # noqa: E402  (bench/anchors.py)
import timing  # noqa: E402  (bench/timing.py; bench/ is this script's directory on sys.path)

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms import evaluation  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task  # noqa: E402
from tff_robust.runtime import workers as workers_lib  # noqa: E402
from tff_robust.runtime.context import disown_default_context, tff_runtime  # noqa: E402
from tff_robust.simulation.selection import sample_clients  # noqa: E402
from tff_robust.tasks import stackoverflow, tff_sqlite  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402

BATCH = {"emnist_cr": 20, "shakespeare": 4, "cifar100": 20, "stackoverflow_nwp": 16}  # Reddi et al.
LR = 0.05


def peak_rss_mb(pid: int | str = "self") -> float:
  """Peak resident memory (VmHWM) of a process, MiB."""
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def worker_pids() -> list[int]:
  """This process's ``worker_binary`` children (the local runtime's or ``--workers``')."""
  pids = []
  for tid in os.listdir("/proc/self/task"):
    try:
      with open(f"/proc/self/task/{tid}/children") as f:
        pids += [int(p) for p in f.read().split()]
    except FileNotFoundError:
      pass
  out = []
  for pid in pids:
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        if b"worker_binary" in f.read():
          out.append(pid)
    except FileNotFoundError:
      pass
  return out


def _tff_loader(path: str, what: str, dataset: str, **loader_kwargs):
  """TFF's own loader (the project's path before `sql_reader`): ``SqlClientData`` splits."""
  tff_sqlite.require_file(path, what, dataset, **loader_kwargs)
  return getattr(tff.simulation.datasets, dataset).load_data(**loader_kwargs,
                                                             cache_dir=os.path.dirname(path))


def _capped(loader, eval_clients: int, factor: list):
  """``loader`` whose evaluation splits (after the first) keep their first ``eval_clients``."""
  def load(path, what, dataset, **kw):
    splits = loader(path, what, dataset, **kw)
    out = [splits[0]]
    for split in splits[1:]:
      ids = sorted(split.client_ids)
      full = min(len(ids), stackoverflow.EVAL_CLIENTS) if dataset == "stackoverflow" else len(ids)
      keep = ids[:eval_clients] if eval_clients else ids
      factor.append(full / min(len(keep), full))
      out.append(tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
          keep, split.serializable_dataset_fn) if len(keep) < len(ids) else split)
    return tuple(out)
  return load


def load(system: str, task_name: str, data_dir: str, eval_clients: int):
  """(task, start-up seconds, pooled-evaluation scale factor) of ``system``'s data path."""
  factor: list[float] = []
  if system == "tff_sql":
    tff_sqlite.load = _capped(_tff_loader, eval_clients, factor)
  t0 = time.perf_counter()
  task = tasks.load_task(task_name, TaskOptions(data_dir=data_dir))
  return task, time.perf_counter() - t0, (factor[-1] if factor else 1.0)  # the test split's


def tff_fedavg(task, batch: int):
  """TFF's weighted FedAvg of the task's model (`anchors.tff_fedavg`) at `LR`, on batches of ``batch``."""
  spec = task.train.create_tf_dataset_for_client(task.train.client_ids[0]).batch(batch).element_spec
  return anchors.tff_fedavg(task, spec, LR)


def ours_process(task, batch: int):
  return build_process_for_task(task, ProcessConfig(
      client=ClientConfig(lr=LR, local_steps=0, local_epochs=1, batch_size=batch),
      server=ServerConfig(opt="sgd", lr=1.0))).process


def time_rounds(task, processes: dict, counts: list[int], rounds: int, warmup: int, seed: int,
                batch: int, states: dict | None = None) -> tuple[dict, dict]:
  """Wall and CPU seconds of each round (the clients' datasets made, then ``next``) of each
  process, per client count; with two processes their rounds alternate on the same clients
  (round r of both, first one then the other first), so the machine's drift falls on both.
  ``processes``: name -> process (``ours`` takes the datasets unbatched, TFF's batched)."""
  states = dict(states or {name: p.initialize() for name, p in processes.items()})
  ids = sorted(task.train.client_ids)
  out: dict = {name: {} for name in processes}
  for i, n in enumerate(counts):
    times = {name: ([], []) for name in processes}
    # Warm-up rounds at the first count only: a computation is traced once for any number of
    # clients, so later counts need none (at 100 clients a round can take minutes).
    first = warmup if i == 0 else 0
    for r in range(1, first + rounds + 1):
      chosen = sample_clients(ids, min(n, len(ids)), seed, r)
      names = list(processes) if r % 2 else list(processes)[::-1]
      for name in names:
        c0, t0 = timing.cpu_seconds(worker_pids()), time.perf_counter()
        data = [task.train.create_tf_dataset_for_client(c) for c in chosen]
        if name != "ours":
          data = [d.batch(batch) for d in data]
        states[name] = processes[name].next(states[name], data).state
        t1, c1 = time.perf_counter(), timing.cpu_seconds(worker_pids())
        if r > first:
          times[name][0].append(t1 - t0)
          times[name][1].append(c1 - c0)
        # Each round as it ends, so a run stopped later (e.g. out of memory at a larger count) keeps it.
        print(f"  round {r} {name} {n} clients: {t1 - t0:.2f} s wall, {c1 - c0:.2f} s worker CPU"
              f"{'' if r > first else ' (warm-up)'}", flush=True)
    for name, (wall, cpu) in times.items():
      out[name][str(n)] = {"median": statistics.median(wall), "wall": wall, "cpu": cpu}
      print(f"  {name} {n} clients: {statistics.median(wall):.2f} s a round", flush=True)
  return out, states


def weights_of(system: str, process, state) -> list[np.ndarray]:
  w = process.get_model_weights(state)
  return [np.asarray(v) for v in list(w.trainable) + list(w.non_trainable)]


def _add_batch_size(count, batch):
  return count + tf.cast(tf.shape(tf.nest.flatten(batch)[0])[0], tf.int64)


def pooled_eval(task, weights, read: int = 1) -> dict:
  """The pooled test split read ``read`` times without a model (``read_s``, their median: the
  data path alone), then
  evaluated twice on the driver as the training loop does (batched, cached): the first
  evaluation reads it again, the second comes from the cache."""
  ev = evaluation.make_evaluator(task.model_fn, task.loss_fn, task.accuracy_fn)
  n = len(task.model_fn().trainable_variables)
  out = {}
  if read:
    passes = []
    for _ in range(max(1, read)):
      t0 = time.perf_counter()
      out["examples"] = int(task.test.batch(256).reduce(np.int64(0), _add_batch_size))
      passes.append(time.perf_counter() - t0)
    out["read_s"], out["read_passes_s"] = statistics.median(passes), passes
  data = task.test.batch(256).cache()
  for name in ("cold", "warm"):
    t0 = time.perf_counter()
    metrics = ev(weights[:n], weights[n:], data)
    out[f"{name}_s"] = time.perf_counter() - t0
  out["metrics"] = metrics
  return out


def run(args) -> dict:
  task, startup, factor = load(args.system, args.task, args.data_dir, args.eval_clients)
  batch = BATCH[args.task]
  counts = [int(c) for c in args.clients.split(",") if c]
  result = {"system": args.system, "task": args.task, "data_dir": args.data_dir,
            "startup_s": startup, "train_clients": len(task.train.client_ids), "batch": batch}
  with tff_runtime():
    workers = worker_pids()
    if counts:
      processes = {}
      if args.system in ("ours", "pair"):
        processes["ours"] = ours_process(task, batch)
      if args.system != "ours":
        processes["tff_same" if args.system == "pair" else args.system] = tff_fedavg(task, batch)
      times, states = time_rounds(task, processes, counts, args.rounds, args.warmup, args.seed, batch)
      result["rounds"] = times if args.system == "pair" else next(iter(times.values()))
      name = next(iter(processes))
      weights = weights_of(name, processes[name], states[name])
    else:
      weights = [v.numpy() for v in task.model_fn().variables]
    if args.eval and args.system in ("ours", "tff_sql"):
      result["pooled"] = pooled_eval(task, weights, args.read_passes)
      result["pooled"]["scale"] = factor
      print(f"  {args.system} pooled test: read {result['pooled']['read_s']:.1f} s, evaluation "
            f"{result['pooled']['cold_s']:.1f} s (x{factor:g}), cached {result['pooled']['warm_s']:.1f} s",
            flush=True)
    result["worker_peak_mb"] = [peak_rss_mb(p) for p in workers]
  result["driver_peak_mb"] = peak_rss_mb()
  return result


def run_workers(args) -> dict:
  """Each round from the same state on the same clients, on the local runtime and on two local
  workers (``--workers``): the largest difference of the two next states' weights, the round
  times, and the pooled evaluation of the last round's model from each."""
  task, _, _ = load("ours", args.task, args.data_dir, 0)
  task = dataclasses.replace(task, model_fn=_without_dropout(task.model_fn))
  batch, n = BATCH[args.task], int(args.clients.split(",")[0])
  process = ours_process(task, batch)
  ids = sorted(task.train.client_ids)
  rounds = range(1, args.warmup + args.rounds + 1)
  chosen = {r: sample_clients(ids, min(n, len(ids)), args.seed, r) for r in rounds}
  out = {"system": "workers", "task": args.task, "clients": n, "rounds": args.rounds,
         "warmup": args.warmup, "dropout": "off"}
  states, weights, diffs = [], {}, []

  def one(state, r):
    t0 = time.perf_counter()
    nxt = process.next(state, [task.train.create_tf_dataset_for_client(c) for c in chosen[r]]).state
    return nxt, time.perf_counter() - t0

  for name, count in (("local", 0), ("two_workers", 2)):
    with workers_lib.local_workers(count) if count else _nothing() as addresses:
      with tff_runtime(addresses=addresses or ()):
        if not states:
          states.append(process.initialize())
        times = []
        for r in rounds:
          nxt, seconds = one(states[r - 1], r)
          times.append(seconds)
          w = weights_of("ours", process, nxt)
          if name == "local":
            states.append(nxt)
            weights[r] = w
          else:
            diffs.append(float(max(np.max(np.abs(a - b)) for a, b in zip(w, weights[r]))))
        timed = times[args.warmup:]
        out[name] = {"round_s": statistics.median(timed), "wall": timed,
                     "metrics": pooled_eval(task, w, read=0)["metrics"],
                     "worker_peak_mb": [peak_rss_mb(p) for p in worker_pids()]}
  out["max_abs_weight_difference"] = max(diffs)
  out["weight_difference_by_round"] = diffs
  out["driver_peak_mb"] = peak_rss_mb()
  return out


def _without_dropout(model_fn):
  """``model_fn`` with its Dropout layers at rate 0: dropout's masks are drawn afresh in every
  run (TFF's graphs have no seed), so only without them do two runs compute the same numbers."""
  def make():
    model = model_fn()
    for layer in model.layers:
      if isinstance(layer, tf.keras.layers.Dropout):
        layer.rate = 0.0
    return model
  return make


class _nothing:  # pylint: disable=invalid-name
  def __enter__(self):
    return None

  def __exit__(self, *exc):
    return False


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--system", choices=("ours", "tff_same", "tff_sql", "pair", "workers"),
                      required=True)
  parser.add_argument("--task", choices=sorted(BATCH), required=True)
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--clients", default="10,50,100", help="clients a round ('' = no rounds)")
  parser.add_argument("--rounds", type=int, default=3, help="timed rounds per client count")
  parser.add_argument("--warmup", type=int, default=1, help="rounds run first at the first client count, not timed")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--eval", type=int, default=1, help="1: time the pooled evaluation")
  parser.add_argument("--read_passes", type=int, default=3,
                      help="passes over the pooled test without a model (their median is read_s)")
  parser.add_argument("--eval_clients", type=int, default=0,
                      help="tff_sql: evaluation clients read (0 = all); the time is scaled up")
  args = parser.parse_args()
  disown_default_context()  # only the runtimes started here run computations
  result = run_workers(args) if args.system == "workers" else run(args)
  print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
  main()
