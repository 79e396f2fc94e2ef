"""Which of the results page's runs record no commit: a run's ``experiment.json`` names the commit
of the checkout that made it (``commit``, `runs.Run.record`) since the runner began to record it;
an older record holds the run's flags but no commit. Listed per section, seeds folded
(``rmah_mnist_c1.0_iid_fa_ah_s{0,1,2}``)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence


def recorded_commit(run_dir: str) -> str | None:
  """The commit the run's experiment.json names ("" when it names none); None without one."""
  path = os.path.join(run_dir, "experiment.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return str(json.load(f).get("commit") or "")


def has_commit(run_dir: str) -> bool | None:
  """Whether the run's experiment.json names a commit; None without an experiment.json."""
  commit = recorded_commit(run_dir)
  return None if commit is None else bool(commit)


def records_under(folder: str) -> list[str]:
  """Every run folder (one holding an experiment.json) in ``folder`` or below it."""
  return sorted(parent for parent, _, files in os.walk(folder) if "experiment.json" in files)


def folded(run_dirs: Sequence[str], root: str) -> str:
  """``a_s{0,1,2}, b_s0``: the runs' paths under ``root`` with their seeds folded."""
  seeds: dict[str, list[str]] = {}
  for d in run_dirs:
    name = os.path.relpath(d, root)
    m = re.fullmatch(r"(.+)_s(\d+)", name)
    stem, seed = (m.group(1), m.group(2)) if m else (name, "")
    seeds.setdefault(stem, []).append(seed)
  parts = []
  for stem, found in seeds.items():
    found = sorted(s for s in found if s)
    tail = "" if not found else f"_s{found[0]}" if len(found) == 1 else "_s{" + ",".join(found) + "}"
    parts.append(f"`{stem}{tail}`")
  return ", ".join(parts)


def lines(sections: Mapping[str, Sequence[str]], root: str) -> list[str]:
  """The page's list: ``sections`` maps a section's name to its runs' folders (finished runs)."""
  body, total, missing = [], 0, 0
  for name, dirs in sections.items():
    recorded = {d: has_commit(d) for d in dirs}
    dirs = [d for d, c in recorded.items() if c is not None]
    without = [d for d in dirs if not recorded[d]]
    total, missing = total + len(dirs), missing + len(without)
    if not dirs:
      continue
    runs = {1: "its one run", 2: "both its runs"}.get(len(dirs), f"all {len(dirs)} of its runs")
    if not without:
      body.append(f"- {name}: none ({runs} {'names its' if len(dirs) == 1 else 'name their'} commit).")
    elif len(without) == len(dirs):
      body.append(f"- {name}: {runs}.")
    else:
      body.append(f"- {name}: {len(without)} of {len(dirs)}: {folded(without, root)}.")
  return (["## Runs that record no commit", "",
           f"Each run's `experiment.json` names the commit of the checkout that made it (`commit`) since "
           f"the runner began recording it; {missing} of the page's {total} runs with a record are older "
           "and hold their flags but no commit (the page's runner reuses a run of its tables only when "
           "its recorded flags are today's). The keyword study's runs that *Where FA fails* reads (`kws_moderate/`) are `main`'s "
           "own, with `hparams.cfg` and `run.log` but no `experiment.json`.", ""] + body + [""])
