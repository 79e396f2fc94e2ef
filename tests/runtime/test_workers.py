"""Local executor services: a round's clients split across two workers, same result as one."""

import functools
import os
import signal
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import aggregation
from tff_robust.runtime import workers
from tff_robust.runtime.context import tff_runtime

def child_pids(pid: int) -> list[int]:
  out = []
  for tid in os.listdir(f"/proc/{pid}/task"):
    try:
      with open(f"/proc/{pid}/task/{tid}/children") as f:
        out += [int(p) for p in f.read().split()]
    except FileNotFoundError:  # the thread ended meanwhile
      pass
  return out


def cmdline(pid: int) -> str:
  with open(f"/proc/{pid}/cmdline", "rb") as f:
    return f.read().replace(b"\0", b" ").decode()


def alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def worker_pids(parent: int, addresses) -> list[int]:
  ports = [a.rsplit(":", 1)[1] for a in addresses]
  return [p for p in child_pids(parent) if "worker_binary" in cmdline(p)
          and any(f"--port={port} " in cmdline(p) + " " for port in ports)]


@tff.tensorflow.computation(np.int32, np.float32)
def _count(acc, _):
  return acc + 1


@tff.tensorflow.computation(np.int32, np.int32)
def _max(a, b):
  return tf.maximum(a, b)


@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def mean_and_groups(x):
  """The mean, and the largest per-group client count (merge = max, not +): 4 on one
  executor, 2 when 4 clients are split across two workers."""
  group = tff.federated_aggregate(x, np.int32(0), _count, _max, tff.tensorflow.computation(lambda a: a))
  return tff.federated_mean(x), group


@functools.lru_cache(maxsize=None)
def _aggregation_process(kind):
  """Built (traced) once: the same computation runs on one runtime and on two workers."""
  value_type = tff.types.to_type([tff.TensorType(np.float32, [3])])
  return aggregation.build_aggregator(kind).create(value_type, tff.TensorType(np.float32))


def run_aggregator(kind, deltas):
  process = _aggregation_process(kind)
  return process.next(process.initialize(), deltas, [1.0] * len(deltas))


def test_clients_split_across_two_workers_match_one_runtime(tff_rt):
  values = [1.0, 2.0, 3.0, 10.0]
  deltas = [[np.array([v, -v, 2 * v], np.float32)] for v in values]
  local_mean, local_groups = mean_and_groups(values)
  local_median = run_aggregator("median", deltas)
  assert local_mean == pytest.approx(4.0) and local_groups == 4
  try:
    with workers.local_workers(2) as addresses:
      assert len(addresses) == 2
      pids = worker_pids(os.getpid(), addresses)
      assert len(pids) == 2 and all(alive(p) for p in pids)
      with tff_runtime(addresses=addresses):
        mean, groups = mean_and_groups(values)
        median = run_aggregator("median", deltas)
  finally:
    tff.framework.get_context_stack().set_default_context(tff_rt.context)
  assert groups == 2  # really split: two groups of 2 clients
  assert mean == pytest.approx(local_mean)
  # Median of all 4 (2.5), not the mean of the two workers' medians (4.0).
  np.testing.assert_allclose(median.result[0], local_median.result[0])
  np.testing.assert_allclose(median.result[0], [2.5, -2.5, 5.0])
  assert median.measurements == local_median.measurements
  assert not any(alive(p) for p in pids)


def test_start_workers_validation_and_taken_port():
  with pytest.raises(ValueError, match="--num_workers=0"):
    workers.start_workers(0)
  with socket.socket() as s:
    s.bind(("", 0))
    s.listen()
    port = s.getsockname()[1]
    if port > 65534:
      pytest.skip("ephemeral port at the top of the range")
    with pytest.raises(RuntimeError, match=f"port {port} is already in use"):
      workers.start_workers(2, base_port=port)
  assert not [p for p in child_pids(os.getpid()) if "worker_binary" in cmdline(p)
              and f"--port={port + 1} " in cmdline(p) + " "]


def test_main_prints_addresses_and_stops_workers_on_sigterm(capsys):
  """``main`` in this process (no second TFF import): a thread waits for the two
  workers to answer, then sends SIGTERM to us; ``main`` must stop them and return 0."""
  before = set(child_pids(os.getpid()))
  found: dict[int, str] = {}  # pid -> port

  def terminate_when_ready():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
      new = [p for p in child_pids(os.getpid()) if p not in before and "worker_binary" in cmdline(p)]
      if len(new) == 2:
        ports = [cmdline(p).split("--port=")[1].split()[0] for p in new]
        for port in ports:
          with grpc.insecure_channel(f"localhost:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        found.update(zip(new, ports))
        break
      time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)

  handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  thread = threading.Thread(target=terminate_when_ready)
  thread.start()
  try:
    code = workers.main(["--num_workers=2", "--host=node7"])
  finally:
    thread.join()
    for s, h in handlers.items():
      signal.signal(s, h)
  assert code == 0 and len(found) == 2
  line = capsys.readouterr().out.strip()
  assert sorted(line.split(",")) == sorted(f"node7:{port}" for port in found.values())
  assert not any(alive(p) for p in found)


def test_main_reports_bad_arguments(capsys):
  assert workers.main(["--num_workers=0"]) == 2
  assert "--num_workers=0" in capsys.readouterr().err
