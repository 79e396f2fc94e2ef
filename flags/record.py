"""A run directory is bound to the configuration that made it (its ``hparams.cfg``).

The configuration is every flag of `definitions` except those that do not change results
(`NOT_CONFIGURATION`: the output location, ``--workers``, evaluation and checkpoint periods,
``--preset`` (the values it fills count, not how they were given), ``--client_metrics``, and for
`main` ``--rounds``, so that a run can be extended). A directory resumes only with the
configuration it records; otherwise `bind` names the flags that differ (exit 2 when the user
chose the directory) or picks a fresh sibling whose name ends in a hash of the configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from absl import flags

from tff_robust.common import strict_json

FLAGS = flags.FLAGS
RECORD = "hparams.cfg"
DATA_MANIFEST = "data.json"
NOT_CONFIGURATION = frozenset({"root_output_dir", "experiment_name", "workers", "rounds_per_eval",
                               "rounds_per_checkpoint", "preset",
                               "client_metrics"})
# The module whose flags are the project's (absl's and TensorFlow's own are not recorded).
PROJECT_MODULE = "tff_robust.flags.definitions"
# Flags naming a place on disk: the same place at the same spot under the output root counts as
# the same value, so a checkout copied or cloned elsewhere resumes its runs (e.g. docs/runs).
PATH_FLAGS = frozenset({"data_dir"})
# Flags added after runs were recorded whose behaviour before then was not today's default: a
# record that lacks one was made with this value (the matching layers before --rm_layers).
LEGACY_VALUES = {"rm_layers": "reversed"}


def configuration_names(module: str, extending: Iterable[str] = ("rounds",), f=FLAGS) -> list[str]:
  """The flags of ``module`` that change results (``extending``: those a resume may change too)."""
  skip = NOT_CONFIGURATION | set(extending)
  return sorted(fl.name for fl in f.get_flags_for_module(module) if fl.name not in skip)


def read_record(run_dir: str, f=FLAGS) -> Optional[dict[str, Any]]:
  """The flag values recorded in ``run_dir/hparams.cfg`` (None when there is none)."""
  path = os.path.join(run_dir, RECORD)
  if not os.path.exists(path):
    return None
  values: dict[str, Any] = {}
  with open(path) as fh:
    for line in fh:
      line = line.strip()
      if not line.startswith("--"):
        continue
      name, eq, text = line[2:].partition("=")
      if not eq:  # a boolean: --name / --noname
        if name not in f and name.startswith("no") and name[2:] in f:
          values[name[2:]] = False
        elif name in f:
          values[name] = True
        continue
      if name in f:
        try:
          values[name] = f[name].parser.parse(text)
        except (ValueError, TypeError, flags.Error):
          values[name] = text
  return values


def _show(value: Any) -> str:
  if value is None:
    return "unset"
  if isinstance(value, (list, tuple)):
    return ",".join(str(v) for v in value)
  return str(value)


def effective(values: dict[str, Any]) -> dict[str, Any]:
  """``values`` (flag name -> value, with ``task``) as the run computes with them: the task's
  options left at ``default`` or unset (``--model``, ``--data_source``, ``--partition``,
  ``--num_clients``) as the task resolves them (`tasks.resolve_options`). A flag spelled at the
  value it resolves to is then the same configuration as the flag left out."""
  from tff_robust import tasks  # pylint: disable=g-import-not-at-top
  task = values.get("task")
  fields = [fl.name for fl in dataclasses.fields(tasks.TaskOptions)]
  if not isinstance(task, str) or not all(n in values for n in fields):
    return dict(values)
  try:
    options = tasks.TaskOptions(**{n: values[n] for n in fields})
    if tasks.is_plugin(task):
      resolved = options if options.num_clients is not None else dataclasses.replace(options, num_clients=10)
    else:
      resolved = tasks.resolve_options(task, options)
  except (ValueError, TypeError):  # not valid (e.g. an old record): compared as written
    return dict(values)
  return {**values, **{n: getattr(resolved, n) for n in fields}}


# The flags of `tasks.TaskOptions`, which `effective` resolves together.
_TASK_OPTIONS = ("data_source", "data_dir", "num_clients", "partition", "dirichlet_alpha", "model", "seed",
                 "validation_fraction")


def _values(recorded: Optional[dict[str, Any]], names: Sequence[str], f=FLAGS) -> dict[str, Any]:
  """The configuration flags' values: recorded (a flag the record lacks counts as its default, or
  as its `LEGACY_VALUES` entry) or, with ``recorded`` None, now."""
  wanted = [n for n in dict.fromkeys([*names, "task", *_TASK_OPTIONS]) if n in f]
  if recorded is None:
    return {n: f[n].value for n in wanted}
  return {n: recorded.get(n, LEGACY_VALUES.get(n, f[n].default)) for n in wanted}


def differences(recorded: dict[str, Any], names: Sequence[str], f=FLAGS) -> list[str]:
  """``--name (then A, now B)`` for each configuration flag whose effective value (`effective`)
  differs from the record's; a flag the record lacks counts as its default (it was unset or did
  not exist yet), or as its `LEGACY_VALUES` entry when the behaviour before the flag was another."""
  then_all, now_all = _values(recorded, names, f), _values(None, names, f)
  then_eff, now_eff = effective(then_all), effective(now_all)
  now_root = f["root_output_dir"].value if "root_output_dir" in f else None
  out = []
  for name in names:
    then, now = then_all[name], now_all[name]
    if then_eff[name] == now_eff[name]:
      continue
    if name in PATH_FLAGS and same_place(then, now, recorded.get("root_output_dir"), now_root):
      continue
    out.append(f"--{name} (then {_show(then)}, now {_show(now)})")
  return out


def same_place(then: Any, now: Any, then_root: Optional[str], now_root: Optional[str]) -> bool:
  """Two paths are the same place when each lies at the same spot under its output root (the
  run's own folder tree moved or cloned elsewhere); paths outside the roots must be equal."""
  if not (isinstance(then, str) and isinstance(now, str) and then_root and now_root):
    return then == now
  rel = [os.path.relpath(os.path.abspath(os.path.expanduser(p)), os.path.abspath(os.path.expanduser(r)))
         for p, r in ((then, then_root), (now, now_root))]
  return rel[0] == rel[1] and not rel[0].startswith("..")


def configuration_hash(names: Sequence[str], f=FLAGS) -> str:
  """8 hex digits of the configuration flags whose effective values (`effective`) differ from
  their defaults' for the same task (a flag spelled at its default changes nothing)."""
  now = effective(_values(None, names, f))
  base = effective({**{n: f[n].default for n in now}, "task": now.get("task")})
  if "task" in base:
    base["task"] = f["task"].default
  lines = sorted(f[n].serialize() for n in names if now[n] != base[n] and f[n].value is not None)
  return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:8]


def bind(run_dir: str, names: Sequence[str], *, chosen: bool, f=FLAGS) -> tuple[str, list[str]]:
  """The directory this configuration runs in, and notes for the run's header.

  ``run_dir`` itself when it records no configuration or this one; otherwise, when the user
  ``chosen`` it (``--experiment_name``), ValueError naming the directory and the flags that
  differ; else the sibling ``<run_dir>_<hash>`` (which must record this configuration or none).
  """
  recorded = read_record(run_dir, f)
  diffs = differences(recorded, names, f) if recorded is not None else []
  if not diffs:
    return run_dir, []
  if chosen:
    raise ValueError(
        f"{run_dir} holds a run made with other flags: {'; '.join(diffs)}. A run resumes only "
        f"with the flags it was made with (see {os.path.join(run_dir, RECORD)}); use another "
        "--experiment_name or --root_output_dir, or remove that directory.")
  fresh = f"{run_dir.rstrip(os.sep)}_{configuration_hash(names, f)}"
  recorded_fresh = read_record(fresh, f)
  if recorded_fresh is not None and differences(recorded_fresh, names, f):
    raise ValueError(f"{run_dir} and {fresh} hold runs made with other flags; give this run an "
                     "--experiment_name of its own.")
  note = (f"note     {run_dir} holds a run with other flags ({'; '.join(diffs)}), "
          f"so this configuration runs in {fresh}")
  return fresh, [note]


def write_record(run_dir: str, f=FLAGS, module: str = PROJECT_MODULE) -> None:
  """Writes every flag of the project (``module``'s) into ``run_dir/hparams.cfg`` (usable as
  ``--flagfile``); absl's and TensorFlow's own flags are not part of a run.

  Called only once `bind` has accepted ``run_dir``: the configuration it holds is unchanged,
  only flags such as ``--rounds`` are updated.
  """
  os.makedirs(run_dir, exist_ok=True)
  lines = [fl.serialize() for fl in sorted(f.get_flags_for_module(module), key=lambda fl: fl.name)]
  tmp = os.path.join(run_dir, RECORD + ".tmp")
  with open(tmp, "w") as fh:
    fh.write("".join(f"{line}\n" for line in lines if line))
  os.replace(tmp, os.path.join(run_dir, RECORD))


def write_data_manifest(run_dir: str, manifest: Optional[dict[str, Any]]) -> None:
  """Writes the task's data manifest (`Task.data_manifest`) to ``run_dir/data.json``; None: nothing."""
  if manifest is None:
    return
  strict_json.write(os.path.join(run_dir, DATA_MANIFEST), manifest, indent=1, sort_keys=True)
