"""The results page's evidence for issue 50: DP-FedAvg on MNIST-5k (table ``robust_dp``) and the
aggregators under Byzantine attacks (table ``robust_byzantine``), read from their records in
``ROOT/robust`` (made by ``python -m tff_robust.experiments --table=T --seeds=3
--root_output_dir=ROOT/robust``); the page never starts them. A record counts when its run is
done with today's flags (`runs.Run.status`); the sections say which are missing and the command
that makes them.

DP: per noise multiplier z, the clip C with the highest validation accuracy (``val_accuracy`` of
``final_metrics.json``, mean over the seeds) wins, ties to the smaller C (the rule of `tables`,
fixed before the runs), chosen only once the row's runs are all in; its test accuracy (mean ± SE
over seeds) and ε (``dp_epsilon`` at ``dp_delta``; ``null``: no noise, ε = ∞) are the row's. A
choice at the grid's smallest or largest C is flagged: the grid may not hold the best clip.

Byzantine: mean ± SE test accuracy per cell, and each robust aggregator's paired difference D
against the plain mean under the same attack and seed, judged by the page's rule
(`verdicts.judge` on "aggregator − mean > 0": held reads better, did not hold reads worse).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence

from tff_robust import experiments as ex
from tff_robust.common import markdown
from tff_robust.experiments.page import commits, verdicts
from tff_robust.experiments.page.horizon import made_with
from tff_robust.experiments.page.plan import command_path
from tff_robust.experiments.runs import REPO
from tff_robust.experiments.tables import ROBUST_CLIENTS

FOLDER = "robust"
SEEDS = 3
DP, BYZANTINE = "robust_dp", "robust_byzantine"
# The page's verdict on "aggregator − mean > 0", in this section's words.
WORDS = {verdicts.HELD: "better", verdicts.FAILED: "worse", verdicts.NOISE: "within noise",
         verdicts.TOO_FEW: verdicts.TOO_FEW}
BEYOND = "†"  # a cell run with fewer assumed byzantine clients than it has
SHOWN_MISSING = 12  # cells named in the missing-records line; the rest are counted


@dataclasses.dataclass(frozen=True)
class Record:
  """A finished run's final numbers (accuracies in %; ε ∞ when the record holds null)."""

  path: str
  test: float
  val: float | None
  epsilon: float | None  # None: not a DP run
  delta: float | None


@dataclasses.dataclass
class Records:
  """A table's runs under ROOT/robust: ``found`` cell id -> seed -> `Record`, and the runs not done."""

  table: ex.Table
  runs: list[ex.Run]
  found: dict[str, dict[int, Record]]
  conflicts: list[ex.Run]  # made with other flags than today's
  unfinished: list[ex.Run]  # started or pending


def _read(run_dir: str) -> Record:
  with open(os.path.join(run_dir, "final_metrics.json")) as f:
    final = json.load(f)
  val, eps = final.get("val_accuracy"), None
  if "dp_epsilon" in final:  # null: a non-finite ε, i.e. no noise
    eps = math.inf if final["dp_epsilon"] is None else float(final["dp_epsilon"])
  return Record(run_dir, 100.0 * float(final["test_accuracy"]), None if val is None else 100.0 * float(val),
                eps, final.get("dp_delta"))


def folder(root: str) -> str:
  return os.path.join(root, FOLDER)


def gather(name: str, root: str) -> Records:
  """The records of table ``name`` (seeds 0..`SEEDS`-1) under ``root``/robust."""
  table = ex.build_table(name)
  runs = ex.plan(table, SEEDS, folder(root))
  out = Records(table, runs, {}, [], [])
  for r in runs:
    status = r.status()
    if status == ex.DONE:
      out.found.setdefault(r.cell.cell_id, {})[r.seed] = _read(r.output_dir)
    elif status == ex.CONFLICT:
      out.conflicts.append(r)
    else:
      out.unfinished.append(r)
  return out


def command(name: str, root: str, base: str = REPO) -> str:
  """The command that makes (or resumes) table ``name``'s records for a page of ``root``, run from
  ``base`` (the page's: the parent of its docs folder, so that the command reads the same in any
  copy of the checkout); the folder is absolute when it is not under ``base``."""
  return (f"python -m tff_robust.experiments --table={name} --seeds={SEEDS} "
          f"--root_output_dir={command_path(folder(root), base)}")


def status_lines(records: Records, root: str, base: str = REPO) -> list[str]:
  """What is missing of a table's records and the command that makes them (nothing when all are in)."""
  runs, name = records.runs, records.table.name
  done = len(runs) - len(records.conflicts) - len(records.unfinished)
  if done == len(runs):
    return []
  lines = []
  if done == 0 and not records.conflicts:
    lines.append(f"**Records missing**: none of this table's {len(runs)} runs ({len(records.table.cells)} "
                 f"cells × {SEEDS} seeds) is on record under `{FOLDER}/`.")
  else:
    stems = commits.folded([r.output_dir for r in records.unfinished], folder(root)).split(", ")
    named = ", ".join(stems[:SHOWN_MISSING]) + (f" and {len(stems) - SHOWN_MISSING} more cells"
                                                if len(stems) > SHOWN_MISSING else "")
    lines.append(f"**Records incomplete**: {done} of {len(runs)} runs on record under `{FOLDER}/`"
                 + (f"; not finished: {named}." if records.unfinished else "."))
  if records.conflicts:
    lines.append(f"Made with other flags than today's (not read; the runner refuses to reuse them, so remove "
                 f"them first): {commits.folded([r.output_dir for r in records.conflicts], folder(root))}.")
  lines.append(f"They are made (finished runs are kept, unfinished ones resume) by `{command(name, root, base)}`; "
               "the page reads them when it is next written.")
  return [" ".join(lines), ""]


def made_at(records: Records) -> list[str]:
  """Which commit(s) made the records on hand (`horizon.made_with`)."""
  counts: dict[str, int] = {}
  for by_seed in records.found.values():
    for rec in by_seed.values():
      path = os.path.join(rec.path, "experiment.json")
      with open(path) as f:
        made = made_with(json.load(f), rec.path).split(",")[0]
      counts[made] = counts.get(made, 0) + 1
  if not counts:
    return []
  parts = [f"{made} ({n} runs)" for made, n in sorted(counts.items())]
  return [f"Records: `{FOLDER}/{records.table.name}_*`, made at {', '.join(parts)}.", ""]


def mean_se(values: Sequence[float], expected: int = SEEDS) -> str:
  """``81.2 ± 0.4`` (mean ± SE over seeds, SE = sd/√n), ``(k/n)`` when seeds are missing."""
  if not values:
    return "missing"
  text = f"{statistics.fmean(values):.1f}"
  if len(values) > 1:
    text += f" ± {statistics.stdev(values) / math.sqrt(len(values)):.1f}"
  return text + (f" ({len(values)}/{expected})" if len(values) < expected else "")


def _grid(records: Records, value, mark: Mapping[tuple[str, str], str]) -> list[str]:
  """The table's grid, each cell ``mean_se`` of ``value(record)`` over its seeds (None: left out), plus
  ``mark``."""
  t = records.table
  header = list(t.row_headers) + [" ".join(c.labels) for c in t.columns]
  body = []
  for row in t.rows:
    line = list(row.labels)
    for col in t.columns:
      cell = t.cell(row.key, col.key)
      found = records.found.get(cell.cell_id, {}) if cell else {}
      values = [value(r) for _, r in sorted(found.items())]
      line.append(mean_se([v for v in values if v is not None]) + mark.get((row.key, col.key), ""))
    body.append(line)
  return markdown.table(header, body) + [""]


# ---- DP-FedAvg -----------------------------------------------------------------------------


def choose_clip(records: Records, row: str) -> str | None:
  """The row's clip (column key) by the rule: highest mean validation accuracy over the seeds, ties
  to the smaller C; None until every clip of the row has all its seeds with a validation accuracy."""
  t = records.table
  best, best_val = None, -math.inf
  for col in sorted(t.columns, key=lambda c: float(_flag(t.cell(row, c.key), "dp_clip"))):
    found = records.found.get(t.cell(row, col.key).cell_id, {})
    if len(found) < SEEDS or any(r.val is None for r in found.values()):
      return None
    val = statistics.fmean(r.val for _, r in sorted(found.items()))
    if val > best_val:
      best, best_val = col.key, val
  return best


def _flag(cell: ex.Cell, name: str) -> str:
  return ex.flag_values(cell.flags)[name]


def _epsilon(found: Mapping[int, Record]) -> str:
  """ε of a cell's runs (one value when they agree, else their range), and δ."""
  eps = sorted({r.epsilon for r in found.values() if r.epsilon is not None})
  deltas = sorted({r.delta for r in found.values() if r.delta is not None})
  if not eps:
    return "not recorded"
  text = "∞" if eps[0] == math.inf else f"{eps[0]:.3g}"
  if len(eps) > 1:
    text += f"–{'∞' if eps[-1] == math.inf else f'{eps[-1]:.3g}'}"
  return text + (f" (δ = {', '.join(f'{d:.3g}' for d in deltas)})" if deltas else "")


def dp_choices(records: Records) -> tuple[list[list[str]], list[str]]:
  """The choice table's body (one line per noise level) and the edge warnings."""
  t = records.table
  clips = sorted(t.columns, key=lambda c: float(_flag(t.cell(t.rows[0].key, c.key), "dp_clip")))
  body, warnings = [], []
  for row in t.rows:
    key = choose_clip(records, row.key)
    if key is None:
      in_row = sum(len(records.found.get(t.cell(row.key, c.key).cell_id, {})) for c in t.columns)
      body.append(list(row.labels) + [f"no choice yet ({in_row} of {len(t.columns) * SEEDS} runs in)", "", "", ""])
      continue
    found = records.found[t.cell(row.key, key).cell_id]
    values = [r for _, r in sorted(found.items())]
    label = " ".join(next(c for c in t.columns if c.key == key).labels)
    body.append(list(row.labels) + [label, mean_se([r.val for r in values]), mean_se([r.test for r in values]),
                                    _epsilon(found)])
    if key in (clips[0].key, clips[-1].key):
      side = "smallest" if key == clips[0].key else "largest"
      warnings.append(f"**Edge of the grid**: at z = {row.labels[0]} the chosen clip, {label}, is the grid's "
                      f"{side}; the best clip may lie beyond it (the grid was too small on that side).")
  return body, warnings


def dp_section(root: str, base: str = REPO) -> list[str]:
  """The DP-FedAvg section: the clip chosen on validation per noise level, its test accuracy and ε,
  then the full z × C grids of test and validation accuracy (``base``: see `command`)."""
  records = gather(DP, root)
  t = records.table
  lines = ["## DP-FedAvg on MNIST-5k: accuracy against ε", "",
           f"{t.title}. User-level DP-FedAvg (TFF's `DifferentiallyPrivateFactory`, fixed clip C, Gaussian "
           "noise of standard deviation z·C on the sum), ε from the project's RDP accountant at the δ the run "
           "records. **The clip is chosen on validation, never on test**: per noise level, the C with the "
           "highest validation accuracy (400 of the 4,000 training digits held out, `flags/robust_dp.cfg`; "
           f"mean over seeds 0–{SEEDS - 1}), ties to the smaller C, a rule fixed before the runs "
           "(`tff_robust/experiments/tables.py`); that cell's test accuracy and ε are the row's. ε counts the "
           "chosen run's training rounds, not the choice among the clips, which reads only the server's "
           "held-out digits (no longer the clients': `simulation/privacy_accounting.py`). Accuracy (%) mean ± SE over "
           "seeds (SE = sd/√n).", ""]
  lines += status_lines(records, root, base)
  if not records.found:
    return lines
  body, warnings = dp_choices(records)
  lines += markdown.table(list(t.row_headers) + ["clip chosen on validation", "validation acc (%)",
                                                 "test acc (%)", "ε"], body) + [""]
  lines += [" ".join(warnings), ""] if warnings else []
  chosen = {(row.key, choose_clip(records, row.key)): " (chosen)" for row in t.rows}
  lines += ["Test accuracy (%) of every cell:", ""] + _grid(records, lambda r: r.test, chosen)
  lines += ["Validation accuracy (%) of every cell, on which the clip is chosen:", ""]
  lines += _grid(records, lambda r: r.val, chosen)
  return lines + made_at(records)


# ---- Byzantine robustness --------------------------------------------------------------------


def beyond_assumption(cell: ex.Cell) -> bool:
  """Whether the cell's aggregator assumes fewer byzantine clients (``--byzantine_f``) than it has."""
  v = ex.flag_values(cell.flags)
  if "byzantine_f" not in v:
    return False
  return int(v["byzantine_f"]) < round(float(v["byzantine_fraction"]) * ROBUST_CLIENTS)


def paired_text(robust: Mapping[int, Record], mean: Mapping[int, Record]) -> str:
  """``+3.4 ± 1.2: better``: D = robust − mean over the seeds both have, ± SE, and the verdict."""
  judged = verdicts.judge({s: r.test for s, r in robust.items()}, {s: r.test for s, r in mean.items()})
  text = judged.text(digits=1)
  if judged.n == 0 or not text.endswith(judged.verdict):
    return text
  return text[:-len(judged.verdict)] + WORDS[judged.verdict]


def byzantine_section(root: str, base: str = REPO) -> list[str]:
  """The Byzantine section: test accuracy per attack and aggregator, then each robust aggregator's
  paired difference against the mean under the same attack and seed (``base``: see `command`)."""
  records = gather(BYZANTINE, root)
  t = records.table
  lines = ["## Byzantine robustness: the aggregators under attack", "",
           f"{t.title}. The project's attacks (`--byzantine_attack`, `algorithms/attacks.py`), sent by k of the 10 "
           "clients in place of their update Δ: sign_flip −Δ, gaussian noise N(0, I) of Δ's shape, scaled 10·Δ "
           f"(the flags' defaults). Test accuracy (%) mean ± SE over seeds 0–{SEEDS - 1}. "
           + " ".join(t.notes), ""]
  beyond = [c for c in t.cells if beyond_assumption(c)]
  if beyond:
    names = sorted({" ".join(next(a for a in t.columns if a.key == c.column).labels) for c in beyond})
    rows = [" ".join(next(a for a in t.rows if a.key == c.row).labels) for c in beyond]
    lines += [f"{BEYOND} marks the cells run beyond their aggregator's assumption ({', '.join(names)}: "
              f"{', '.join(rows)}): their numbers say what the rule does there, not what it guarantees.", ""]
  lines += status_lines(records, root, base)
  if not records.found:
    return lines
  marks = {(c.row, c.column): f" {BEYOND}" for c in beyond}
  lines += _grid(records, lambda r: r.test, marks)
  lines += ["Each robust aggregator against the plain mean under the same attack and seed: D = its test "
            "accuracy − the mean's (points), mean of the per-seed differences ± SE of those differences "
            "(`common.paired`), judged by the page's rule (*How a verdict is read*): **better** when D > SE, "
            "**worse** when D < −SE, **within noise** otherwise.", ""]
  header = list(t.row_headers) + [f"{' '.join(c.labels)} − mean" for c in t.columns if c.key != "mean"]
  body = []
  for row in t.rows:
    mean = records.found.get(t.cell(row.key, "mean").cell_id, {})
    line = list(row.labels)
    for col in t.columns:
      if col.key == "mean":
        continue
      robust = records.found.get(t.cell(row.key, col.key).cell_id, {})
      line.append((paired_text(robust, mean) if robust and mean else "missing")
                  + marks.get((row.key, col.key), ""))
    body.append(line)
  lines += markdown.table(header, body) + [""]
  return lines + made_at(records)
