"""Shared fixtures: one TFF runtime for the whole test session, torn down at the end."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tff_rt():
  """A TFF execution context with a worker this test session owns and stops."""
  from tff_robust.runtime import tff_runtime
  with tff_runtime() as runtime:
    yield runtime
