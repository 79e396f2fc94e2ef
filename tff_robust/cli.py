"""What the command-line entry points (`main`, `tune`) share: exit-2 errors, logging, the task."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import tasks
from tasks.base import DataMissingError, Task

T = TypeVar("T")


def fail(message: str) -> NoReturn:
  """Prints ``error: message`` to stderr and exits with status 2 (a bad flag or input)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def start(argv: list[str]) -> None:
  """Rejects positional arguments, drops TFF's import-time context, logs to stdout."""
  if len(argv) > 1:
    fail(f"unexpected arguments: {' '.join(argv[1:])} (flags are written --name=value)")
  from tff_robust.runtime import disown_default_context  # pylint: disable=g-import-not-at-top
  disown_default_context()
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
  logging.getLogger("tff_robust").setLevel(logging.INFO)


def parse_and_load(parse: Callable[[], T], run_of: Callable[[T], Any]) -> tuple[T, Task]:
  """Parses the flags and loads the run's task (checking RM supports its model), before any
  tracing; a bad flag or missing data exits with status 2 and a message."""
  try:
    config = parse()
    run = run_of(config)
    task = tasks.load_task(run.task, run.task_options)
    if run.process.uses_rm:
      from tff_robust import matching  # pylint: disable=g-import-not-at-top
      matching.check_supported(task.model_fn())
  except (ValueError, DataMissingError) as e:
    fail(str(e))
  return config, task
