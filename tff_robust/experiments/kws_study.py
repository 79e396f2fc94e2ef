"""The keyword study's runs as the study and the results page both read them.

`studies/kws_rm_check.py` runs seed 000 Table 3's discriminating experiment as one folder per arm
and seed, ``<root>/<arm>_s<seed>`` (``python -m tff_robust.main``'s metrics.csv in each); its
committed runs are under docs/runs/``STUDY``. An FA arm at client lr r (and k local steps) is
``fa_lr<r>[_steps<k>]``; FA+RM with the authors' layers at weight c on the same schedule is the
same name with ``fa`` replaced by ``rm_authors_w<c>``. The page's rescue section
(`page/rescue.py`) reads the arms at `FAILING_FA`; both draw with `draw`.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tff_robust import plot  # noqa: E402

STUDY = "kws_moderate"
FAILING_FA = "fa_lr0.1"  # FA at lr 0.1 x 20 steps: validation at chance from round 4 (the seed's "training fails")
HORIZON = (26, 28, 30)  # Table 3's last evaluations: the rule's window since the 8-12 one misled


def rm_weight(arm: str, fa_arm: str) -> str | None:
  """The weight c of ``arm`` if it is FA+RM (authors' layers) on ``fa_arm``'s schedule, else None."""
  m = re.fullmatch(r"rm_authors_w([0-9.e-]+)" + re.escape(fa_arm[len("fa"):]), arm)
  return m.group(1) if m else None


def read(run_dir: str) -> list[dict[str, float]]:
  """A run's metrics.csv, one dict a round (the columns it has at that round)."""
  with open(os.path.join(run_dir, "metrics.csv")) as f:
    return [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(f)]


def window_mean(rows: list[dict[str, float]], key: str, rounds: Sequence[int]) -> float | None:
  """``key``'s mean over the evaluations at ``rounds``, in % (None unless every one was evaluated)."""
  at = {int(r["round"]): r for r in rows}
  if not all(key in at.get(t, {}) for t in rounds):
    return None
  return sum(at[t][key] for t in rounds) / len(rounds) * 100


def draw(out_png: str, root: str, arms: Mapping[str, Sequence[int]], label: Callable[[str], str],
         title: str = "KWS (espeak, Speech Commands scale), one keyword per client, C = 1.0") -> str:
  """Six panels, mean over seeds with the seeds' min..max band, one line per arm (``label(arm)``)."""
  keys = ("test_accuracy", "val_loss", "client_drift", "update_norm", "train_loss", "rm_loss")
  names = ("test accuracy", "validation loss", "client drift ‖w^i − w_t‖", "update norm ‖Δ_t‖",
           "clients' cross-entropy", "eq. 1 (sum over units, per example)")
  fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
  for k, (arm, seeds) in enumerate(arms.items()):
    rs = [plot.read_metrics(os.path.join(root, f"{arm}_s{s}"), need_ah=False) for s in seeds]
    for ax, key in zip(axes.flat, keys):
      if key in rs[0]:
        plot.mean_band(ax, *plot.aligned(rs, key), label(arm), color=f"C{k % 10}")
  for ax, name in zip(axes.flat, names):
    ax.set_title(name)
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  for k in (2, 3, 5):   # a diverged arm would flatten the others
    axes.flat[k].set_yscale("log")
  return plot.save(fig, out_png, title, dpi=100)
