"""Every run of a call checked before the first one starts, so a table never launches runs that
would each fail the same way (one after another, minutes apart):

* its flags, as `tff_robust.main` parses and validates them (the cell's flagfiles, the overrides,
  ``--extra_flags``): a bad value fails here with main's own message;
* its data: each distinct task and task options loaded once, as main loads them
  (`tasks.load_task`), so missing data fails here with the task's message.

Both raise ValueError with one line naming the run (and how many runs share the problem).
Loading the task imports TensorFlow; the runner calls this only when it is about to start runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from absl import flags

from tff_robust import tasks
from tff_robust.experiments.runs import Run
from tff_robust.flags import definitions, presets

FLAGS = flags.FLAGS


def _parsed(run: Run) -> definitions.RunConfig:
  """``run``'s flags parsed, filled and validated as main does (`tff_robust.main._parse`; the
  global flags, left unparsed)."""
  definitions.define_flags()
  FLAGS.unparse_flags()
  argv = ["main", *run.flags()]
  try:
    FLAGS(argv)
    presets.apply(argv)  # the task's paper setting where main would add it (not under a flagfile)
    return definitions.parse()
  except flags.Error as e:
    raise ValueError(str(e).replace("ERROR:: ", "")) from None
  finally:
    FLAGS.unparse_flags()


def _shared(name: str, count: int) -> str:
  return f"run {name}" + (f" (and {count - 1} more)" if count > 1 else "")


def check_flags(runs: Sequence[Run]) -> dict[str, definitions.RunConfig]:
  """Each run's config by its name; ValueError (naming the first run and how many more fail
  alike) for the first bad flag."""
  configs, failed = {}, {}
  for run in runs:
    try:
      configs[run.experiment_name] = _parsed(run)
    except ValueError as e:
      failed.setdefault(str(e), []).append(run.experiment_name)
  if failed:
    message, names = next(iter(failed.items()))
    raise ValueError(f"{_shared(names[0], len(names))}: {message}")
  return configs


def check_data(configs: dict[str, definitions.RunConfig]) -> None:
  """Loads each distinct (task, task options) of ``configs`` once; ValueError naming a run that
  needs data which is not there (how many runs need it, and the other tasks without their data),
  or more clients per round than the task has."""
  by_data: dict[tuple, list[str]] = {}
  for name, config in configs.items():
    key = (config.task, dataclasses.astuple(config.task_options))
    by_data.setdefault(key, []).append(name)
  missing: list[tuple[str, list[str], Exception]] = []
  for (task_name, _), names in by_data.items():
    try:
      task = tasks.load_task(task_name, configs[names[0]].task_options)
    except (tasks.DataMissingError, ValueError) as e:
      missing.append((task_name, names, e))
      continue
    _check_clients(task_name, len(task.train.client_ids), names, configs)
    del task
  if missing:
    task_name, names, e = missing[0]
    also = "; ".join(f"{t} for {len(n)} run{'s' * (len(n) > 1)}" for t, n, _ in missing[1:])
    raise ValueError(f"{_shared(names[0], len(names))}: {str(e).rstrip('.')}." + (
        f" Also without their data: {also}." if also else ""))


def _check_clients(task_name: str, num_clients: int, names: list[str],
                   configs: dict[str, definitions.RunConfig]) -> None:
  for name in names:
    wanted = configs[name].loop.clients_per_round
    if wanted > num_clients:
      raise ValueError(f"run {name}: --clients_per_round={wanted} is not valid: task {task_name!r} "
                       f"has {num_clients} clients (choose 1..{num_clients}, or 0 to use --client_fraction)")
