"""Seed 000's Fig. 3 layout: the mean of P(h|ψ) over rounds, learning rate (top row) and
local SGD steps (bottom row), one column per panel (task), one line per run (iid, non-iid).

    python -m tff_robust.plot fig3.png mnist/iid=/tmp/tff_robust/a mnist/non-iid=/tmp/tff_robust/b

Each run is ``[PANEL/]LABEL=RUN_DIR`` where RUN_DIR holds the ``metrics.csv`` of a
run with ``--ah``. The sampled h_t of every round is drawn faintly behind μ.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROWS = (("lr", "client_lr", "learning rate", True), ("steps", "local_steps", "local SGD steps", False))


def read_metrics(run_dir: str) -> dict[str, list[float]]:
  """Columns of ``RUN_DIR/metrics.csv`` as float lists (empty cells are NaN)."""
  path = os.path.join(run_dir, "metrics.csv")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: pass the output directory of a run (it holds metrics.csv)")
  with open(path) as f:
    rows = list(csv.DictReader(f))
  cols: dict[str, list[float]] = collections.defaultdict(list)
  for row in rows:
    for k, v in row.items():
      cols[k].append(float(v) if v not in ("", None) else float("nan"))
  if "ah_lr_mu" not in cols:
    raise ValueError(f"{path} has no ah_lr_mu column: the run was not made with --ah")
  return dict(cols)


def parse_run(spec: str) -> tuple[str, str, str]:
  """``[PANEL/]LABEL=DIR`` -> (panel, label, dir)."""
  if "=" not in spec:
    raise ValueError(f"run {spec!r} must be written [PANEL/]LABEL=RUN_DIR")
  name, run_dir = spec.split("=", 1)
  panel, _, label = name.rpartition("/")
  return panel, label, run_dir


def plot_trajectories(out_png: str, runs: Sequence[str], title: str = "") -> str:
  """Draws the figure for ``runs`` into ``out_png``; returns the path."""
  panels: dict[str, list[tuple[str, dict]]] = collections.OrderedDict()
  for spec in runs:
    panel, label, run_dir = parse_run(spec)
    panels.setdefault(panel, []).append((label, read_metrics(run_dir)))
  fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6), squeeze=False,
                           sharex="col")
  for col, (panel, series) in enumerate(panels.items()):
    for row, (dim, sampled_key, ylabel, log) in enumerate(ROWS):
      ax = axes[row][col]
      for label, m in series:
        line, = ax.plot(m["round"], m[f"ah_{dim}_mu"], label=label)
        ax.scatter(m["round"], m[sampled_key], s=6, alpha=0.25, color=line.get_color())
      if log:
        ax.set_yscale("log")
      ax.set_ylabel(f"mean {ylabel}")
      if row == 0 and panel:
        ax.set_title(panel)
      if row == 1:
        ax.set_xlabel("round")
      ax.grid(alpha=0.3)
    axes[0][col].legend()
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
  fig.savefig(out_png, dpi=120)
  plt.close(fig)
  return out_png


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out_png")
  parser.add_argument("runs", nargs="+", help="[PANEL/]LABEL=RUN_DIR")
  parser.add_argument("--title", default="")
  args = parser.parse_args(argv)
  try:
    print(plot_trajectories(args.out_png, args.runs, args.title))
  except (ValueError, FileNotFoundError) as e:
    parser.error(str(e))


if __name__ == "__main__":
  main()
