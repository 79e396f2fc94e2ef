"""Whether a study's runs, recorded at different commits, train alike: the first rounds of some of
them made again at one later commit (``<study folder>/commit_check/<name>/metrics.csv``, made by
``python -m tff_robust.main --flagfile=<the run's hparams.cfg> --rounds=K``) against the committed
records, column by column, as written.

Compared: every column both files have in the re-made rounds, except the wall time
(``round_seconds``) and the evaluations (``test_*``, ``val_*``), which a short run writes at its last
round and a long one only on its own evaluation rounds."""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Mapping

FOLDER = "commit_check"
NOT_COMPARED = ("round_seconds",)
EVALUATIONS = ("test_", "val_")


@dataclasses.dataclass(frozen=True)
class Check:
  """One re-made run against its record: the rounds compared and the columns that differ."""

  label: str
  rounds: int
  differing: tuple[str, ...]


def _rows(run_dir: str) -> dict[str, dict[str, str]]:
  with open(os.path.join(run_dir, "metrics.csv")) as f:
    return {r["round"]: r for r in csv.DictReader(f)}


def compare(remade: str, committed: str, label: str) -> Check:
  """``remade``'s rounds against the same rounds of ``committed`` (two run folders)."""
  new, old = _rows(remade), _rows(committed)
  differing = set()
  for t, row in new.items():
    if t not in old:
      differing.add(f"round {t} missing")
      continue
    for key, value in row.items():
      if key in NOT_COMPARED or key.startswith(EVALUATIONS) or key not in old[t]:
        continue
      if value != old[t][key]:
        differing.add(key)
  return Check(label, len(new), tuple(sorted(differing)))


def checks(study: str, committed: Mapping[str, tuple[str, str]]) -> list[Check]:
  """Each re-made run under ``study``/`FOLDER`, in ``committed``'s order (its folder's name -> its
  label and the committed run's folder); folders ``committed`` does not name are left out."""
  folder = os.path.join(study, FOLDER)
  if not os.path.isdir(folder):
    return []
  return [compare(os.path.join(folder, name), path, label) for name, (label, path) in committed.items()
          if os.path.isfile(os.path.join(folder, name, "metrics.csv"))]


def sentence(found: list[Check], link: str) -> str:
  """The page's line on ``found`` ("" when none), linking the check's notes at ``link``."""
  if not found:
    return ""
  rounds = max(c.rounds for c in found)
  names = ", ".join(c.label for c in found)
  differ = [f"{c.label} in {', '.join(c.differing)}" for c in found if c.differing]
  verdict = ("differ from their committed records: " + "; ".join(differ) if differ
             else "equal their committed records in every training column")
  return (f"Made again at one later commit, rounds 1–{rounds} of {names} ([{FOLDER}]({link})) "
          f"{verdict} (wall time and evaluations not compared).")
