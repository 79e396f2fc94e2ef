"""Where a round of plain FedAvg goes: tff_robust's process beside TFF's `build_weighted_fed_avg`.

Counts rather than seconds (they do not move with the machine's load):

* structure of each process's ``next``: the ``tff.federated_*`` intrinsics of the traced
  computation (aggregations: ``federated_sum``, ``federated_aggregate``, ``federated_mean``,
  ``federated_weighted_mean``), its TF computations, and the same after TFF's native compiler
  (the form the worker runs);
* bytes: the server state, one client's output (what it sends beyond Δ), the round's metrics;
* host ↔ worker traffic per round: the executor-service calls and the bytes of their requests
  and responses (the computation itself is sent with every call of ``next``);
* CPU seconds per round of the driver and of the worker (they move less with the machine's
  load than wall time), and cProfile of the driver's event-loop thread over ``--rounds`` calls
  of ``next`` (each process's rounds interleaved): time blocked on the worker and the rest.

    uv run python bench/round_profile.py --task=mnist --rounds=6
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow_federated as tff  # noqa: E402
from tensorflow_federated.python.common_libs import structure  # noqa: E402
from tensorflow_federated.python.core.backends.native import compiler  # noqa: E402
from tensorflow_federated.python.core.impl.compiler import building_blocks  # noqa: E402

import round_time  # noqa: E402  (bench/ is this script's directory on sys.path)
import timing  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.algorithms.process_for_task import build_process_for_task  # noqa: E402
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, ServerConfig  # noqa: E402
from tff_robust.runtime import context  # noqa: E402
from tff_robust.tasks.base import TaskOptions  # noqa: E402

AGGREGATIONS = ("federated_sum", "federated_aggregate", "federated_mean", "federated_weighted_mean",
                "federated_secure_sum", "federated_secure_sum_bitwidth")


def structure_counts(comp: tff.Computation) -> collections.Counter:
  """Intrinsics by name and TF computations (``tensorflow``) of a computation's building block."""
  counts: collections.Counter = collections.Counter()
  stack = [comp.to_building_block()]
  while stack:
    node = stack.pop()
    if isinstance(node, building_blocks.Intrinsic):
      counts[node.uri] += 1
    elif isinstance(node, building_blocks.CompiledComputation):
      counts["tensorflow"] += 1
    stack.extend(node.children())
  return counts


def type_bytes(type_spec) -> int:
  """Bytes of the tensors of a (non-federated or federated) TFF type with known shapes."""
  if isinstance(type_spec, tff.FederatedType):
    type_spec = type_spec.member
  if isinstance(type_spec, tff.TensorType):
    return int(np.prod(type_spec.shape or ())) * np.dtype(type_spec.dtype).itemsize
  if isinstance(type_spec, tff.StructType):
    return sum(type_bytes(t) for _, t in structure.iter_elements(type_spec))
  return 0


def leaves(type_spec) -> int:
  if isinstance(type_spec, tff.FederatedType):
    type_spec = type_spec.member
  if isinstance(type_spec, tff.StructType):
    return sum(leaves(t) for _, t in structure.iter_elements(type_spec))
  return 1


class TrafficCounter:
  """Counts the executor-service calls of the runtime's stub and their bytes (requests and
  responses, protocol-buffer sizes); ``seconds`` is the driver's time inside them."""

  def __init__(self):
    self.calls: collections.Counter = collections.Counter()
    self.bytes_out: collections.Counter = collections.Counter()
    self.bytes_in: collections.Counter = collections.Counter()
    self._original = context._WatchedStub._call  # pylint: disable=protected-access

  def install(self) -> None:
    original, counter = self._original, self

    def call(stub, name, request):
      response = original(stub, name, request)
      counter.calls[name] += 1
      counter.bytes_out[name] += request.ByteSize()
      counter.bytes_in[name] += response.ByteSize() if hasattr(response, "ByteSize") else 0
      return response

    context._WatchedStub._call = call  # pylint: disable=protected-access

  def uninstall(self) -> None:
    context._WatchedStub._call = self._original  # pylint: disable=protected-access

  def snapshot(self) -> tuple:
    return (collections.Counter(self.calls), collections.Counter(self.bytes_out),
            collections.Counter(self.bytes_in))


def _diff(after: tuple, before: tuple) -> tuple:
  return tuple(a - b for a, b in zip(after, before))


def build(args):
  task = tasks.load_task(args.task, TaskOptions(num_clients=args.clients, partition="iid"))
  cids = sorted(task.train.client_ids)[:args.clients]
  raw = [task.train.create_tf_dataset_for_client(c) for c in cids]
  batched = [d.repeat().batch(args.batch_size).take(args.steps) for d in raw]
  ours = build_process_for_task(task, ProcessConfig(
      client=ClientConfig(lr=args.lr, local_steps=args.steps, batch_size=args.batch_size),
      server=ServerConfig(opt="sgd", lr=1.0))).process

  theirs = round_time.tff_fedavg(task, batched[0].element_spec, args.lr)
  return {"tff_robust": (ours, raw), "tff_fedavg": (theirs, batched)}


def report_structure(procs: dict) -> None:
  print("## structure of next (traced; compiled = TFF's native form, what the worker runs)")
  for name, (proc, _) in procs.items():
    counts = structure_counts(proc.next)
    compiled = compiler.desugar_and_transform_to_native(proc.next)
    ccounts = structure_counts(compiled)
    aggs = {k: v for k, v in counts.items() if k in AGGREGATIONS}
    others = {k: v for k, v in counts.items() if k not in AGGREGATIONS and k != "tensorflow"}
    state_t = proc.next.type_signature.parameter[0]
    result_t = proc.next.type_signature.result
    print(f"{name}:\n  aggregations {sum(aggs.values())} {dict(sorted(aggs.items()))}\n"
          f"  other intrinsics {dict(sorted(others.items()))}\n"
          f"  TF computations: traced {counts['tensorflow']}, compiled {ccounts['tensorflow']}; "
          f"compiled proto {len(compiled.to_building_block().proto.SerializeToString()) / 1e6:.2f} MB\n"
          f"  state {type_bytes(state_t) / 1e3:.1f} kB in {leaves(state_t)} tensors; "
          f"metrics {leaves(result_t.metrics)} tensors")


def client_maps(procs: dict) -> None:
  """The TF computations each client runs per round (``federated_map`` at CLIENTS) and what
  they output; the client work's is the one with the most tensors (Δ, weight, metrics)."""
  print("## at the clients: the federated_maps (each one TF call per client per round)")
  for name, (proc, _) in procs.items():
    outputs = []
    stack = [proc.next.to_building_block()]
    while stack:
      node = stack.pop()
      if (isinstance(node, building_blocks.Call) and isinstance(node.function, building_blocks.Intrinsic)
          and node.function.uri == "federated_map" and node.type_signature.placement == tff.CLIENTS):
        outputs.append((leaves(node.type_signature), type_bytes(node.type_signature)))
      stack.extend(node.children())
    work = max(outputs)
    print(f"{name}: {len(outputs)} maps, {sum(1 for _, b in outputs if b > 1e4)} of them over a "
          f"model-sized value; the client work returns {work[1] / 1e3:.1f} kB in {work[0]} tensors")


def profile_rounds(procs: dict, rounds: int, traffic: TrafficCounter, runtime) -> None:
  """Interleaved rounds of each process after one warm-up round: worker calls and bytes, CPU
  seconds (driver, worker), and cProfile of the driver's event-loop thread (where TFF's
  synchronous context runs a call: serialising the arguments, gRPC, deserialising)."""
  states = {name: proc.initialize() for name, (proc, _) in procs.items()}
  for name, (proc, data) in procs.items():  # warm-up: compile, trace, start-up
    states[name] = proc.next(states[name], data).state
  loop = runtime.context._async_runner  # pylint: disable=protected-access
  profiles = {name: cProfile.Profile() for name in procs}

  async def switch(prof: cProfile.Profile, on: bool) -> None:
    prof.enable() if on else prof.disable()

  per_round = {name: (collections.Counter(), collections.Counter(), collections.Counter())
               for name in procs}
  cpu = {name: [0.0, 0.0] for name in procs}
  for _ in range(rounds):
    for name, (proc, data) in procs.items():
      before = traffic.snapshot()
      d0, w0 = timing.cpu_seconds(), timing.cpu_seconds(runtime.worker_pids, this_process=False)
      loop.run_coro_and_return_result(switch(profiles[name], True))
      states[name] = proc.next(states[name], data).state
      loop.run_coro_and_return_result(switch(profiles[name], False))
      d1, w1 = timing.cpu_seconds(), timing.cpu_seconds(runtime.worker_pids, this_process=False)
      cpu[name][0] += d1 - d0
      cpu[name][1] += w1 - w0
      for acc, d in zip(per_round[name], _diff(traffic.snapshot(), before)):
        acc.update(d)
  print(f"## per round (mean of {rounds}): worker calls, MB sent / received, CPU seconds")
  for name in procs:
    calls, out, inn = per_round[name]
    print(f"{name}: " + ", ".join(f"{k} {v / rounds:.0f}" for k, v in sorted(calls.items()))
          + f"; sent {sum(out.values()) / rounds / 1e6:.2f} MB, received "
          f"{sum(inn.values()) / rounds / 1e6:.2f} MB; CPU driver {cpu[name][0] / rounds:.3f} s, "
          f"worker {cpu[name][1] / rounds:.3f} s")
  print("## the driver's event-loop thread per round (cProfile)")
  for name, prof in profiles.items():
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # tottime over all functions
    blocked = sum(v[2] for k, v in stats.stats.items()
                  if "grpc" in k[0] or k[2] in ("acquire", "select", "poll", "epoll"))
    print(f"{name}: {total / rounds * 1e3:.0f} ms, of which waiting on the worker (gRPC) "
          f"{blocked / rounds * 1e3:.0f} ms; Python {(total - blocked) / rounds * 1e3:.0f} ms")
    stats.sort_stats("tottime").print_stats(6)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", default="mnist")
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--lr", type=float, default=0.05)
  parser.add_argument("--rounds", type=int, default=6)
  args = parser.parse_args()
  procs = build(args)
  report_structure(procs)
  client_maps(procs)
  traffic = TrafficCounter()
  traffic.install()
  try:
    with context.tff_runtime() as runtime:
      profile_rounds(procs, args.rounds, traffic, runtime)
  finally:
    traffic.uninstall()
    context.disown_default_context()


if __name__ == "__main__":
  main()
