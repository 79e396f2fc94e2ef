"""The keyword AH grid's top client learning rate, chosen on validation (docs/runs/ah_kws_top/plan.md).

FA+AH on one keyword per client, C = 1.0, 30 rounds, seeds 0-1, for each top of the grid. A run's
score is the mean of its validation accuracy at rounds 20 and 30; a top's, the mean over seeds.
The top in force (0.3) is kept unless another beats it by more than the standard error of the
paired difference (`common.paired.kept_unless_beaten`); a winner at the grid's lower edge means the
candidates were too few. Each run's recorded ``--ah_lr_grid`` must be its top's grid.

    uv run python -m tff_robust.experiments.studies.ah_kws_top            # print the table
    uv run python -m tff_robust.experiments.studies.ah_kws_top --write    # and docs/runs/ah_kws_top/table.md
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections.abc import Sequence

from tff_robust import plot
from tff_robust.common.paired import kept_unless_beaten, paired_difference
from tff_robust.experiments.runs import REPO
from tff_robust.experiments.tables import flag_values
from tff_robust.flags import record as flag_record

RUNS = os.path.join(REPO, "docs", "runs")
RUN = "rmah_kws_c1.0_noniid_fa_ah_s{seed}"
SEEDS = (0, 1)
SCORE_ROUNDS = (20, 30)
# top -> (its --ah_lr_grid, the folder of its runs under docs/runs); the first is the grid in force.
TOPS = {
    "0.3": ("0.001,0.003,0.01,0.03,0.1,0.3", ""),
    "0.1": ("0.001,0.003,0.01,0.03,0.1", "ah_kws_top/top0.1"),
    "0.03": ("0.001,0.003,0.01,0.03", "ah_kws_top/top0.03"),
    "0.01": ("0.001,0.003,0.01", "ah_kws_top/top0.01"),
}
PLANNED = tuple(TOPS)[:-1]  # the plan's tops (0.3, 0.1, 0.03); the last, 0.01, only after an edge choice


def recorded_grid(run_dir: str) -> str | None:
  """The run's ``--ah_lr_grid`` as its hparams.cfg records it (the last one, as absl reads it)."""
  with open(os.path.join(run_dir, flag_record.RECORD), encoding="utf-8") as f:
    return flag_values([line.strip() for line in f]).get("ah_lr_grid")


def score(run_dir: str, rounds: Sequence[int] = SCORE_ROUNDS) -> float | None:
  """Mean validation accuracy (%) at ``rounds``; None until every one of them is recorded."""
  if not os.path.exists(os.path.join(run_dir, "metrics.csv")):
    return None
  metrics = plot.read_metrics(run_dir, need_ah=False)
  val = dict(zip(metrics["round"], metrics.get("val_accuracy", [])))
  picked = [val.get(float(t), math.nan) for t in rounds]
  if any(math.isnan(v) for v in picked):
    return None
  return 100.0 * statistics.fmean(picked)


def scores(root: str = RUNS) -> dict[str, dict[int, float]]:
  """{top: {seed: score}} of the finished runs; raises if a run's grid is not its top's."""
  out: dict[str, dict[int, float]] = {}
  for top, (grid, folder) in TOPS.items():
    for seed in SEEDS:
      run_dir = os.path.join(root, folder, RUN.format(seed=seed))
      value = score(run_dir)
      if value is None:
        continue
      if recorded_grid(run_dir) != grid:
        raise ValueError(f"{run_dir}: --ah_lr_grid={recorded_grid(run_dir)}, not top {top}'s {grid}")
      out.setdefault(top, {})[seed] = value
  return out


def complete_tops(per_top: dict[str, dict[int, float]]) -> list[str]:
  """The tops measured on every seed, highest first."""
  return [t for t in TOPS if all(s in per_top.get(t, {}) for s in SEEDS)]


def choose(per_top: dict[str, dict[int, float]]) -> str | None:
  """The plan's rule over the tops measured on every seed; None until every planned top is (the
  top in force and its two candidates: `PLANNED`; a lower top joins only after an edge choice)."""
  measured = complete_tops(per_top)
  if any(t not in measured for t in PLANNED):
    return None
  return kept_unless_beaten({t: [per_top[t][s] for s in SEEDS] for t in measured}, measured)


def table(per_top: dict[str, dict[int, float]]) -> str:
  first = next(iter(TOPS))
  chosen, measured = choose(per_top), complete_tops(per_top)
  at_edge = chosen is not None and chosen != first and chosen == measured[-1]
  lines = ["| top | grid | " + " | ".join(f"seed {s} validation %" for s in SEEDS)
           + f" | mean | − top {first}, paired | |",
           "| --- | --- | " + " | ".join("---" for _ in SEEDS) + " | --- | --- | --- |"]
  for top, (grid, _) in TOPS.items():
    mine = per_top.get(top, {})
    if not mine and top not in PLANNED:
      continue
    cells = [f"{mine[s]:.1f}" if s in mine else "not finished" for s in SEEDS]
    mean = diff = ""
    if top in measured:
      mean = f"{statistics.fmean(mine[s] for s in SEEDS):.1f}"
      if top != first and first in measured:
        d, se = paired_difference([mine[s] for s in SEEDS], [per_top[first][s] for s in SEEDS])
        diff = f"{d:+.1f} ± {se:.1f}"
    mark = "" if top != chosen else "**best, at the edge**" if at_edge else "**chosen**"
    lines.append(f"| {top} | {grid} | " + " | ".join(cells) + f" | {mean} | {diff} | {mark} |")
  rounds = " and ".join(str(t) for t in SCORE_ROUNDS)
  lines += ["", f"Score: validation accuracy at rounds {rounds}, averaged; FA+AH, one keyword per client, "
                "C = 1.0, 30 rounds. Rule: docs/runs/ah_kws_top/plan.md."]
  if chosen is None:
    lines.append(f"Not chosen yet: every planned top ({', '.join(PLANNED)}) must be measured on every seed.")
  elif at_edge:
    lines.append(f"Best: {chosen}, the lowest top measured: an edge choice, so the next lower top is run "
                 "under the same rule before one is taken.")
  else:
    lines.append(f"Chosen: {chosen}.")
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--root", default=RUNS, help="the folder holding the runs (docs/runs)")
  parser.add_argument("--write", action="store_true", help="also write docs/runs/ah_kws_top/table.md")
  args = parser.parse_args(argv)
  text = table(scores(args.root))
  sys.stdout.write(text)
  if args.write:
    with open(os.path.join(args.root, "ah_kws_top", "table.md"), "w", encoding="utf-8") as f:
      f.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
