"""Registry of tasks: name -> module, option validation, and user plug-ins.

Every task module exposes:

* ``DATA_SOURCES``, ``MODELS``, ``PARTITIONS``: tuples of accepted values; the
  first entry is the default (``DATA_SOURCES[0]`` works offline).
* ``build_task(options: TaskOptions) -> Task``.
* optionally ``validate_options(options: TaskOptions) -> None``: task-specific
  checks on *resolved* options that need no data (raise ``ValueError``).

A task name ``package.module:function`` is a user plug-in: ``function(options)``
must return a `Task` (any Keras model and federated data, no package edits).

Task modules are imported only when used.

May import: tff_robust.common only (the algorithms, the driver and the commands build on tasks).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
from collections.abc import Sequence

from tff_robust.tasks.base import DataMissingError, Task, TaskOptions, sparse_accuracy

__all__ = [
    "DataMissingError", "Task", "TaskOptions", "sparse_accuracy", "TASK_MODULES", "task_names",
    "task_module", "resolve_options", "validate_task_options", "load_task",
]

# Adding a task is one line here plus its module.
TASK_MODULES: dict[str, str] = {
    "mnist": "tff_robust.tasks.mnist",
    "emnist_cr": "tff_robust.tasks.emnist_cr",
    "synthetic": "tff_robust.tasks.synthetic",
    "cifar10": "tff_robust.tasks.cifar10",
    "cifar100": "tff_robust.tasks.cifar100",
    "shakespeare": "tff_robust.tasks.shakespeare",
    "speech_commands": "tff_robust.tasks.speech_commands",
    "emnist_ae": "tff_robust.tasks.emnist_ae",
    "stackoverflow_nwp": "tff_robust.tasks.stackoverflow_nwp",
    "stackoverflow_lr": "tff_robust.tasks.stackoverflow_lr",
}

DEFAULT = "default"


def task_names() -> tuple[str, ...]:
  """The registered task names, in registration order."""
  return tuple(TASK_MODULES)


def is_plugin(name: str) -> bool:
  """Whether ``name`` has the plug-in form ``package.module:function``."""
  return ":" in name


def task_module(name: str) -> types.ModuleType:
  """Imports the module of the registered task ``name``."""
  if name not in TASK_MODULES:
    raise ValueError(
        f"--task={name!r} is not a known task; choose one of: {', '.join(task_names())} "
        "(or a plug-in 'package.module:function').")
  return importlib.import_module(TASK_MODULES[name])


def _choose(flag: str, value: str, choices: Sequence[str], task: str) -> str:
  if value == DEFAULT:
    return choices[0]
  if value not in choices:
    raise ValueError(
        f"{flag}={value!r} is not valid for task {task!r}; choose one of: {', '.join(choices)}"
        f" (or {DEFAULT!r} = {choices[0]!r}).")
  return value


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _check_common(options: TaskOptions) -> None:
  """Checks on options every task shares."""
  if not isinstance(options, TaskOptions):
    raise TypeError(f"options must be a tasks.TaskOptions, got {type(options).__name__}.")
  if not _is_int(options.num_clients) or options.num_clients < 0:
    raise ValueError(f"--num_clients={options.num_clients!r} is not valid; it must be an integer >= 0.")
  alpha = options.dirichlet_alpha
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
    raise ValueError(f"--dirichlet_alpha={alpha!r} is not valid; it must be a finite number > 0.")
  if not _is_int(options.classes_per_client) or options.classes_per_client < 1:
    raise ValueError(f"--classes_per_client={options.classes_per_client!r} is not valid; it must be an "
                     "integer >= 1.")
  if not _is_int(options.seed) or not 0 <= options.seed < 2**32:
    raise ValueError(f"--seed={options.seed!r} is not valid; it must be an integer in [0, 2**32).")
  frac = options.validation_fraction
  if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 <= frac < 1.0:
    raise ValueError(f"--validation_fraction={frac!r} is not valid; it must be a number in [0, 1).")


def resolve_options(name: str, options: TaskOptions) -> TaskOptions:
  """Validates ``options`` for registered task ``name``; returns them with defaults filled in.

  Loads no data. Raises ``ValueError`` naming the flag, the value and the
  valid choices.
  """
  module = task_module(name)
  if options.num_clients is None:
    options = dataclasses.replace(options, num_clients=getattr(module, "DEFAULT_NUM_CLIENTS", 10))
  _check_common(options)
  resolved = dataclasses.replace(
      options,
      data_source=_choose("--data_source", options.data_source, module.DATA_SOURCES, name),
      model=_choose("--model", options.model, module.MODELS, name),
      partition=_choose("--partition", options.partition, module.PARTITIONS, name))
  if resolved.partition != "natural" and resolved.num_clients < 1:
    raise ValueError(
        f"--num_clients={resolved.num_clients} is not valid for task {name!r} with "
        f"--partition={resolved.partition!r}; it must be >= 1.")
  if resolved.validation_fraction > 0 and not getattr(module, "HOLDS_OUT_VALIDATION", False):
    able = ", ".join(n for n in task_names() if getattr(task_module(n), "HOLDS_OUT_VALIDATION", False))
    raise ValueError(f"--validation_fraction={resolved.validation_fraction:g} is not valid for task "
                     f"{name!r}: only the tasks whose clients are partitioned here hold out validation "
                     f"data ({able}); use 0.")
  check = getattr(module, "validate_options", None)
  if check is not None:
    check(resolved)
  return resolved


def validate_task_options(name: str, options: TaskOptions) -> None:
  """Raises ``ValueError`` if ``options`` are not valid for task ``name``; loads no data.

  For a plug-in only the options common to all tasks are checked.
  """
  if is_plugin(name):
    if options.num_clients is None:
      options = dataclasses.replace(options, num_clients=10)
    _check_common(options)
    _plugin_fn(name)
  else:
    resolve_options(name, options)


def _plugin_fn(name: str):
  """Imports plug-in ``package.module:function`` and returns the function."""
  module_name, _, fn_name = name.partition(":")
  if not module_name or not fn_name or ":" in fn_name:
    raise ValueError(f"--task={name!r} is not a valid plug-in; use the form 'package.module:function'.")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"--task={name!r}: cannot import plug-in module {module_name!r}: {e}") from e
  fn = getattr(module, fn_name, None)
  if fn is None:
    raise ValueError(f"--task={name!r}: module {module_name!r} has no attribute {fn_name!r}.")
  if not callable(fn):
    raise ValueError(f"--task={name!r}: {module_name}.{fn_name} is not callable "
                     f"(it is a {type(fn).__name__}).")
  return fn


def load_task(name: str, options: TaskOptions = TaskOptions()) -> Task:
  """Validates ``options`` and builds task ``name`` (registered or plug-in)."""
  if is_plugin(name):
    if options.num_clients is None:
      options = dataclasses.replace(options, num_clients=10)
    _check_common(options)
    task = _plugin_fn(name)(options)
    if not isinstance(task, Task):
      raise TypeError(f"--task={name!r}: the plug-in returned a {type(task).__name__}, "
                      "not a tasks.Task.")
    return task
  resolved = resolve_options(name, options)
  task = task_module(name).build_task(resolved)
  if not isinstance(task, Task):
    raise TypeError(f"task {name!r} built a {type(task).__name__}, not a tasks.Task.")
  return task
