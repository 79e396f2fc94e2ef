"""TFF execution runtime whose worker processes this program owns.

TFF's default local context starts ``worker_binary`` lazily and stops it only
from ``__del__``, which does not run at interpreter shutdown: the worker then
outlives its parent. Here the worker is started by us, dies with its parent
(``PR_SET_PDEATHSIG``) even if the parent is killed, and is stopped by pid in
``close()``. The other way round, a worker that dies under us (killed, out of
memory) would make TFF retry its gRPC calls forever; our stub notices the exit
and raises ``WorkerDiedError`` instead.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import subprocess
import time
from collections.abc import Iterator, Sequence

import grpc
import portpicker
import tensorflow_federated as tff
from tensorflow_federated.python.core.backends.native import compiler
from tensorflow_federated.python.core.environments.tensorflow_backend import tensorflow_tree_transformations
from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tensorflow_federated.python.core.impl.context_stack import runtime_error_context
from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import executors_errors
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.executors import remote_executor_stub
from tensorflow_federated.python.core.impl.types import placements

from tff_robust.common import hard_stop
from tff_robust.runtime import children

_GRPC_OPTIONS = [
    ("grpc.max_message_length", 2_000_000_000),
    ("grpc.max_receive_message_length", 2_000_000_000),
    ("grpc.max_send_message_length", 2_000_000_000),
]

WORKER_BINARY = os.path.join(os.path.dirname(tff.__file__), "data", "worker_binary")


def _worker_preexec() -> None:  # pragma: no cover - runs in the child
  """The worker dies with its parent and leaves the parent's process group, so a terminal's
  Ctrl-C reaches only the parent (which ends its round, then stops us)."""
  children.die_with_parent()
  os.setpgrp()


def start_worker(port: int | None = None, log_path: str | None = None) -> tuple[subprocess.Popen, int]:
  """Starts one TFF ``worker_binary`` executor service on localhost:port."""
  port = port or portpicker.pick_unused_port()
  out = open(log_path, "ab") if log_path else subprocess.DEVNULL
  proc = subprocess.Popen(
      [WORKER_BINARY, f"--port={port}", "--max_concurrent_computation_calls=-1"],
      stdin=subprocess.DEVNULL, stdout=out, stderr=out,
      preexec_fn=_worker_preexec, close_fds=True)
  if log_path:
    out.close()
  return proc, port


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
  """Stops a process we started, by pid: SIGINT, then SIGKILL after ``timeout``."""
  children.stop([proc], timeout)


def _stub(address: str, timeout: float = 60.0) -> remote_executor_grpc_stub.RemoteExecutorGrpcStub:
  channel = grpc.insecure_channel(address, _GRPC_OPTIONS)
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
  deadline = time.monotonic() + timeout
  while not stub.is_ready:
    if time.monotonic() > deadline:
      raise RuntimeError(f"TFF executor service at {address} did not become ready in {timeout:.0f}s.")
    time.sleep(0.05)
  return stub


class WorkerDiedError(RuntimeError):
  """The ``worker_binary`` this program started exited while computations were running."""


def _watched(name: str):
  def method(self, request):
    return self._call(name, request)
  method.__name__ = name
  return method


class _WatchedStub(remote_executor_stub.RemoteExecutorStub):
  """Forwards to a gRPC stub; when its worker process has exited, fails instead of retrying.

  TFF retries calls that fail with UNAVAILABLE without limit, which is right for
  a restarting remote service and wrong for a local worker that is gone.
  """

  def __init__(self, stub: remote_executor_grpc_stub.RemoteExecutorGrpcStub,
               proc: subprocess.Popen, log_path: str | None):
    self._stub, self._proc, self._log_path = stub, proc, log_path

  def _check_alive(self) -> None:
    code = self._proc.poll()
    if code is not None:
      where = f"; its log is {self._log_path}" if self._log_path else ""
      raise WorkerDiedError(
          f"the TFF worker_binary (pid {self._proc.pid}) exited with code {code} during a "
          f"computation (a negative code is the signal that ended it, e.g. -9 for the "
          f"out-of-memory killer){where}.")

  def _call(self, name: str, request):
    self._check_alive()
    try:
      return getattr(self._stub, name)(request)
    except executors_errors.RetryableError:
      time.sleep(0.2)  # let a dying worker finish exiting before deciding
      self._check_alive()
      raise

  get_executor = _watched("get_executor")
  create_value = _watched("create_value")
  create_struct = _watched("create_struct")
  create_call = _watched("create_call")
  create_selection = _watched("create_selection")
  compute = _watched("compute")
  dispose = _watched("dispose")
  dispose_executor = _watched("dispose_executor")

  @property
  def is_ready(self) -> bool:
    return self._stub.is_ready


def _executor_factory(stub) -> python_executor_stacks.ResourceManagingExecutorFactory:
  def stack_fn(cardinalities):
    cardinalities.setdefault(placements.CLIENTS, 0)
    executor = remote_executor.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor
  return python_executor_stacks.ResourceManagingExecutorFactory(executor_stack_fn=stack_fn)


def _compile_without_grappler(
    comp: computation_impl.ConcreteComputation) -> computation_impl.ConcreteComputation:
  """TFF's native compile (`compiler.desugar_and_transform_to_native`: intrinsics desugared, then
  call-dominant form with cache ids) without its static Grappler pass over every TensorFlow graph.
  Grappler rewrites are meant to preserve the computed values; the pass is there to inline
  functions for GPU placement, and costs each new computation compile time."""
  desugared, _ = tensorflow_tree_transformations.replace_intrinsics_with_bodies(comp.to_building_block())
  return compiler.transform_to_native_form(
      computation_impl.ConcreteComputation(computation_proto=desugared.proto,
                                           context_stack=context_stack_impl.context_stack),
      grappler_config=None)


def _context_kwargs(static_grappler: bool = True) -> dict:
  return dict(
      compiler_fn=(compiler.desugar_and_transform_to_native if static_grappler
                   else _compile_without_grappler),
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)


def disown_default_context() -> None:
  """Replaces the context TFF installs at import, so TFF itself never starts a worker.

  Also silences the error its worker manager's ``__del__`` prints at interpreter exit.
  """
  context_stack_impl.context_stack.set_default_context(runtime_error_context.RuntimeErrorContext())
  gc.collect()


class Runtime:
  """Owns the TFF execution context and the worker processes it talks to.

  With no ``addresses`` a local worker is started; with ``addresses``
  (``host:port`` of running ``worker_binary`` services) a round's clients are
  split across them with TFF's mergeable execution context. ``static_grappler=False`` compiles
  without TFF's static Grappler pass (`_compile_without_grappler`; the test suite's shared runtime,
  which compiles many small computations once each); programs keep TFF's compile.
  """

  def __init__(self, addresses: Sequence[str] = (), log_path: str | None = None,
               static_grappler: bool = True):
    self._procs: list[subprocess.Popen] = []
    self._addresses = list(addresses)
    self._log_path = log_path
    self.static_grappler = static_grappler
    self.context = None
    self._previous = None

  def start(self) -> "Runtime":
    if self._addresses:
      stubs = [_stub(a) for a in self._addresses]
      kwargs = _context_kwargs(self.static_grappler)
      contexts = [async_execution_context.AsyncExecutionContext(executor_fn=_executor_factory(s), **kwargs)
                  for s in stubs]
      self.context = tff.backends.native.create_mergeable_comp_execution_context(contexts)
    else:
      proc, port = start_worker(log_path=self._log_path)
      self._procs.append(proc)
      hard_stop.own(proc.pid)  # a stop forced from a thread kills it too
      stub = _WatchedStub(_stub(f"localhost:{port}"), proc, self._log_path)
      self.context = sync_execution_context.SyncExecutionContext(
          executor_fn=_executor_factory(stub), **_context_kwargs(self.static_grappler))
    self._previous = context_stack_impl.context_stack._stack[0]  # pylint: disable=protected-access
    context_stack_impl.context_stack.set_default_context(self.context)
    atexit.register(self.close)
    return self

  @property
  def worker_pids(self) -> list[int]:
    return [p.pid for p in self._procs]

  def close(self) -> None:
    """Puts back the previous context and stops the workers this runtime started."""
    if self.context is not None:
      previous = self._previous or runtime_error_context.RuntimeErrorContext()
      context_stack_impl.context_stack.set_default_context(previous)
      self.context = self._previous = None
      gc.collect()
    for proc in self._procs:
      stop_process(proc)
      hard_stop.disown(proc.pid)
    self._procs.clear()
    atexit.unregister(self.close)


@contextlib.contextmanager
def tff_runtime(addresses: Sequence[str] = (), log_path: str | None = None,
                static_grappler: bool = True) -> Iterator[Runtime]:
  """``with tff_runtime() as rt:`` runs TFF computations; no worker survives the block."""
  runtime = Runtime(addresses, log_path, static_grappler).start()
  try:
    yield runtime
  finally:
    runtime.close()
