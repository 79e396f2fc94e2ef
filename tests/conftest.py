"""Shared fixtures: one TFF runtime for the whole test session, torn down at the end."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


# The longest test files, longest first (CPU-s of each file's tests, `bench/test_cpu.py` at 839c71c:
# 82, 57, 45, 39, 39, 34, 33, 30, 27, 17, 12, 11, 11). With `--dist loadfile` (pyproject.toml) a
# pytest-xdist worker takes the next whole file when it is free, so these start first and the
# short files fill in at the end, where one long file would keep the other worker idle
# (longest-processing-time-first scheduling). A file missing here only runs later.
LONGEST_FIRST = (
    "tests/algorithms/test_process_rm.py",
    "tests/tasks/test_tasks_more.py",
    "tests/tasks/test_task_rounds.py",
    "tests/simulation/test_faults.py",
    "tests/experiments/test_experiments.py",
    "tests/programs/test_notebook.py",
    "tests/algorithms/test_aggregation.py",
    "tests/programs/test_cli.py",
    "tests/algorithms/test_process.py",
    "tests/programs/test_stop_start.py",
    "tests/algorithms/test_process_ah.py",
    "tests/simulation/test_client_metrics.py",
    "tests/programs/test_main.py",
)


def pytest_collection_modifyitems(session, config, items):
  """Files of LONGEST_FIRST first, in its order; each file's tests and the other files keep theirs."""
  rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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
  """A TFF execution context with a worker this test session owns and stops."""
  from tff_robust.runtime.context import tff_runtime
  with tff_runtime() as runtime:
    yield runtime
