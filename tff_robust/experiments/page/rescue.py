"""The results page's check of seed 000's Table 3 claim where FA's training fails.

The seed: on one-keyword clients "training consistently fails" without representation matching.
At FA's validation-chosen point (lr 0.05, 2 steps) FA does not fail on the espeak corpus, so the
claim is checked at a schedule where it does: lr 0.1 × 20 local steps (`kws_study.FAILING_FA`),
where FA's averaged model sits at chance. The runs are the keyword study's
(``ROOT/kws_moderate/<arm>_s<seed>``, `kws_study`): FA and FA+RM (the authors' layers, eq. 1
summed over units) at each weight run there, paired by seed. The claim judged per
window of evaluations: FA+RM − FA > 0 in mean validation and test accuracy (the page's rule).
"""

from __future__ import annotations

import os
import re

from tff_robust.common import markdown
from tff_robust.experiments import kws_study as study
from tff_robust.experiments.page.verdicts import judge

STUDY = study.STUDY
WINDOWS = ((8, 10, 12), study.HORIZON)


def label(arm: str) -> str:
  weight = study.rm_weight(arm, study.FAILING_FA)
  return "FA" if weight is None else f"FA+RM, authors' layers, {weight}"


def _runs(root: str) -> dict[str, dict[int, list[dict[str, float]]]]:
  """arm -> seed -> metrics rows, for FA at the failing schedule and every RM arm paired with it."""
  folder = os.path.join(root, STUDY)
  found: dict[str, dict[int, list]] = {}
  for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
    m = re.fullmatch(r"(.+)_s(\d+)", name)
    if not m or not os.path.isfile(os.path.join(folder, name, "metrics.csv")):
      continue
    arm = m.group(1)
    if arm == study.FAILING_FA or study.rm_weight(arm, study.FAILING_FA) is not None:
      found.setdefault(arm, {})[int(m.group(2))] = study.read(os.path.join(folder, name))
  return found


def section(page, root: str) -> None:
  """The paragraph, table and figure (``page``: a `results.Page`; ``root``: the runs' folder)."""
  runs = _runs(root)
  fa = runs.pop(study.FAILING_FA, {})
  if not fa or not runs:
    return
  body, short = [], []
  for arm, by_seed in sorted(runs.items(), key=lambda kv: float(study.rm_weight(kv[0], study.FAILING_FA))):
    rows_before = len(body)
    for rounds in WINDOWS:
      seeds = [s for s in sorted(set(by_seed) & set(fa)) if None not in
               (study.window_mean(r[s], "val_accuracy", rounds) for r in (by_seed, fa))]
      if not seeds:
        continue
      cells = []
      for key in ("val_accuracy", "test_accuracy"):
        a = {s: study.window_mean(by_seed[s], key, rounds) for s in seeds}
        b = {s: study.window_mean(fa[s], key, rounds) for s in seeds}
        cells += [f"{sum(b.values()) / len(seeds):.1f}", f"{sum(a.values()) / len(seeds):.1f}",
                  judge(a, b, names=("FA+RM", "FA")).text(digits=1)]
      body.append([label(arm), ", ".join(map(str, seeds)), f"{rounds[0]}–{rounds[-1]}"] + cells)
    if len(body) == rows_before:  # no window reached: named, not drawn
      short.append(f"{label(arm)} ({max(len(r) for r in by_seed.values())} rounds)")
  fa_val = [v for r in fa.values() for row in r if row["round"] >= 4 and (v := row.get("val_accuracy")) is not None]
  page.lines += [
      "### Where FA fails: one keyword per client at lr 0.1 × 20 local steps", "",
      "The seed's rescue is a claim about a schedule where FA's training fails. At FA's chosen point above it "
      f"does not; at lr 0.1 with 20 local steps it does (FA's validation accuracy {100 * min(fa_val):.1f}–"
      f"{100 * max(fa_val):.1f} % at every evaluation from round 4 on, seeds {', '.join(map(str, sorted(fa)))}; "
      "chance is 10 %). FA and FA+RM (the authors' layers; every weight run there) on the same seeds, mean "
      "validation and test accuracy (%) over the window's evaluations, the claim FA+RM − FA > 0 judged by the "
      "page's rule; "
      f"runs and weights: [runs/{STUDY}/notes.md](runs/{STUDY}/notes.md).", ""]
  page.lines += markdown.table(["method", "seeds", "rounds", "FA val", "FA+RM val", "FA+RM − FA (val)",
                                "FA test", "FA+RM test", "FA+RM − FA (test)"], body) + [""]
  if short:
    page.lines += [f"Run there but stopped before a window's evaluations (see the notes): {', '.join(short)}.", ""]
  shown = {row[0] for row in body}
  curves = {study.FAILING_FA: fa, **{a: r for a, r in runs.items() if label(a) in shown}}
  arms = {a: _longest(r) for a, r in curves.items()}
  drawn = "; ".join(f"{label(a)}: seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))} "
                    f"({len(curves[a][s[0]])} rounds)" for a, s in arms.items())
  page.figure("results_kws_rescue.png",
              lambda p: study.draw(p, os.path.join(root, STUDY), arms, label,
                                   "FA and FA+RM where FA fails: one keyword per client, lr 0.1 × 20 steps"),
              f"One keyword per client at lr 0.1 × 20 local steps, FA and FA+RM (mean over the seeds that ran "
              f"each arm longest, band min..max; {drawn}); {page.stamp}, `{page.command}`.")


def _longest(by_seed: dict[int, list]) -> list[int]:
  """The seeds that ran the most rounds (a curve over seeds ends where its shortest run does)."""
  most = max(len(r) for r in by_seed.values())
  return sorted(s for s, r in by_seed.items() if len(r) == most)
