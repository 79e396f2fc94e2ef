"""Resident memory over a long run and round time against clients per round (synthetic task).

    uv run python bench/memory.py --rounds=500
Prints the RSS of this process and of the TFF worker every 50 rounds (flat after warm-up
means no growth per round: no retracing, no accumulating state), then the median round
time for 10, 50 and 100 clients per round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig  # noqa: E402
from tff_robust.runtime.context import tff_runtime  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402


def rss_mb(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=500)
  parser.add_argument("--clients", default="10,50,100")
  parser.add_argument("--timing_rounds", type=int, default=5)
  args = parser.parse_args()
  task = tasks.load_task("synthetic", TaskOptions(num_clients=100))
  p = build_process_for_task(task, ProcessConfig(client=ClientConfig(local_steps=5, batch_size=16))).process
  ids = sorted(task.train.client_ids)
  with tff_runtime() as rt:
    worker = rt.worker_pids[0]
    state = p.initialize()
    data = [task.train.create_tf_dataset_for_client(c) for c in ids[:10]]
    print("round  driver_rss_mb  worker_rss_mb  seconds_per_round")
    t0 = time.perf_counter()
    for r in range(1, args.rounds + 1):
      state = p.next(state, data).state
      if r == 1 or r % 50 == 0:
        print(f"{r:5d}  {rss_mb(os.getpid()):13.1f}  {rss_mb(worker):13.1f}  "
              f"{(time.perf_counter() - t0) / r:.3f}", flush=True)
    print("clients_per_round  median_seconds_per_round")
    for n in (int(c) for c in args.clients.split(",")):
      data = [task.train.create_tf_dataset_for_client(c) for c in ids[:n]]
      state = p.next(state, data).state
      times = []
      for _ in range(args.timing_rounds):
        t = time.perf_counter()
        state = p.next(state, data).state
        times.append(time.perf_counter() - t)
      print(f"{n:17d}  {statistics.median(times):.3f}", flush=True)


if __name__ == "__main__":
  main()
