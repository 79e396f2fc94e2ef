"""What AH's policy sees: the one-round reward per sampled client learning rate, FA+AH vs FA+RM+AH.

Eq. 7 moves μ towards the hyper-parameters whose reward r_t = (L_t − L_{t+1}) / L_t beats the
window baseline r̂_t. This script reads finished runs (their metrics.csv: the round's sampled
``client_lr``, ``ah_reward``, ``ah_reward_baseline``, ``rm_loss``, ``update_norm``) and prints,
per method and phase of training, for every learning rate the policy sampled: how many rounds
used it, the mean reward, the share of those rounds that raised the loss (r_t < 0), the mean
advantage r_t − r̂_t (the weight eq. 7 gives that sample) ± its standard error, the mean matching
loss and the mean norm of the aggregated update; then, per run, the
correlation of log10(lr) with the advantage (negative: eq. 7 pushes μ_lr down).

Observational, not a controlled sweep: a learning rate is sampled more often where μ is, so
phases are reported apart.

    uv run python -m tff_robust.experiments.studies.ah_reward_by_lr                     # Table 1, C = 1.0, one-class
    uv run python -m tff_robust.experiments.studies.ah_reward_by_lr --row=c0.5_noniid --phases=5,20,60
    uv run python -m tff_robust.experiments.studies.ah_reward_by_lr --root=docs/runs/ah_start/tuned_start \\
        --methods=fa_ah --phases=1,60                                                # an AH study's variant
"""

from __future__ import annotations

import argparse
import collections
import csv
import math
import os
import sys

import numpy as np

from tff_robust import experiments as ex
from tff_robust.experiments.runs import REPO

METHODS = (("fa_ah", "FA+AH"), ("fa_rm_ah", "FA+RM+AH"))
COLUMNS = ("ah_reward", "raised", "advantage", "rm_loss", "update_norm")


def read_rows(path: str) -> list[dict[str, float]]:
  """metrics.csv as floats (empty cells as NaN), with ``advantage`` = reward − baseline and
  ``raised`` = 1 where the round raised the server's loss (r_t < 0)."""
  with open(path) as f:
    rows = [{k: float(v) if v not in ("", None) else math.nan for k, v in r.items()}
            for r in csv.DictReader(f)]
  for r in rows:
    r["advantage"] = r["ah_reward"] - r["ah_reward_baseline"]
    r["raised"] = float(r["ah_reward"] < 0)
    r.setdefault("rm_loss", 0.0)
  return rows


def by_lr(rows: list[dict[str, float]], first: int, last: int) -> dict[float, dict[str, float]]:
  """Rounds first..last (1-based, inclusive) grouped by sampled lr: count and column means."""
  groups: dict[float, list[dict[str, float]]] = collections.defaultdict(list)
  for r in rows:
    if first <= r["round"] <= last:
      groups[r["client_lr"]].append(r)
  out = {}
  for lr, g in sorted(groups.items()):
    adv = np.array([r["advantage"] for r in g])
    se = float(np.std(adv, ddof=1) / np.sqrt(len(adv))) if len(adv) > 1 else math.nan
    out[lr] = dict(n=len(g), advantage_se=se, **{c: float(np.nanmean([r[c] for r in g])) for c in COLUMNS})
  return out


def lr_advantage_corr(rows: list[dict[str, float]], first: int, last: int) -> float:
  """Pearson correlation of log10(sampled lr) with r_t − r̂_t over rounds first..last."""
  sel = [r for r in rows if first <= r["round"] <= last]
  x = np.log10([r["client_lr"] for r in sel])
  y = np.array([r["advantage"] for r in sel])
  if len(sel) < 3 or np.std(x) == 0 or np.std(y) == 0:
    return math.nan
  return float(np.corrcoef(x, y)[0, 1])


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--root", default=os.path.join(REPO, "docs", "runs"))
  p.add_argument("--task", default="mnist")
  p.add_argument("--row", default="c1.0_noniid")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--methods", default="fa_ah,fa_rm_ah", help="which of fa_ah, fa_rm_ah to read")
  p.add_argument("--phases", default="5,20,60",
                 help="round boundaries: 5,20,60 reports rounds 6-20 and 21-60")
  a = p.parse_args(argv)
  bounds = [int(b) for b in a.phases.split(",")]
  runs = {}
  wanted = a.methods.split(",")
  unknown = [m for m in wanted if m not in dict(METHODS)]
  if unknown:
    p.error(f"--methods={a.methods}: {', '.join(unknown)} not in {', '.join(dict(METHODS))}")
  for key, label in (m for m in METHODS if m[0] in wanted):
    paths = [os.path.join(ex.Run(ex.rmah_cell(a.task, a.row, key), s, a.root).output_dir, "metrics.csv")
             for s in range(a.seeds)]
    missing = [q for q in paths if not os.path.exists(q)]
    if missing:
      print(f"missing run(s): {', '.join(missing)} (run python -m tff_robust.experiments.page first)",
            file=sys.stderr)
      return 2
    runs[label] = [read_rows(q) for q in paths]
  for first, last in zip(bounds[:-1], bounds[1:]):
    print(f"\nrounds {first + 1}-{last}: lr  rounds  reward  raised  advantage ± se  rm_loss  update_norm")
    for label, seeds in runs.items():
      for lr, s in by_lr([r for rows in seeds for r in rows], first + 1, last).items():
        print(f"  {label:9s} {lr:<6g} {s['n']:3d}  {s['ah_reward']:+.3f}  {s['raised']:.2f}  "
              f"{s['advantage']:+.3f} ± {s['advantage_se']:.3f}"
              f"  {s['rm_loss']:7.1f}  {s['update_norm']:.3f}")
  print("\ncorr(log10 lr, advantage) per seed, by phase")
  for label, seeds in runs.items():
    cells = [" ".join(f"{lr_advantage_corr(rows, f + 1, l):+.2f}" for f, l in zip(bounds[:-1], bounds[1:]))
             for rows in seeds]
    print(f"  {label:9s} " + " | ".join(cells))
  return 0


if __name__ == "__main__":
  sys.exit(main())
