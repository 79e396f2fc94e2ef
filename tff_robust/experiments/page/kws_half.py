"""The results page's Table 3 C = 0.5 rows (half the clients a round): FA, FA+RM, FA+AH and
FA+RM+AH on one-keyword and on iid clients, beside the paper's (`seeds.RMAH_TABLE3`).

The page reads these runs and never starts them: they are `runs`, the runner's plan of
``rmah_table3``'s C = 0.5 cells (seeds `SEEDS`, `HORIZON` rounds, the page's corpus) at the top of
the page's runs root, made by `command`. A run counts by the runner's own state
(`runs.Run.status`): done, unfinished (started and not done: running or stopped), or made with
other flags (a conflict, not read); a run recorded on another copy of the corpus is the same run
when its data.json states the corpus's fingerprint (`experiments.data_identity`).
Per cell: the final test accuracy, mean ± sample std over the finished seeds; per method, D =
method − FA on the same seed, mean ± SE (`common.paired`); the paper's orderings on the
one-keyword row (`seeds.ORDERINGS_T3_HALF`) judged by the page's rule (`verdicts`); the rounds at AH's
top lr and whether the run collapsed there, as for the C = 1.0 rows (`collapses`). The section
states the horizon the runs record and each run's commit (`commits`); while runs are missing it
names them and gives the command.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import os
from collections.abc import Mapping

from tff_robust import experiments as ex
from tff_robust.common import markdown
from tff_robust.common.paired import paired_difference
from tff_robust.experiments.page import collapses, commits, coverage
from tff_robust.experiments.page.plan import command_path, flagfile_rounds, fmt
from tff_robust.experiments.page.seeds import ORDERINGS_T3_HALF, RMAH_TABLE3, rmah_table3_mean
from tff_robust.experiments.page.verdicts import claims_table
from tff_robust.experiments.runs import REPO, flag_values, recorded_flags, rounds_of
from tff_robust.experiments.tables import expand_args, flagfile_path, overlay_values

ROWS = (("c0.5_noniid", "one keyword per client"), ("c0.5_iid", "iid"))
METHODS = (("fa", "FA"), ("fa_rm", "FA+RM"), ("fa_ah", "FA+AH"), ("fa_rm_ah", "FA+RM+AH"))
SEEDS = (0, 1)  # the seeds `command` makes (the runner's seeds 0..n-1)
HORIZON = 30  # the rounds `command` runs (the flagfiles' own: 200; the paper states none)

Found = Mapping[tuple[str, str], Mapping[int, "Record"]]  # (row, method) -> seed -> record


@dataclasses.dataclass(frozen=True)
class Record:
  """One run's files: its final test accuracy, how far it got, and what experiment.json records."""

  path: str
  accuracy: float | None  # final test accuracy (%); None until the runner counts the run done
  last_round: int  # the last round in metrics.csv (0: none yet)
  rounds: int | None  # the --rounds experiment.json records
  flags: dict[str, str]  # the recorded flags' last values (`flag_values`)

  def progress(self) -> str:
    """``round 4 of 30`` (an unfinished run)."""
    return f"round {self.last_round}" + (f" of {self.rounds}" if self.rounds else "")


@dataclasses.dataclass(frozen=True)
class Records:
  """The section's runs on record: ``found`` (row, method) -> seed -> `Record`, in the page's
  order, and the runs made with other flags (not read)."""

  found: dict[tuple[str, str], dict[int, Record]]
  conflicts: dict[tuple[str, str], dict[int, str]]  # (row, method) -> seed -> run folder


def name(row: str, method: str, seed: int) -> str:
  """A run's folder under ROOT, as the table runner names it."""
  return f"rmah_kws_{row}_{method}_s{seed}"


def table() -> ex.Table:
  """``rmah_table3`` restricted to the section's rows and methods."""
  return ex.select(ex.build_table("rmah_table3"), [label for _, label in METHODS], [r for r, _ in ROWS])


def runs(root: str, corpus: str) -> list[ex.Run]:
  """The runner's plan of the section: every cell x seed of `SEEDS`, `HORIZON` rounds, on ``corpus``."""
  return ex.plan(table(), len(SEEDS), root, ex.Overrides(rounds=HORIZON, data_dir=corpus))


def _last_round(path: str) -> int:
  if not os.path.exists(path):
    return 0
  with open(path, newline="") as f:
    return max((int(r["round"]) for r in csv.DictReader(f) if r.get("round")), default=0)


def read(run: ex.Run, done: bool = True) -> Record | None:
  """The run's `Record` (its accuracy, read by the runner's `read_values`, only when ``done``: the
  runner's state), or None when it has neither experiment.json nor metrics.csv."""
  run_dir = run.output_dir
  files = {k: os.path.join(run_dir, k) for k in ("experiment.json", "metrics.csv")}
  if not os.path.exists(files["experiment.json"]) and not os.path.exists(files["metrics.csv"]):
    return None
  record = {}
  if os.path.exists(files["experiment.json"]):
    with open(files["experiment.json"]) as f:
      record = json.load(f)
  accuracy = (ex.read_values(run, ex.ACCURACY) or [None])[0] if done else None
  flags = recorded_flags(record, os.path.dirname(run_dir))  # paths as ``$ROOT/...`` where they were under it
  return Record(run_dir, accuracy, _last_round(files["metrics.csv"]), rounds_of(flags), flag_values(flags))


def gather(root: str, corpus: str) -> Records:
  """Every run of `runs` on record in ``root``, by the runner's state."""
  found: dict[tuple[str, str], dict[int, Record]] = {}
  conflicts: dict[tuple[str, str], dict[int, str]] = {}
  for run in runs(root, corpus):
    key, status = (run.cell.row, run.cell.column), run.status()
    if status == ex.CONFLICT:
      conflicts.setdefault(key, {})[run.seed] = run.output_dir
      continue
    record = read(run, done=status == ex.DONE)
    if record is not None:
      found.setdefault(key, {})[run.seed] = record
  order = [(r, k) for r, _ in ROWS for k, _ in METHODS]  # the page's order
  return Records({k: dict(sorted(found[k].items())) for k in order if k in found},
                 {k: dict(sorted(conflicts[k].items())) for k in order if k in conflicts})


def accuracies(found: Found) -> dict[tuple[str, str], dict[int, float]]:
  """(row, method) -> seed -> final test accuracy (%) of the finished runs."""
  out = {k: {s: r.accuracy for s, r in v.items() if r.accuracy is not None} for k, v in found.items()}
  return {k: v for k, v in out.items() if v}


def finished_by_row(records: Records) -> collections.Counter:
  """Row key -> the finished runs of it on record (the page's index counts them)."""
  counts: collections.Counter = collections.Counter()
  for (row, _), v in accuracies(records.found).items():
    counts[row] += len(v)
  return counts


def finished_dirs(records: Records) -> list[str]:
  """The finished runs' folders (for the page's list of runs without a commit)."""
  return sorted(r.path for v in records.found.values() for r in v.values() if r.accuracy is not None)


def command(root: str, corpus: str, base: str = REPO) -> str:
  """The command that makes (or resumes) every run of `runs`, run from ``base`` (`plan.command_path`)."""
  return ("python -m tff_robust.experiments --table=rmah_table3 --rows=" + ",".join(r for r, _ in ROWS)
          + " --methods=" + ",".join(label for _, label in METHODS) + f" --seeds={len(SEEDS)} "
          f"--rounds={HORIZON} --data_dir={command_path(corpus, base)} --root_output_dir={command_path(root, base)}")


def missing_lines(records: Records) -> list[str]:
  """One bullet per row with runs of `SEEDS` not finished: which are unfinished and how far they
  got, which were made with other flags, which are not on record."""
  lines = []
  for row, row_label in ROWS:
    parts = []
    for method, label in METHODS:
      have, other = records.found.get((row, method), {}), records.conflicts.get((row, method), {})
      notes = [f"seed {s} unfinished ({have[s].progress()})" for s in SEEDS if s in have and have[s].accuracy is None]
      notes += [f"seed {s} made with other flags" for s in SEEDS if s in other]
      absent = [str(s) for s in SEEDS if s not in have and s not in other]
      if absent:
        notes.append(f"seed{'s' if len(absent) > 1 else ''} {', '.join(absent)} not on record")
      if notes:
        parts.append(f"{label} {', '.join(notes)}")
    if parts:
      lines.append(f"- {row_label}: {'; '.join(parts)}.")
  return lines


def accuracy_table(found: Found) -> list[str]:
  """Final test accuracy (%) per cell, the seeds in brackets, the paper's beside it."""
  acc = accuracies(found)
  header = ["clients"] + [h for _, label in METHODS for h in (label, "paper")]
  body = []
  for row, row_label in ROWS:
    line = [row_label]
    for method, _ in METHODS:
      values = list(acc.get((row, method), {}).values())
      unfinished = [r for r in found.get((row, method), {}).values() if r.accuracy is None]
      cell = (f"{fmt(values)} ({len(values)})" if values else
              f"unfinished: {unfinished[0].progress()}" if unfinished else "not on record")
      line += [cell, RMAH_TABLE3[row][method]]
    body.append(line)
  return markdown.table(header, body) + [""]


def paper_difference(row: str, method: str) -> str:
  """The paper's means' difference method − FA, exact (``+63.45``)."""
  return f"{rmah_table3_mean(row, method) - rmah_table3_mean(row, 'fa'):+}"


def difference_table(found: Found) -> list[str]:
  """D = method − FA on the same seed: mean ± SE (the paired seeds in brackets), the paper's beside."""
  acc = accuracies(found)
  header = ["clients"] + [h for _, label in METHODS[1:] for h in (f"{label} − FA", "paper")]
  body = []
  for row, row_label in ROWS:
    line = [row_label]
    fa = acc.get((row, "fa"), {})
    for method, _ in METHODS[1:]:
      other = acc.get((row, method), {})
      seeds = sorted(set(fa) & set(other))
      mean, se = paired_difference([other[s] for s in seeds], [fa[s] for s in seeds])
      cell = ("no paired seed" if not seeds else
              f"{mean:+.1f}" + (f" ± {se:.1f}" if len(seeds) > 1 else "") + f" ({len(seeds)})")
      line += [cell, paper_difference(row, method)]
    body.append(line)
  return markdown.table(header, body) + [""]


def schedules(found: Found) -> str:
  """Each cell's client schedule as its runs' experiment.json records it (AH's: its start)."""
  by: dict[str, list[str]] = {}
  for (row, method), records in found.items():
    for r in records.values():
      ah = r.flags.get("ah") == "true"
      lr, steps = (r.flags.get("ah_init_lr"), r.flags.get("ah_init_steps")) if ah else (
          r.flags.get("client_lr"), r.flags.get("local_steps"))
      cells = by.setdefault(f"lr {lr} × {steps} steps", []) if lr and steps else []
      cell = f"{dict(ROWS)[row]} {dict(METHODS)[method]}" + (" (AH's start)" if ah else "")
      if cell not in cells:
        cells.append(cell)
  return "; ".join(f"{k} for {', '.join(v)}" for k, v in sorted(by.items()))


def provenance(found: Found, root: str) -> list[str]:
  """The horizon the finished runs record, and every run's recorded commit, seeds folded."""
  rounds = collections.Counter(r.rounds for v in found.values() for r in v.values() if r.accuracy is not None)
  horizon = ", ".join((f"{n} rounds" if n else "rounds not recorded") + (f" ({c} run{'s' if c > 1 else ''})"
                                                                       if len(rounds) > 1 else "")
                      for n, c in sorted(rounds.items(), key=lambda kv: kv[0] or 0))
  by_commit: dict[str, list[str]] = {}
  for v in found.values():
    for r in v.values():
      commit = commits.recorded_commit(r.path)
      by_commit.setdefault(f"commit {commit[:10]}" if commit else "no commit recorded", []).append(r.path)
  made = "; ".join(f"{c}: {commits.folded(d, root)}" for c, d in sorted(by_commit.items()))
  total, every = int(flagfile_rounds("rmah_common.cfg")), int(_flagfile_values()["client_lr_decay_every"])
  out = [f"**Horizon: {horizon or 'no run finished yet'}**, as the finished runs record it (`--rounds`), against "
         f"the flagfiles' {total}, whose decay schedule of FA's lr and steps acts at rounds "
         f"{', '.join(map(str, range(every, total, every)))}: these runs end before it acts, where the C = 1.0 "
         "curves above were still rising.", ""]
  sched = schedules(found)
  if sched:
    out += [f"Client schedule as recorded (experiment.json): {sched}.", ""]
  return out + [f"Each run's recorded commit: {made}.", ""]


def _flagfile_values() -> dict[str, str]:
  """The keyword cells' flagfiles as absl reads them: the common ones, FA's decay schedule, AH's start."""
  names = ("rmah_common.cfg", "rmah_kws.cfg", "rmah_fa.cfg", "rmah_kws_ah.cfg")
  return flag_values(expand_args([f"--flagfile={flagfile_path(n)}" for n in names]))


def intro() -> str:
  """What the rows are, the paper's effect, each cell's schedule and the horizon (the flagfiles')."""
  paper = RMAH_TABLE3["c0.5_noniid"]
  tuned = overlay_values("kws", "c0.5_noniid", "fa") or {}
  v = _flagfile_values()
  return (f"Half the ten clients a round (C = 0.5); the corpus, model and flagfiles of the C = 1.0 rows above. The "
          f"paper's largest effect is here (one keyword per client: FA {paper['fa']}, FA+RM {paper['fa_rm']}, "
          f"FA+RM+AH {paper['fa_rm_ah']}). FA and FA+RM on one-keyword clients run the C = 1.0 row's "
          f"validation-chosen schedule, lr {tuned.get('client_lr', '?')} × {tuned.get('local_steps', '?')} steps, not "
          "searched again at C = 0.5 (`flags/rmah_kws_c0.5_noniid_fa.cfg`); the iid row keeps the flagfiles' "
          f"{v['client_lr']} × {v['local_steps']}, AH starts at {v['ah_init_lr']} × {v['ah_init_steps']}. "
          f"The runs are {HORIZON} rounds; the flagfiles' own horizon is {flagfile_rounds('rmah_common.cfg')} "
          "(`flags/rmah_common.cfg`; the paper states no round count). The page reads these runs from its runs root and never starts them.")


def _pending_lines(records: Records, root: str, corpus: str, base: str) -> list[str]:
  """What is missing of the runs, the ones made with other flags, and the command that makes them
  (nothing when every run is done)."""
  todo, seeds = missing_lines(records), " and ".join(map(str, SEEDS))
  lines = []
  if not records.found and not records.conflicts:
    lines += [f"**Runs pending**: none of the {len(ROWS) * len(METHODS) * len(SEEDS)} runs of these rows "
              f"({', '.join(label for _, label in METHODS)} on one-keyword and on iid clients, seeds {seeds}, "
              f"{HORIZON} rounds) is on record in the page's runs root yet.", ""]
  elif todo:
    lines += [f"**Runs missing** (of seeds {seeds}, {HORIZON} rounds):", ""] + todo + [""]
  if records.conflicts:
    lines += ["Made with other flags than the command's (not read; the runner refuses to reuse them, so remove "
              f"them first): {commits.folded([d for v in records.conflicts.values() for d in v.values()], root)}.",
              ""]
  if todo:
    lines += ["The command that makes them (from the repository, on the page's corpus, built as for the C = 1.0 "
              "rows; a finished run is never redone, an unfinished one resumes; a run recorded on another copy "
              "of the corpus is the same run to the runner, which matches the fingerprint in the run's data.json "
              "to the corpus's own, or to `kws_corpus.json` beside it where the corpus is not at hand):", "",
              "```sh", command(root, corpus, base), "```", ""]
  return lines


def section(page, records: Records, root: str, corpus: str, base: str = REPO) -> None:
  """The subsection (``page``: a `results.Page`; ``records``: `gather`'s; ``root``, ``corpus``: the
  page's runs root and keyword corpus; ``base``: where its commands run, `plan.command_path`)."""
  found = records.found
  page.lines += [f"### {coverage.KWS_HALF}", "", intro(), ""]
  page.lines += _pending_lines(records, root, corpus, base)
  if not found:
    return
  page.lines += ["Final test accuracy (%), mean ± sample std over the finished seeds (how many in brackets), the "
                 "paper's beside each:", ""] + accuracy_table(found)
  page.lines += ["Paired difference against FA on the same seed, D = method − FA (points): mean ± SE over the "
                 "seeds both finished (how many in brackets); the paper's: the difference of its means.", ""]
  page.lines += difference_table(found)
  one_keyword = [(ROWS[0][0], "C = 0.5, one keyword per client")]
  header, body, _ = claims_table(ORDERINGS_T3_HALF, accuracies(found), one_keyword, dict(METHODS))
  page.lines += ["The paper's orderings on one-keyword clients, judged on the paired differences (see *How a "
                 "verdict is read*):", ""] + markdown.table(header, body) + [""]
  collapses.section(page, runs(root, corpus), dict(METHODS))
  page.lines += provenance(found, root)
