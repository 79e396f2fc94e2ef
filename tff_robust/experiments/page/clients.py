"""Table 3's diagnosis on the results page: what each method does to the one-keyword clients.

Per round, from each finished run's ``metrics.csv``: the client drift ‖w_t^i − w_t‖ (mean over
the round's clients), the norm of the averaged update ‖Δ_t‖, the clients' training loss and
seed 000's eq. 1 (the RM term, summed over units, per example). Each method is set against FA
seed by seed: the ratio of its round-mean drift and update norm to FA's, and the difference of
its training loss and final test accuracy (`common.paired`, mean ± SE over the seeds both
finished). Whether RM changes the clients at all is what decides how its accuracy is read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import matplotlib.pyplot as plt

from tff_robust import experiments as ex
from tff_robust import plot
from tff_robust.common import markdown
from tff_robust.common.paired import paired_difference

# (metrics.csv column, panel title, log y axis)
PANELS = (("client_drift", "client drift ‖w^i − w_t‖", True),
          ("update_norm", "update norm ‖Δ_t‖", True),
          ("train_loss", "clients' training loss", False),
          ("rm_loss", "eq. 1 (sum over units, per example)", True))
# (column, label, how a method is set against FA: "ratio" of round means or "difference")
COMPARED = (("client_drift", "drift / FA's", "ratio"), ("update_norm", "update norm / FA's", "ratio"),
            ("train_loss", "training loss − FA's", "difference"))


def round_mean(metrics: dict[str, list[float]], column: str) -> float:
  """The mean over a run's rounds of ``column`` of its ``metrics`` (`plot.read_metrics`; NaN
  cells skipped; NaN if none)."""
  values = [v for v in metrics.get(column, []) if not math.isnan(v)]
  return statistics.fmean(values) if values else math.nan


def _finished(runs: Sequence[ex.Run]) -> dict[int, ex.Run]:
  return {r.seed: r for r in runs if r.status() == ex.DONE}


def _metrics(finished: dict[int, ex.Run]) -> dict[int, dict[str, list[float]]]:
  """seed -> the metrics.csv of `_finished`'s run, each read once."""
  return {s: plot.read_metrics(r.output_dir, need_ah=False) for s, r in finished.items()}


def versus_fa(methods: dict[str, Sequence[ex.Run]], fa: str = "FA") -> list[list[str]]:
  """One row per method but FA: each `COMPARED` quantity and the final test accuracy against FA's,
  paired by seed (mean ± SE over the seeds both finished; ratios as percent change)."""
  base_runs = _finished(methods.get(fa, ()))
  base = _metrics(base_runs)
  rows = []
  for label, runs in methods.items():
    if label == fa:
      continue
    mine_runs = _finished(runs)
    mine = _metrics(mine_runs)
    seeds = sorted(set(base) & set(mine))
    if not seeds:
      continue
    cells = []
    for column, _, how in COMPARED:
      a = [round_mean(mine[s], column) for s in seeds]
      b = [round_mean(base[s], column) for s in seeds]
      if how == "ratio":
        a, b = [100.0 * x / y for x, y in zip(a, b)], [100.0] * len(b)
      digits, unit = (1, " %") if how == "ratio" else (4, "")
      cells.append(_pm(*paired_difference(a, b), digits, unit))
    mean, se = paired_difference([ex.read_values(mine_runs[s], ex.ACCURACY)[0] for s in seeds],
                                 [ex.read_values(base_runs[s], ex.ACCURACY)[0] for s in seeds])
    rows.append([label, str(len(seeds)), *cells, _pm(mean, se, 2)])
  return rows


def _pm(mean: float, se: float, digits: int, unit: str = "") -> str:
  """``+m unit ± se`` (no ± with one seed: no standard error)."""
  return f"{mean:+.{digits}f}{unit}" + ("" if math.isnan(se) else f" ± {se:.{digits}f}")


def header() -> list[str]:
  return ["method", "seeds", *(label for _, label, _ in COMPARED), "final test acc. − FA's (points)"]


def draw(out_png: str, methods: dict[str, Sequence[ex.Run]], title: str) -> str:
  """One panel per `PANELS` entry: each method's mean over its finished seeds, band min..max."""
  fig, axes = plt.subplots(1, len(PANELS), figsize=(4.6 * len(PANELS), 3.6), squeeze=False)
  read = {label: list(_metrics(_finished(runs)).values()) for label, runs in methods.items()}
  for ax, (column, name, log) in zip(axes[0], PANELS):
    for label, records in read.items():
      records = [m for m in records if column in m and not all(math.isnan(v) for v in m[column])]
      if records:
        x, ys = plot.aligned(records, column)
        plot.mean_band(ax, x, ys, label)
    ax.set(title=name, xlabel="round", yscale="log" if log else "linear")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  return plot.save(fig, out_png, title, dpi=100)


def section(page, methods: dict[str, Sequence[ex.Run]], loss: dict[str, float], rounds: int) -> None:
  """The page's paragraph, table and figure (``page``: a `results.Page`); ``loss``: each method's
  mean final test loss on one-keyword clients."""
  if loss:  # ln 10 is the loss of a uniform prediction over the ten keywords
    text = (f"On one-keyword clients the methods' final test loss is {min(loss.values()):.2f}–"
            f"{max(loss.values()):.2f} (ln 10 = {math.log(10):.2f}, a uniform prediction)")
    if max(abs(v - math.log(10)) for v in loss.values()) < 0.1:
      text += ": the averaged models' outputs are still nearly uniform in confidence at this horizon"
    page.lines += [text + ".", ""]
  rows = versus_fa(methods)
  if not rows:
    return
  page.lines += ["**What each method does to the clients** (one keyword per client; per seed, the mean over "
                 f"the {rounds} rounds set against FA's, then mean ± SE over the seeds). Whether RM changes "
                 "the clients decides how its accuracy is read: RM that leaves drift, update and loss where "
                 "FA has them cannot change the averaged model. The strength of RM that does change them "
                 "(the authors' layers at 1e-3 and 1e-2), and what it costs, is measured on validation "
                 "speakers in [runs/kws_moderate/notes.md](runs/kws_moderate/notes.md).", ""]
  page.lines += markdown.table(header(), rows) + [""]
  page.figure("results_kws_clients.png", lambda p: draw(p, methods, f"KWS (espeak), one keyword per client, "
                                                                     f"{rounds} rounds, {page.stamp}"),
              f"Client-side quantities per round on one-keyword clients (mean over the finished seeds, band "
              f"min..max), the runs of Table 3; {page.stamp}, `{page.command}`.")
