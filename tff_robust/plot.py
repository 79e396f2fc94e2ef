"""Plots runs' ``metrics.csv``: learning curves, or the AH policy as in Fig. 3 of "Robust
Federated Learning through Representation Matching and Adaptive Hyper-parameters".

    python -m tff_robust.plot curves.png a=/tmp/tff_robust/a b=/tmp/tff_robust/b --metrics=train_loss,test_accuracy
    python -m tff_robust.plot fig3.png mnist/iid=/tmp/tff_robust/a mnist/non-iid=/tmp/tff_robust/b
    python -m tff_robust.plot clients.png krum=/tmp/tff_robust/a --clients=weight_given

Each run is ``[PANEL/]LABEL=RUN_DIR`` where RUN_DIR holds a run's ``metrics.csv``. With
``--metrics`` each named column is one panel over rounds, one line per run. Without it (runs
made with ``--ah``) the mean of P(h|ψ) over rounds is drawn, learning rate (top row) and local
SGD steps (bottom row), one column per PANEL, with each round's sampled h_t faintly behind μ.
With ``--clients=COLUMN`` (runs made with ``--client_metrics``) that column of ``clients.csv`` is
drawn over rounds, one panel per run: a dot per client and round, coloured by client (a cross
for a byzantine client's round), and the round's mean over its clients as a line.
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
import numpy as np  # noqa: E402

ROWS = (("lr", "client_lr", "learning rate", True), ("steps", "local_steps", "local SGD steps", False))


def read_metrics(run_dir: str, need_ah: bool = True) -> dict[str, list[float]]:
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
  if need_ah and "ah_lr_mu" not in cols:
    raise ValueError(f"{path} has no ah_lr_mu column: the run was not made with --ah")
  return dict(cols)


def read_clients(run_dir: str) -> list[dict[str, float | str]]:
  """The rows of ``RUN_DIR/clients.csv`` (``--client_metrics``): ``client_id`` as text, the other
  columns as floats (empty cells NaN)."""
  path = os.path.join(run_dir, "clients.csv")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: the run was not made with --client_metrics")
  with open(path, newline="") as f:
    return [{k: (v if k == "client_id" else float(v) if v not in ("", None) else float("nan"))
             for k, v in row.items()} for row in csv.DictReader(f)]


def plot_clients(out_png: str, runs: Sequence[str], column: str, title: str = "") -> str:
  """``column`` of each run's clients.csv over rounds, one panel per run (see the docstring)."""
  loaded = []
  for spec in runs:
    _, label, run_dir = parse_run(spec)
    rows = read_clients(run_dir)
    if rows and column not in rows[0]:
      raise ValueError(f"--clients: {column!r} is not a column of {os.path.join(run_dir, 'clients.csv')}; "
                       f"it has: {', '.join(k for k in rows[0] if k not in ('round', 'client_id'))}")
    loaded.append((label, rows))
  fig, axes = plt.subplots(1, len(loaded), figsize=(4.6 * len(loaded), 3.6), squeeze=False, sharey=True)
  for ax, (label, rows) in zip(axes[0], loaded):
    ids = sorted({r["client_id"] for r in rows}, key=lambda c: (len(c), c))
    for i, cid in enumerate(ids):
      mine = [r for r in rows if r["client_id"] == cid]
      for byz, marker in ((0.0, "o"), (1.0, "x")):
        pts = [(r["round"], r[column]) for r in mine if r.get("byzantine", 0.0) == byz]
        if pts:
          ax.scatter(*zip(*pts), s=12 if marker == "o" else 24, marker=marker, color=f"C{i % 10}",
                     label=f"client {cid}" if byz == 0.0 and len(ids) <= 10 else None)
    by_round = collections.defaultdict(list)
    for r in rows:
      by_round[r["round"]].append(r[column])
    xs = sorted(by_round)
    ax.plot(xs, [np.nanmean(by_round[x]) if np.any(np.isfinite(by_round[x])) else np.nan for x in xs],
            color="black", lw=1, label="mean over clients")
    ax.set(xlabel="round", ylabel=column, title=label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
  return save(fig, out_png, title)


def parse_run(spec: str) -> tuple[str, str, str]:
  """``[PANEL/]LABEL=DIR`` -> (panel, label, dir)."""
  if "=" not in spec:
    raise ValueError(f"run {spec!r} must be written [PANEL/]LABEL=RUN_DIR")
  name, run_dir = spec.split("=", 1)
  panel, _, label = name.rpartition("/")
  return panel, label, run_dir


def save(fig, out_png: str, title: str = "", dpi: int = 120) -> str:
  """Titles, lays out and writes ``fig`` to ``out_png`` (creating its folder); returns the path."""
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
  fig.savefig(out_png, dpi=dpi)
  plt.close(fig)
  return out_png


def aligned(runs: Sequence[dict[str, list[float]]], key: str, scale: float = 1.0):
  """(rounds, [values per run]) of ``key`` over the rounds every run reached, without the
  rounds where no run has a value (test metrics exist every ``rounds_per_eval`` rounds)."""
  n = min(len(r["round"]) for r in runs)
  x = np.asarray(runs[0]["round"][:n])
  ys = np.array([np.asarray(r.get(key, [np.nan] * n)[:n], float) * scale for r in runs])
  keep = ~np.all(np.isnan(ys), axis=0)
  return x[keep], ys[:, keep]


def mean_band(ax, x, ys, label: str, **kw):
  """The mean over runs as a line, the runs' min..max as a band behind it; returns the line."""
  ys = np.asarray(ys, float)
  line, = ax.plot(x, np.nanmean(ys, 0), label=label, **kw)
  if len(ys) > 1:
    ax.fill_between(x, np.nanmin(ys, 0), np.nanmax(ys, 0), alpha=0.2, color=line.get_color())
  return line


def plot_trajectories(out_png: str, runs: Sequence[str], title: str = "") -> str:
  """Draws the figure for ``runs`` into ``out_png``; returns the path."""
  panels: dict[str, list[tuple[str, dict]]] = collections.OrderedDict()
  for spec in runs:
    panel, label, run_dir = parse_run(spec)
    panels.setdefault(panel, []).append((label, read_metrics(run_dir)))
  fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6), squeeze=False,
                           sharex="col")
  colors: dict[str, str] = {}  # one colour per label in every panel, in order of first appearance
  for col, (panel, series) in enumerate(panels.items()):
    for row, (dim, sampled_key, ylabel, log) in enumerate(ROWS):
      ax = axes[row][col]
      for label, m in series:
        color = colors.setdefault(label, f"C{len(colors)}")
        ax.plot(m["round"], m[f"ah_{dim}_mu"], label=label, color=color)
        ax.scatter(m["round"], m[sampled_key], s=6, alpha=0.25, color=color)
      if log:
        ax.set_yscale("log")
      ax.set_ylabel(f"mean {ylabel}")
      if row == 0 and panel:
        ax.set_title(panel)
      if row == 1:
        ax.set_xlabel("round")
      ax.grid(alpha=0.3)
    axes[0][col].legend()
  return save(fig, out_png, title)


def plot_curves(out_png: str, runs: Sequence[str], metrics: Sequence[str], title: str = "") -> str:
  """One panel per column of ``metrics`` over rounds, one line per run; returns the path."""
  series = []
  for spec in runs:
    _, label, run_dir = parse_run(spec)
    m = read_metrics(run_dir, need_ah=False)
    for name in metrics:
      if name not in m:
        raise ValueError(f"--metrics: {name!r} is not a column of {os.path.join(run_dir, 'metrics.csv')}; "
                         f"it has: {', '.join(k for k in m if k != 'round')}")
    series.append((label, m))
  fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
  for ax, name in zip(axes[0], metrics):
    for label, m in series:
      points = [(r, v) for r, v in zip(m["round"], m[name]) if v == v]  # skip NaN (not evaluated)
      ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if len(points) < 30 else None,
              markersize=3, label=label)
    ax.set(xlabel="round", ylabel=name)
    ax.grid(alpha=0.3)
    ax.legend()
  return save(fig, out_png, title)


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m tff_robust.plot", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("out_png")
  parser.add_argument("runs", nargs="+", help="[PANEL/]LABEL=RUN_DIR")
  parser.add_argument("--metrics", default=None,
                      help="comma-separated metrics.csv columns to draw over rounds (default: the AH figure)")
  parser.add_argument("--clients", default=None,
                      help="a clients.csv column (runs made with --client_metrics) to draw per client over rounds")
  parser.add_argument("--title", default="")
  args = parser.parse_args(argv)
  try:
    if args.clients and args.metrics:
      raise ValueError("--clients and --metrics draw different figures: give one of them")
    if args.clients:
      print(plot_clients(args.out_png, args.runs, args.clients, args.title))
    elif args.metrics:
      print(plot_curves(args.out_png, args.runs, [m for m in args.metrics.split(",") if m], args.title))
    else:
      print(plot_trajectories(args.out_png, args.runs, args.title))
  except (ValueError, FileNotFoundError) as e:
    parser.error(str(e))


if __name__ == "__main__":
  main()
