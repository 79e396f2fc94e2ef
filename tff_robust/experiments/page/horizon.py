"""The results page's horizon sections: Table 1's MNIST one-class cells (C = 1.0, then C = 0.5) of
FA and FA+RM+AH at the page's rounds beside every longer run of the same cells on record in ROOT.

A longer record is any finished run named as the page's cells (``rmah_mnist_c1.0_noniid_fa_s0``
..., or ``seed000_...`` as before the papers' names) in ROOT or a folder up to two levels below it
(``ROOT/horizon200/earlier_top_term/``) whose ``experiment.json`` asks for more rounds than the
page; each folder and round count is one record set. For each set the page states the flagfiles it was made with, its commit (the
record's ``commit``, when it has one) and day (its run.log), and where its flags differ from
today's flagfiles, and judges the claim "FA+RM+AH ≥ FA" on its paired difference with the
page's rule (`verdicts`). A set without FA (FA+RM+AH runs moved aside) pairs with FA's
runs of the same round count in another folder, and says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Sequence


from tff_robust import experiments as ex
from tff_robust.common import markdown
from tff_robust.experiments.page.plan import by_seed, fmt
from tff_robust.experiments.page.verdicts import FAILED, HELD, NOISE, Judged, judge
from tff_robust.experiments.runs import flag_values, rounds_of
from tff_robust.flags import papers

ROW = "c1.0_noniid"
ROWS = (ROW, "c0.5_noniid")  # the one-class rows, one section each
METHODS = ("fa", "fa_rm_ah")
# Flags that say where or how often a run reports, not what it trains.
BOOKKEEPING = ("rounds", "rounds_per_eval", "rounds_per_checkpoint", "seed", "experiment_name",
               "root_output_dir", "data_dir")


@dataclasses.dataclass
class RecordSet:
  """The runs of the horizon's cells in one folder at one round count."""

  folder: str  # relative to ROOT ("." for ROOT)
  rounds: int
  values: dict[str, dict[int, float]]  # method -> seed -> final test accuracy (%)
  records: dict[str, dict]  # method -> one seed's experiment.json
  borrowed: dict[str, str] = dataclasses.field(default_factory=dict)  # method -> the folder it came from

  def judged(self) -> Judged:
    return judge(self.values.get("fa_rm_ah", {}), self.values.get("fa", {}), names=("FA+RM+AH", "FA"))


def effective(flags: Sequence[str]) -> dict[str, str]:
  """flag name -> its last value (`runs.flag_values`), bookkeeping left out."""
  return {name: value for name, value in flag_values(flags).items() if name not in BOOKKEEPING}


def flag_changes(then: Sequence[str], now: Sequence[str]) -> list[str]:
  """``--x: then a, now b`` for every flag whose effective value differs."""
  a, b = effective(then), effective(now)
  return [f"--{k}: then {a.get(k, 'absent')}, now {b.get(k, 'absent')}"
          for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def flagfiles(record: dict) -> list[str]:
  """The flagfiles a run's command names (file names only, as named today: `papers.current_name`)."""
  return [papers.current_name(os.path.basename(a.split("=", 1)[1]))
          for a in shlex.split(record.get("command", "")) if a.startswith("--flagfile=")]


def made_with(record: dict, run_dir: str) -> str:
  """The commit a record names (``commit not recorded`` without one) and the day its run.log
  starts: what the files say, so the page reads the same in any copy of the records."""
  commit = f"commit {str(record['commit'])[:10]}" if record.get("commit") else "commit not recorded"
  log = os.path.join(run_dir, "run.log")
  if os.path.exists(log):
    with open(log, errors="replace") as f:
      for _, line in zip(range(200), f):
        day = re.match(r"(\d{4}-\d{2}-\d{2}) \d", line)
        if day:
          return f"{commit}, run on {day.group(1)}"
  return commit


def longer_records(root: str, page_rounds: int, depth: int = 3, row: str = ROW) -> list[RecordSet]:
  """Every record set of the horizon's cells of ``row`` in ROOT or a folder less than ``depth``
  levels below it with more rounds than the page's, ordered by rounds, then folder."""
  names = {f"rmah_mnist_{row}_{m}": m for m in METHODS}
  names.update({papers.legacy_name(n): m for n, m in list(names.items())})
  sets: dict[tuple[str, int], RecordSet] = {}
  for parent, dirs, _ in os.walk(root):
    folder = os.path.relpath(parent, root)
    dirs[:] = sorted(dirs) if folder.count(os.sep) + (folder != ".") < depth else []
    for entry in list(dirs):
      cell, _, seed = entry.rpartition("_s")
      if cell not in names or not seed.isdigit():
        continue
      dirs.remove(entry)  # a run's own folder holds no other run
      found = _finished(os.path.join(parent, entry))
      rounds = rounds_of(found[0].get("flags", [])) if found else None
      if rounds is None or rounds <= page_rounds:
        continue
      s = sets.setdefault((folder, rounds), RecordSet(folder, rounds, {}, {}))
      s.values.setdefault(names[cell], {})[int(seed)] = 100.0 * found[1]
      s.records.setdefault(names[cell], dict(found[0], path=os.path.join(parent, entry, "experiment.json")))
  found = sorted(sets.values(), key=lambda s: (s.rounds, s.folder))
  for s in found:  # a set without FA pairs with FA's runs at the same rounds in another folder
    donor = next((o for o in found if o.rounds == s.rounds and "fa" in o.records and "fa" not in o.borrowed), None)
    if "fa" not in s.values and donor:
      s.values["fa"], s.records["fa"], s.borrowed["fa"] = donor.values["fa"], donor.records["fa"], donor.folder
  return found


def _finished(run_dir: str) -> tuple[dict, float] | None:
  """A finished run's experiment.json and final test accuracy, or None."""
  paths = [os.path.join(run_dir, n) for n in ("experiment.json", "final_metrics.json")]
  if not all(os.path.exists(p) for p in paths):
    return None
  record, final = ({}, {})
  for p, into in zip(paths, (record, final)):
    with open(p) as f:
      into.update(json.load(f))
  acc = final.get("test_accuracy")
  return None if acc is None else (record, acc)


def provenance(s: RecordSet, today: dict[str, Sequence[str]]) -> str:
  """Where a record set came from: its folder, each method's flagfiles and commit, and its flags
  against today's (``today``: method -> the page's run's signature)."""
  parts = []
  for m, record in s.records.items():
    label = "FA" if m == "fa" else "FA+RM+AH"
    if m in s.borrowed:
      parts.append(f"{label}: the runs of `{s.borrowed[m]}/`")
      continue
    made = made_with(record, os.path.dirname(record["path"]))
    changes = flag_changes(record.get("flags", []), today[m]) if m in today else []
    parts.append(f"{label}: {' + '.join(flagfiles(record)) or 'flags only'}"
                 + f", {made}"
                 + ("; against today's flagfiles " + "; ".join(changes) if changes
                    else "; the same flags as today's flagfiles" if m in today else ""))
  return f"`{s.folder}/` ({s.rounds} rounds) — " + " | ".join(parts)


def horizon_lines(page_rounds: int, runs: Sequence[ex.Run], root: str, label: str,
                  row: str = ROW) -> list[str]:
  """The page's horizon section of ``row``: the page's runs of its two cells (``runs``: Table 1's)
  and every longer record set, the verdict at each, where they come from, and any verdict a
  longer horizon changes."""
  mine = {c: v for (r, c), v in by_seed(runs).items() if r == row}
  ours = RecordSet(".", page_rounds, mine, {})
  longer = longer_records(root, page_rounds, row=row)
  lines = [f"## Horizon: Table 1's {label} cells at {page_rounds} rounds and longer", "",
           f"FA and FA+RM+AH on one-class clients, C = {next(c for k, c, *_ in ex.RMAH_ROWS if k == row)}, at the "
           f"page's {page_rounds} rounds and at "
           "every longer horizon of the same cells on record under the runs' folder (final test "
           "accuracy, %, mean ± std over seeds); the claim judged is Table 1's \"FA+RM+AH is at least "
           "FA\" (FA+RM+AH − FA > 0).", ""]
  body = []
  for s in [ours] + longer:
    seeds = sorted(set(s.values.get("fa", {})) | set(s.values.get("fa_rm_ah", {})))
    where = "the page's runs" if s is ours else f"`{s.folder}/`"
    body.append([str(s.rounds), where, ", ".join(map(str, seeds)) or "none"]
                + [(fmt(list(s.values[m].values())) + (f" (from `{s.borrowed[m]}/`)" if m in s.borrowed else ""))
                   if s.values.get(m) else "not run" for m in METHODS]
                + [s.judged().text() if all(s.values.get(m) for m in METHODS) else "not run"])
  lines += markdown.table(["rounds", "record", "seeds", "FA", "FA+RM+AH", "FA+RM+AH − FA (paired): verdict"],
                          body) + [""]
  if not longer:
    return lines + ["No longer run of these cells is on record.", ""]
  today = {r.cell.column: r.signature() for r in runs if r.cell.row == row and r.seed == 0}
  lines += ["Where each longer record comes from (flagfiles, commit, and its flags against the page's "
            "flagfiles of today):", ""]
  lines += [f"- {provenance(s, today)}" for s in longer] + [""]
  verdicts = (HELD, FAILED, NOISE)
  now = ours.judged().verdict
  for s in longer:
    then = s.judged().verdict
    if now in verdicts and then in verdicts and then != now:
      lines += [f"At {s.rounds} rounds (`{s.folder}/`) the verdict is **{then}**, at {page_rounds} rounds "
                f"**{now}**: the longer horizon " + ("reverses" if {then, now} == {HELD, FAILED}
                                                     else "changes") + " Table 1's verdict on this row"
                + (", with flags other than today's (above)" if _differs(s, today) else "") + ".", ""]
  return lines


def sections(page_rounds: int, runs: Sequence[ex.Run], root: str, labels: dict[str, str]) -> list[str]:
  """One horizon section per one-class row (`ROWS`); ``labels``: row key -> its table label."""
  return [line for row in ROWS for line in horizon_lines(page_rounds, runs, root, labels[row], row)]


def _differs(s: RecordSet, today: dict[str, Sequence[str]]) -> bool:
  """Whether a record set's own runs were made with flags other than today's flagfiles."""
  return any(flag_changes(r.get("flags", []), today[m]) for m, r in s.records.items()
             if m not in s.borrowed and m in today)
