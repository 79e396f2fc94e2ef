"""A table's cells from its runs' outputs: values per run, ``mean ± std`` per cell in the
seed's layout (Markdown via `tff_robust.common.markdown`, CSV), the notes under a table, and seed
000's Fig. 3 (μ of P(h|ψ) over rounds)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import statistics
from collections.abc import Sequence

from tff_robust.common import markdown, strict_json
from tff_robust.experiments.runs import DONE, Overrides, Run
from tff_robust.experiments.tables import RMAH_TASKS, Metric, Table

DASH = "—"


def read_values(run: Run, metric: Metric) -> list[float]:
  """The run's values of ``metric`` (scaled): [final] or every round >= 2; [] if unfinished."""
  final_path = os.path.join(run.output_dir, "final_metrics.json")
  if not run.finished():
    return []
  if metric.per_round:
    with open(os.path.join(run.output_dir, "metrics.csv")) as f:
      rows = list(csv.DictReader(f))
    return [float(r[metric.key]) * metric.scale for r in rows
            if int(float(r["round"])) >= 2 and r.get(metric.key) not in (None, "")]
  with open(final_path) as f:
    final = json.load(f)
  if metric.key not in final:
    raise ValueError(f"{final_path} has no {metric.key!r} (it has {sorted(final)})")
  return [strict_json.number(final[metric.key]) * metric.scale]  # null: a non-finite value


def format_cell(values: Sequence[float], metric: Metric, finished: int, expected: int) -> str:
  """``mean ± std`` (sample std; a single value alone), ``(k/n)`` if seeds are missing."""
  if not values:
    return DASH
  mean = statistics.fmean(values)
  text = f"{mean:.{metric.digits}f}"
  if len(values) > 1:
    text += f" ± {statistics.stdev(values):.{metric.digits + 1}f}"
  if finished < expected:
    text += f" ({finished}/{expected})"
  return text


@dataclasses.dataclass(frozen=True)
class Summary:
  header: list[str]
  body: list[list[str]]
  values: list[dict]  # one per run: table, row, column, cell_id, seed, value, n


def summarize(table: Table, runs: Sequence[Run]) -> Summary:
  """The table in the seed's layout from the runs' outputs."""
  by_cell: dict[str, list[Run]] = {}
  for r in runs:
    by_cell.setdefault(r.cell.cell_id, []).append(r)
  header = list(table.row_headers) + [" ".join(c.labels) for c in table.columns]
  body, values = [], []
  for row in table.rows:
    line = list(row.labels)
    for col in table.columns:
      cell = table.cell(row.key, col.key)
      if cell is None:
        line.append(DASH)
        continue
      pooled, finished = [], 0
      cell_runs = by_cell.get(cell.cell_id, [])
      for run in cell_runs:
        v = read_values(run, cell.metric)
        if v:
          finished += 1
          pooled += v
          values.append(dict(table=table.name, row=row.key, column=col.key, cell_id=cell.cell_id,
                             seed=run.seed, value=statistics.fmean(v), n=len(v)))
      line.append(format_cell(pooled, cell.metric, finished, len(cell_runs)))
    body.append(line)
  return Summary(header, body, values)


def to_markdown(table: Table, summary: Summary, notes: Sequence[str] = ()) -> str:
  lines = [f"## {table.title}", ""]
  lines += [f"{n}  " if i < len(notes) - 1 else n for i, n in enumerate(notes)]
  if notes:
    lines.append("")
  lines += markdown.table(summary.header, summary.body)
  return "\n".join(lines) + "\n"


def write_table(table: Table, summary: Summary, out_dir: str, notes: Sequence[str] = ()) -> list[str]:
  """Writes ``NAME.md``, ``NAME.csv`` (the layout) and ``NAME_values.csv`` (one line per run)."""
  os.makedirs(out_dir, exist_ok=True)
  md = os.path.join(out_dir, f"{table.name}.md")
  with open(md, "w") as f:
    f.write(to_markdown(table, summary, notes))
  layout = os.path.join(out_dir, f"{table.name}.csv")
  with open(layout, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(summary.header)
    w.writerows(summary.body)
  raw = os.path.join(out_dir, f"{table.name}_values.csv")
  with open(raw, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["table", "row", "column", "cell_id", "seed", "value", "n"])
    w.writeheader()
    w.writerows(summary.values)
  return [md, layout, raw]


def notes_for(table: Table, seeds: int, overrides: Overrides) -> list[str]:
  """The lines under a table's title: what a cell is, and any overrides."""
  metrics = sorted({c.metric.label for c in table.cells})
  if any(c.metric.per_round for c in table.cells):
    what = f"over rounds 2..N (round 1 traces) of {seeds} seed(s)' runs, pooled"
  else:
    what = f"over {seeds} seed(s)"
  out = [f"Cells: mean ± sample std {what} of the {', '.join(metrics)}; "
         f"(k/n): only k of n seeds finished; {DASH}: no finished run."]
  out += list(table.notes)
  if overrides.flags():
    out.append("Overrides: `" + " ".join(overrides.flags()) + "` (not the seed's full setting).")
  return out


def plot_fig3(table: Table, runs: Sequence[Run], out_dir: str) -> list[str]:
  """Seed 000 Fig. 3 per AH method: panels = tasks, lines = iid / non-iid (the first seed)."""
  from tff_robust import plot  # pylint: disable=g-import-not-at-top (matplotlib)
  first = min(r.seed for r in runs) if runs else 0
  labels = {k: label for k, label in RMAH_TASKS}
  paths = []
  for col in table.columns:
    specs = []
    for run in runs:
      c = run.cell
      if c.column != col.key or run.seed != first or run.status() != DONE:
        continue
      task = c.task
      dist = "iid" if c.row.endswith("_iid") else "non-iid"
      specs.append((task, dist, f"{labels[task]}/{dist}={run.output_dir}"))
    order = {k: i for i, (k, _) in enumerate(RMAH_TASKS)}
    specs.sort(key=lambda s: (order[s[0]], s[1] != "iid"))
    if not specs:
      continue
    out = os.path.join(out_dir, f"rmah_fig3_{col.key}.png")
    plot.plot_trajectories(out, [s[2] for s in specs],
                           title=f"{' '.join(col.labels)}, C = 1.0, seed {first}: mean of P(h|ψ)")
    paths.append(out)
  return paths
