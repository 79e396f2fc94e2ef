"""The seeds' tables as grids of cells: a cell is a list of flagfiles from ``flags/`` plus a few
flags, run once per seed (`runs`). `TABLES` is the catalogue (seed 000 Tables 1-4 and Fig. 3,
seed 004's optimizer and decay tables, seed 003's weighting table, DP-FedAvg's noise x clip
grid, and the aggregators under Byzantine attacks of issue 50); `select` restricts one to some
rows and methods."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Optional

from absl import flags

from tff_robust import flags as project_flags

# The flagfiles: the repository's flags/ folder, installed as the package tff_robust.flags.
FLAGS_DIR = os.path.dirname(os.path.abspath(project_flags.__file__))


def flagfile_path(name: str) -> str:
  return os.path.join(FLAGS_DIR, name)


def expand_args(args: Sequence[str]) -> list[str]:
  """``args`` with every ``--flagfile=`` replaced by its flags, as absl reads them (nested files,
  comments, blank lines)."""
  return flags.FlagValues().read_flags_from_files(list(args), force_gnu=True)


def flag_values(args: Sequence[str], skip: tuple[str, ...] = ()) -> dict[str, str]:
  """Each ``--flag``'s last value in ``args`` (``--x`` / ``--nox`` as true / false), without the
  flags that start with one of ``skip``: two lists that absl resolves to the same values give
  the same dict."""
  values: dict[str, str] = {}
  for a in args:
    if a.startswith(skip) or not a.startswith("--"):
      continue
    name, eq, value = a[2:].partition("=")
    if not eq:
      name, value = (name[2:], "false") if name.startswith("no") else (name, "true")
    values[name] = value
  return values


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
  kind: str = "table"  # or "figure" (rmah_fig3)
  notes: tuple[str, ...] = ()  # lines under the title, after what a cell is

  def cell(self, row: str, column: str) -> Optional[Cell]:
    for c in self.cells:
      if c.row == row and c.column == column:
        return c
    return None


# ---- seed 000 -----------------------------------------------------------------------------

# (label, key, ingredients) in the seed's column order.
RMAH_METHODS = (
    ("FA", "fa", ("fa",)),
    ("FA+WD", "fa_wd", ("fa", "wd")),
    ("FA+RM+AH", "fa_rm_ah", ("ah", "rm", "rm_ah")),
    ("FA+RM", "fa_rm", ("fa", "rm")),
    ("FA+AH", "fa_ah", ("ah",)),
)
RMAH_INGREDIENTS = {"fa": "rmah_fa.cfg", "wd": "rmah_fa_wd.cfg", "rm": "rmah_fa_rm.cfg",
                    "ah": "rmah_fa_ah.cfg", "rm_ah": "rmah_fa_rm_ah.cfg"}
# A task's refinement of one ingredient, applied after the method's files.
RMAH_OVERLAYS = {("kws", "ah"): "rmah_kws_ah.cfg",
                 ("cifar10", "ah"): "rmah_cifar10_ah.cfg"}
RMAH_TASKS = (("mnist", "MNIST"), ("cifar10", "CIFAR10"), ("kws", "KWS"))
RMAH_ROWS = (  # (key, C, distribution label, partition)
    ("c1.0_iid", "1.0", "iid", "iid"),
    ("c1.0_noniid", "1.0", "non-iid", "one_class"),
    ("c0.5_iid", "0.5", "iid", "iid"),
    ("c0.5_noniid", "0.5", "non-iid", "one_class"),
)


def rmah_files(task: str, ingredients: Sequence[str]) -> tuple[str, ...]:
  """Flagfiles of a seed-000 method on ``task`` (common, task, method, task overlays)."""
  files = ["rmah_common.cfg", f"rmah_{task}.cfg"]
  files += [RMAH_INGREDIENTS[i] for i in ingredients]
  files += [RMAH_OVERLAYS[(task, i)] for i in ingredients if (task, i) in RMAH_OVERLAYS]
  return tuple(files)


# A method run on another's tuned schedule: FA+RM on FA's, so that FA+RM − FA is RM's effect alone.
SCHEDULE_OF = {"fa_rm": "fa"}


def tuned_overlay(task: str, row_key: str, method_key: str) -> Optional[str]:
  """The cell's schedule chosen on validation data (studies/baselines.py), if flags/ has one:
  ``rmah_<task>_<row>_<method>.cfg``, FA's for a method in `SCHEDULE_OF`."""
  name = f"rmah_{task}_{row_key}_{SCHEDULE_OF.get(method_key, method_key)}.cfg"
  return name if os.path.exists(flagfile_path(name)) else None


def overlay_values(task: str, row_key: str, method_key: str) -> Optional[dict[str, str]]:
  """The flag values `tuned_overlay` sets (None without an overlay)."""
  name = tuned_overlay(task, row_key, method_key)
  return None if name is None else flag_values(expand_args([f"--flagfile={flagfile_path(name)}"]))


def rmah_cell(task: str, row_key: str, method_key: str, tuned: bool = True) -> Cell:
  """The cell shared by tables 1-3 and Fig. 3 (same id, so the same runs); ``tuned`` appends the
  cell's schedule (`tuned_overlay`) after the method's files."""
  row = next(r for r in RMAH_ROWS if r[0] == row_key)
  method = next(m for m in RMAH_METHODS if m[1] == method_key)
  overlay = tuned_overlay(task, row_key, method_key) if tuned else None
  return Cell(row=row_key, column=method_key, cell_id=f"rmah_{task}_{row_key}_{method_key}",
              flagfiles=rmah_files(task, method[2]) + ((overlay,) if overlay else ()),
              flags=(f"--client_fraction={row[1]}", f"--partition={row[3]}"), task=task)


def _rmah_accuracy_table(name: str, task: str, title: str) -> Table:
  rows = tuple(Axis(k, (c, d)) for k, c, d, _ in RMAH_ROWS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in RMAH_METHODS)
  cells = tuple(rmah_cell(task, r.key, c.key) for r in rows for c in columns)
  return Table(name, title, ("C", "Data Distribution"), rows, columns, cells)


def _rmah_table4() -> Table:
  rows = tuple(Axis(k, (label,)) for k, label in RMAH_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in RMAH_METHODS)
  cells = tuple(
      Cell(row=task, column=key, cell_id=f"rmah_time_{task}_{key}",
           flagfiles=rmah_files(task, ingredients) + ("rmah_time.cfg",), metric=SECONDS,
           task=task)
      for task, _ in RMAH_TASKS for _, key, ingredients in RMAH_METHODS)
  return Table("rmah_table4", "Seed 000 Table 4: wall-clock run-time in seconds of one round with one "
               "client training 30 SGD steps of batch 64", ("Task",), rows, columns, cells)


FIG3_METHODS = ("fa_rm_ah", "fa_ah")


def _rmah_fig3() -> Table:
  rows = tuple(Axis(k, (label,)) for k, label in RMAH_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key, _ in RMAH_METHODS if key in FIG3_METHODS)
  cells = tuple(rmah_cell(task, row_key, method)
                for task, _ in RMAH_TASKS for method in FIG3_METHODS
                for row_key in ("c1.0_iid", "c1.0_noniid"))
  return Table("rmah_fig3", "Seed 000 Fig. 3: mean of P(h|psi) over rounds, C = 1.0",
               ("Task",), rows, columns, cells, kind="figure")


# ---- seed 004 -----------------------------------------------------------------------------

FEDOPT_OPTS = (("FedAdagrad", "adagrad"), ("FedAdam", "adam"), ("FedYogi", "yogi"),
               ("FedAvgM", "avgm"), ("FedAvg", "avg"))
FEDOPT_TASKS = (("cifar100", "CIFAR-100", ACCURACY), ("emnist_cr", "EMNIST CR", ACCURACY),
                ("shakespeare", "Shakespeare", ACCURACY), ("emnist_ae", "EMNIST AE (MSE)", MSE))
FEDOPT_DECAYS = (("constant", "Constant η_l", ()), ("invsqrt", "InvSqrt", ("fedopt_invsqrt.cfg",)),
                  ("expdecay", "ExpDecay", ("fedopt_expdecay.cfg",)))


def fedopt_cell(task: str, opt: str, decay: str = "constant", metric: Metric = ACCURACY,
                row: Optional[str] = None) -> Cell:
  """A seed-004 cell; the constant-lr cell of a task is the same run in both tables."""
  extra = next(files for key, _, files in FEDOPT_DECAYS if key == decay)
  suffix = "" if decay == "constant" else f"_{decay}"
  return Cell(row=row or task, column=opt,
              cell_id=f"fedopt_{task}{suffix}_{opt}",
              flagfiles=("fedopt_common.cfg", f"fedopt_{task}.cfg", f"fedopt_{task}_{opt}.cfg") + extra,
              metric=metric, task=task)


def _fedopt_constant() -> Table:
  rows = tuple(Axis(t, (label,)) for t, label, _ in FEDOPT_TASKS)
  columns = tuple(Axis(key, (label,)) for label, key in FEDOPT_OPTS)
  cells = tuple(fedopt_cell(t, key, metric=metric) for t, _, metric in FEDOPT_TASKS
                for _, key in FEDOPT_OPTS)
  return Table("fedopt_constant", "Seed 004: constant learning rates (accuracy %, EMNIST AE: MSE)",
               ("Task",), rows, columns, cells)


def _fedopt_decay() -> Table:
  rows = tuple(Axis(key, (label,)) for key, label, _ in FEDOPT_DECAYS)
  columns = tuple(Axis(key, (label,)) for label, key in FEDOPT_OPTS)
  cells = tuple(fedopt_cell("emnist_cr", key, decay, row=decay) for decay, _, _ in FEDOPT_DECAYS
                for _, key in FEDOPT_OPTS)
  return Table("fedopt_decay", "Seed 004: EMNIST CR accuracy (%) with client learning-rate decay",
               ("Client lr",), rows, columns, cells)


# ---- seed 003 -----------------------------------------------------------------------------

FEDAVG_KERAS_WEIGHTINGS = (("by data (num_examples)", "num_examples"),
                           ("by validation accuracy", "val_accuracy"),
                           ("by training accuracy", "train_accuracy"))
FEDAVG_KERAS_ROWS = (("2nn_c0.1", "2NN", "0.1"), ("2nn_c0.2", "2NN", "0.2"),
                     ("cnn_c0.1", "CNN", "0.1"), ("cnn_c0.2", "CNN", "0.2"))


def _fedavg_keras_mnist() -> Table:
  rows = tuple(Axis(k, (model, c)) for k, model, c in FEDAVG_KERAS_ROWS)
  columns = tuple(Axis(key, (label,)) for label, key in FEDAVG_KERAS_WEIGHTINGS)
  cells = tuple(
      Cell(row=k, column=w, cell_id=f"fedavg_keras_mnist_{k}_{w}",
           flagfiles=("fedavg_keras_common.cfg", f"fedavg_keras_{model.lower()}.cfg"),
           flags=(f"--client_fraction={c}", f"--weighting={w}"), task="mnist")
      for k, model, c in FEDAVG_KERAS_ROWS for _, w in FEDAVG_KERAS_WEIGHTINGS)
  return Table("fedavg_keras_mnist", "Seed 003: MNIST accuracy (%), 100 iid clients, weighting heuristics",
               ("Model", "C"), rows, columns, cells)


# ---- user-level DP-FedAvg (issue 50) ----------------------------------------------------

# Noise multipliers z (0: clipping alone, ε = ∞, the no-noise reference) x the clip grid C. The runner
# reports every cell; the table's rule (fixed before its runs): per noise level, the clip whose
# validation accuracy (final_metrics.json's val_accuracy, mean over the seeds) is highest, ties to the
# smaller C, and that cell's test accuracy and ε are the row's. C = 3 exceeds the clients' update
# norms in a pilot (median 0.6-1.0 over rounds 1-10), so z = 0, C = 3 is FedAvg with uniform weights.
ROBUST_DP_NOISE = (("z0", "0 (no noise)", "0"), ("z0.1", "0.1", "0.1"), ("z0.3", "0.3", "0.3"),
                   ("z1.0", "1.0", "1.0"))
# C = 10 extends the grid past the first runs' edge choice (z = 1.0 chose C = 3, its largest).
ROBUST_DP_CLIPS = (("c0.1", "C = 0.1", "0.1"), ("c0.3", "C = 0.3", "0.3"), ("c1", "C = 1", "1"),
                   ("c3", "C = 3", "3"), ("c10", "C = 10", "10"))


def _robust_dp() -> Table:
  rows = tuple(Axis(key, (label,)) for key, label, _ in ROBUST_DP_NOISE)
  columns = tuple(Axis(key, (label,)) for key, label, _ in ROBUST_DP_CLIPS)
  cells = tuple(
      Cell(row=rk, column=ck, cell_id=f"robust_dp_{rk}_{ck}", flagfiles=("robust_dp.cfg",),
           flags=(f"--dp_noise_multiplier={z}", f"--dp_clip={c}"), task="mnist")
      for rk, _, z in ROBUST_DP_NOISE for ck, _, c in ROBUST_DP_CLIPS)
  return Table("robust_dp", "DP-FedAvg on MNIST-5k: test accuracy (%) by noise multiplier z and clip C "
               "(10 one-class clients, all per round, 30 rounds; ε per run in final_metrics.json)",
               ("Noise z",), rows, columns, cells)


# ---- Byzantine robustness (issue 50) -------------------------------------------------------

ROBUST_AGGREGATORS = (("mean", "mean"), ("median", "median"), ("trimmed mean", "trimmed_mean"),
                      ("Krum", "krum"), ("Multi-Krum", "multi_krum"), ("Bulyan", "bulyan"),
                      ("geometric median", "geometric_median"))
ROBUST_ATTACKS = ("sign_flip", "gaussian", "scaled")  # `attacks.ATTACKS` but nan, which the guard removes
ROBUST_CLIENTS = 10
# The most byzantine clients of 10 that Bulyan assumes (n ≥ 4f+3); the other rules assume 3.
BULYAN_MAX_F = 1


def robust_cell(attack: str, attackers: int, aggregator: str) -> Cell:
  """One aggregator against ``attackers`` of 10 clients sending ``attack`` (``none``: 0 of 10).

  Each robust rule assumes f = the attackers (f = 1 without attack, its smallest setting), Bulyan
  at most `BULYAN_MAX_F`; the trimmed mean trims f/10 per end (Yin et al.'s β ≥ f/n). The mean
  takes no f."""
  row = "none" if attack == "none" else f"{attack}_{attackers}"
  flags_ = [f"--aggregator={aggregator}", f"--byzantine_attack={attack}",
            f"--byzantine_fraction={attackers / ROBUST_CLIENTS:g}"]
  if aggregator != "mean":
    f = max(attackers, 1)
    if aggregator == "bulyan":
      f = min(f, BULYAN_MAX_F)
    flags_.append(f"--byzantine_f={f}")
    if aggregator == "trimmed_mean":
      flags_.append(f"--trim_fraction={f / ROBUST_CLIENTS:g}")
  return Cell(row=row, column=aggregator, cell_id=f"robust_byzantine_{row}_{aggregator}",
              flagfiles=("robust_byzantine.cfg",), flags=tuple(flags_), task="mnist")


def _robust_byzantine() -> Table:
  rows = (Axis("none", ("none", "0 of 10")),) + tuple(
      Axis(f"{a}_{k}", (a, f"{k} of 10")) for a in ROBUST_ATTACKS for k in (1, 2, 3))
  columns = tuple(Axis(key, (label,)) for label, key in ROBUST_AGGREGATORS)
  cells = tuple(robust_cell("none", 0, c.key) for c in columns) + tuple(
      robust_cell(a, k, c.key) for a in ROBUST_ATTACKS for k in (1, 2, 3) for c in columns)
  notes = ("Each robust rule assumes f = the byzantine clients (f = 1 without attack); Bulyan "
           f"assumes n ≥ 4f+3, so with 10 clients it runs with f = {BULYAN_MAX_F} in the rows of 2 "
           "and 3 attackers, beyond its assumption; the trimmed mean trims f/10 per end.",)
  return Table("robust_byzantine", "Byzantine robustness: MNIST-5k accuracy (%), 10 iid clients, "
               "30 rounds, k of 10 clients byzantine in every round, no zeroing",
               ("Attack", "Byzantine"), rows, columns, cells, notes=notes)


TABLES: dict[str, Callable[[], Table]] = {
    "rmah_table1": lambda: _rmah_accuracy_table("rmah_table1", "mnist",
                                                "Seed 000 Table 1: MNIST accuracy (%)"),
    "rmah_table2": lambda: _rmah_accuracy_table("rmah_table2", "cifar10",
                                                "Seed 000 Table 2: CIFAR10 accuracy (%)"),
    "rmah_table3": lambda: _rmah_accuracy_table("rmah_table3", "kws",
                                                "Seed 000 Table 3: keyword spotting accuracy (%)"),
    "rmah_table4": _rmah_table4,
    "rmah_fig3": _rmah_fig3,
    "fedopt_constant": _fedopt_constant,
    "fedopt_decay": _fedopt_decay,
    "fedavg_keras_mnist": _fedavg_keras_mnist,
    "robust_dp": _robust_dp,
    "robust_byzantine": _robust_byzantine,
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
