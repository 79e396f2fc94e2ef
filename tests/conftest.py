"""Shared fixtures: one TFF runtime for the whole test session, torn down at the end."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


def pytest_sessionfinish(session, exitstatus):
  """Drops TFF's import-time context while modules are alive (no noise at exit)."""
  import sys  # pylint: disable=g-import-not-at-top
  if "tensorflow_federated" in sys.modules:
    from tff_robust.runtime.context import disown_default_context  # pylint: disable=g-import-not-at-top
    disown_default_context()


@pytest.fixture(autouse=True)
def _no_stop_watcher_left():
  """A test must not leave `hard_stop`'s watcher running in the pytest worker: a later SIGTERM to
  the worker (a test signalling itself) would end the worker from that thread 7 s later, in
  whatever test runs then."""
  yield
  from tff_robust.common import hard_stop  # pylint: disable=g-import-not-at-top
  assert hard_stop._watchdog is None, "this test started hard_stop's watcher in the test process"  # pylint: disable=protected-access


@pytest.fixture(scope="session")
def tff_rt():
  """A TFF execution context with a worker this test session owns and stops. It compiles without
  TFF's static Grappler pass (the same values, tests/runtime/test_context.py), which costs each new
  computation compile time (8-11 % of the CPU of the files that compile the most,
  docs/test_durations.md); whole programs keep TFF's compile."""
  from tff_robust.runtime.context import tff_runtime
  with tff_runtime(static_grappler=False) as runtime:
    yield runtime
