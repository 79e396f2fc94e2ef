"""The results page's Table 3 C = 0.5 rows (half the clients a round): FA, FA+RM, FA+AH and
FA+RM+AH on one-keyword and on iid clients, beside the paper's (`seeds.RMAH_TABLE3`).

The page reads these runs and never starts them: they are ``ROOT/rmah_kws_c0.5_<row>_<method>_s<seed>``
at the top of the page's runs root, made by `command` (seeds `SEEDS`, `HORIZON` rounds). A run is
finished when its ``final_metrics.json`` is written; one with a ``metrics.csv`` only is unfinished
(running or stopped).
Per cell: the final test accuracy, mean ± sample std over the finished seeds; per method, D =
method − FA on the same seed, mean ± SE (`common.paired`); the paper's orderings on the
one-keyword row (`seeds.ORDERINGS_T3_HALF`) judged by the page's rule (`verdicts`). The section
states the horizon the runs record and each run's commit (`commits`); while runs are missing it
names them and gives the command.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import decimal
import json
import os
import re
from collections.abc import Mapping

from tff_robust.common import markdown
from tff_robust.common.paired import paired_difference
from tff_robust.experiments.page import commits, coverage
from tff_robust.experiments.page.plan import flagfile_rounds, fmt
from tff_robust.experiments.page.seeds import ORDERINGS_T3_HALF, RMAH_TABLE3
from tff_robust.experiments.page.verdicts import claims_table
from tff_robust.experiments.runs import flag_values, recorded_flags, rounds_of
from tff_robust.experiments.tables import expand_args, flagfile_path, overlay_values

ROWS = (("c0.5_noniid", "one keyword per client"), ("c0.5_iid", "iid"))
METHODS = (("fa", "FA"), ("fa_rm", "FA+RM"), ("fa_ah", "FA+AH"), ("fa_rm_ah", "FA+RM+AH"))
SEEDS = (0, 1)  # the seeds `command` makes
HORIZON = 30  # the rounds `command` runs (the flagfiles' own: 200; the paper states none)
_NAME = re.compile(r"rmah_kws_(.+)_s(\d+)")

Found = Mapping[tuple[str, str], Mapping[int, "Record"]]  # (row, method) -> seed -> record


@dataclasses.dataclass(frozen=True)
class Record:
  """One run's files: its final test accuracy, how far it got, and what experiment.json records."""

  path: str
  accuracy: float | None  # final test accuracy (%); None until final_metrics.json is written
  last_round: int  # the last round in metrics.csv (0: none yet)
  rounds: int | None  # the --rounds experiment.json records
  flags: dict[str, str]  # the recorded flags' last values (`flag_values`)

  def progress(self) -> str:
    """``round 4 of 30`` (an unfinished run)."""
    return f"round {self.last_round}" + (f" of {self.rounds}" if self.rounds else "")


def name(row: str, method: str, seed: int) -> str:
  """A run's folder under ROOT, as the table runner names it."""
  return f"rmah_kws_{row}_{method}_s{seed}"


def _last_round(path: str) -> int:
  if not os.path.exists(path):
    return 0
  with open(path, newline="") as f:
    return max((int(r["round"]) for r in csv.DictReader(f) if r.get("round")), default=0)


def read(run_dir: str) -> Record | None:
  """The run's `Record`, or None when it has neither experiment.json nor metrics.csv."""
  files = {k: os.path.join(run_dir, k) for k in ("experiment.json", "metrics.csv", "final_metrics.json")}
  if not os.path.exists(files["experiment.json"]) and not os.path.exists(files["metrics.csv"]):
    return None
  record, accuracy = {}, None
  if os.path.exists(files["experiment.json"]):
    with open(files["experiment.json"]) as f:
      record = json.load(f)
  if os.path.exists(files["final_metrics.json"]):
    with open(files["final_metrics.json"]) as f:
      accuracy = 100.0 * float(json.load(f)["test_accuracy"])
  flags = recorded_flags(record, os.path.dirname(run_dir))  # paths as ``$ROOT/...`` where they were under it
  return Record(run_dir, accuracy, _last_round(files["metrics.csv"]), rounds_of(flags), flag_values(flags))


def _parse(entry: str) -> tuple[str, str, int] | None:
  m = _NAME.fullmatch(entry)
  cells = {f"{r}_{k}": (r, k) for r, _ in ROWS for k, _ in METHODS}
  return None if m is None or m.group(1) not in cells else (*cells[m.group(1)], int(m.group(2)))


def gather(root: str) -> dict[tuple[str, str], dict[int, Record]]:
  """(row, method) -> seed -> `Record` of every C = 0.5 keyword run at the top of ``root``."""
  found: dict[tuple[str, str], dict[int, Record]] = {}
  for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    key = _parse(entry)
    record = read(os.path.join(root, entry)) if key else None
    if record is not None:
      found.setdefault(key[:2], {})[key[2]] = record
  order = [(r, k) for r, _ in ROWS for k, _ in METHODS]  # the page's order
  return {k: dict(sorted(found[k].items())) for k in order if k in found}


def accuracies(found: Found) -> dict[tuple[str, str], dict[int, float]]:
  """(row, method) -> seed -> final test accuracy (%) of the finished runs."""
  out = {k: {s: r.accuracy for s, r in v.items() if r.accuracy is not None} for k, v in found.items()}
  return {k: v for k, v in out.items() if v}


def finished_by_row(root: str) -> collections.Counter:
  """Row key -> the finished runs of it on record (the page's index counts them)."""
  counts: collections.Counter = collections.Counter()
  for (row, _), v in accuracies(gather(root)).items():
    counts[row] += len(v)
  return counts


def finished_dirs(root: str) -> list[str]:
  """The finished runs' folders (for the page's list of runs without a commit)."""
  return sorted(r.path for v in gather(root).values() for r in v.values() if r.accuracy is not None)


def shown(root: str) -> str:
  """``root`` as the command names it: ``docs/runs`` for a checkout's runs folder (the command is
  run from that checkout, so the page reads the same in every copy), else absolute."""
  root, tail = os.path.abspath(root), os.path.join("docs", "runs")
  return tail if root.endswith(os.sep + tail) else root


def data_dir(found: Found, root: str) -> str:
  """The corpus the runs on record name (the most runs', for the command to resume them: another
  would be a conflict), else the page's, ROOT/kws_corpus; ``$ROOT/...`` spelt with ``root``."""
  named = collections.Counter(r.flags["data_dir"] for v in found.values() for r in v.values()
                              if r.flags.get("data_dir"))
  value = min(named.items(), key=lambda kv: (-kv[1], kv[0]))[0] if named else "$ROOT/kws_corpus"
  if value.startswith("$ROOT/"):
    return os.path.join(shown(root), value[len("$ROOT/"):])
  return value[len("$REPO/"):] if value.startswith("$REPO/") else value


def command(root: str, corpus: str) -> str:
  """The command that makes (or resumes) every run of the section, on ``corpus``."""
  return ("python -m tff_robust.experiments --table=rmah_table3 --rows=" + ",".join(r for r, _ in ROWS)
          + " --methods=" + ",".join(label for _, label in METHODS) + f" --seeds={len(SEEDS)} "
          f"--rounds={HORIZON} --data_dir={corpus} --root_output_dir={shown(root)}")


def missing_lines(found: Found) -> list[str]:
  """One bullet per row with runs of `SEEDS` not finished: which are unfinished and how far they
  got, which are not on record."""
  lines = []
  for row, row_label in ROWS:
    parts = []
    for method, label in METHODS:
      have = found.get((row, method), {})
      notes = [f"seed {s} unfinished ({have[s].progress()})" for s in SEEDS if s in have and have[s].accuracy is None]
      absent = [str(s) for s in SEEDS if s not in have]
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


def _paper_mean(row: str, method: str) -> decimal.Decimal:
  return decimal.Decimal(RMAH_TABLE3[row][method].split(" ± ")[0])


def paper_difference(row: str, method: str) -> str:
  """The paper's means' difference method − FA, exact (``+63.45``)."""
  return f"{_paper_mean(row, method) - _paper_mean(row, 'fa'):+}"


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


def section(page, root: str) -> None:
  """The subsection (``page``: a `results.Page`; ``root``: the page's runs root)."""
  found = gather(root)
  page.lines += [f"### {coverage.KWS_HALF}", "", intro(), ""]
  todo = missing_lines(found)
  seeds = " and ".join(map(str, SEEDS))
  if not found:
    page.lines += [f"**Runs pending**: none of the {len(ROWS) * len(METHODS) * len(SEEDS)} runs of these rows "
                   f"({', '.join(label for _, label in METHODS)} on one-keyword and on iid clients, seeds {seeds}, "
                   f"{HORIZON} rounds) is on record in the page's runs root yet.", ""]
  elif todo:
    page.lines += [f"**Runs missing** (of seeds {seeds}, {HORIZON} rounds):", ""] + todo + [""]
  if todo:
    page.lines += ["The command that makes them (from the repository; a finished run is never redone, an "
                   "unfinished one resumes):", "", "```sh", command(root, data_dir(found, root)), "```", ""]
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
  page.lines += provenance(found, root)
