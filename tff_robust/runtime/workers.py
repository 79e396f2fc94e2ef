"""Local TFF executor services to scale a round's clients out over several processes.

``python -m tff_robust.runtime.workers --num_workers=2 [--base_port=P] [--host=H] [--log_dir=D]``
starts N ``worker_binary`` gRPC executor services (ports P, P+1, ... or free ports), prints
their addresses on one line, comma separated, for ``--workers=``, and stops them by
pid on SIGINT/SIGTERM. The workers also die with this process (``PR_SET_PDEATHSIG``,
see `runtime.start_worker`). `local_workers` does the same inside Python (tests).

Data files must exist at the same path for every worker (dataset graphs travel).
`runtime.context` (TensorFlow and TFF) is imported only when workers start, so ``--help`` and
a refused argument exit without importing TensorFlow.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading

if __name__ == "__main__":
  from tff_robust.common import console
  console.quiet_native_logs(sys.argv)
from collections.abc import Iterator, Sequence
from typing import Optional

import grpc
import portpicker

_READY_TIMEOUT = 60.0


def _wait_ready(proc: subprocess.Popen, port: int, timeout: float = _READY_TIMEOUT) -> None:
  """Blocks until the worker on ``port`` accepts gRPC connections; fails if it exits."""
  with grpc.insecure_channel(f"localhost:{port}") as channel:
    future = grpc.channel_ready_future(channel)
    waited = 0.0
    while True:
      if proc.poll() is not None:
        raise RuntimeError(f"worker_binary on port {port} exited with code {proc.returncode} "
                           "before becoming ready (port taken?)")
      try:
        future.result(timeout=0.2)
        return
      except grpc.FutureTimeoutError:
        waited += 0.2
        if waited >= timeout:
          future.cancel()
          raise RuntimeError(f"worker_binary on port {port} did not become ready in {timeout:.0f}s")


def start_workers(num_workers: int, base_port: Optional[int] = None,
                  log_dir: Optional[str] = None) -> tuple[list[subprocess.Popen], list[int]]:
  """Starts ``num_workers`` ready workers on ``base_port + i`` (or free ports).

  Worker output goes to ``<log_dir>/worker_<port>.log`` (discarded without
  ``log_dir``). On any failure the workers already started are stopped before raising.
  """
  if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
    raise ValueError(f"--num_workers={num_workers!r} is not valid; it must be an integer >= 1")
  if base_port is not None and (not isinstance(base_port, int) or not 1024 <= base_port
                                <= 65535 - num_workers + 1):
    raise ValueError(f"--base_port={base_port!r} is not valid; choose "
                     f"1024..{65535 - num_workers + 1} or leave it unset for free ports")
  from tff_robust.runtime.context import start_worker, stop_process  # pylint: disable=g-import-not-at-top
  procs: list[subprocess.Popen] = []
  ports: list[int] = []
  try:
    for i in range(num_workers):
      if base_port is None:
        port = portpicker.pick_unused_port()
      else:
        port = base_port + i
        if not portpicker.is_port_free(port):
          raise RuntimeError(f"--base_port: port {port} is already in use")
      log_path = os.path.join(log_dir, f"worker_{port}.log") if log_dir else None
      proc, port = start_worker(port, log_path=log_path)
      procs.append(proc)
      ports.append(port)
    for proc, port in zip(procs, ports):
      _wait_ready(proc, port)
  except BaseException:
    for proc in procs:
      stop_process(proc)
    raise
  return procs, ports


@contextlib.contextmanager
def local_workers(num_workers: int, base_port: Optional[int] = None,
                  log_dir: Optional[str] = None) -> Iterator[list[str]]:
  """``with local_workers(2) as addresses:`` — ``localhost:port`` of running workers,
  all stopped (by pid) when the block ends."""
  procs, ports = start_workers(num_workers, base_port, log_dir)
  from tff_robust.runtime.context import stop_process  # pylint: disable=g-import-not-at-top
  try:
    yield [f"localhost:{p}" for p in ports]
  finally:
    for proc in procs:
      stop_process(proc)


def _parse(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m tff_robust.runtime.workers",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--num_workers", type=int, default=2)
  parser.add_argument("--base_port", type=int, default=None,
                      help="first port (then +1, +2, ...); default: free ports")
  parser.add_argument("--host", default="localhost", help="host name printed in the addresses")
  parser.add_argument("--log_dir", default=None,
                      help="append worker output to <dir>/worker_<port>.log")
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = _parse(sys.argv[1:] if argv is None else argv)
  stop = threading.Event()
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, lambda *_: stop.set())
  try:
    procs, ports = start_workers(args.num_workers, args.base_port, args.log_dir)
  except (ValueError, RuntimeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  from tff_robust.runtime.context import stop_process  # pylint: disable=g-import-not-at-top
  code = 0
  try:
    print(",".join(f"{args.host}:{p}" for p in ports), flush=True)
    while not stop.wait(1.0):
      dead = [(p, proc.returncode) for proc, p in zip(procs, ports) if proc.poll() is not None]
      if dead and not stop.wait(0.5):  # not the terminal's Ctrl-C reaching the workers too
        print(f"error: worker(s) exited: {dead} (port, code)", file=sys.stderr, flush=True)
        code = 1
        break
  finally:
    for proc in procs:
      stop_process(proc)
  return code


if __name__ == "__main__":
  _parse(sys.argv[1:])  # --help and argparse's refusals exit here, before TensorFlow is imported
  from tff_robust.runtime.context import disown_default_context  # pylint: disable=g-import-not-at-top
  disown_default_context()  # this process runs no computation: TFF must not start a worker
  sys.exit(main())
