"""The results page's Table 3 one-keyword cell at 200 rounds, judged by the rule committed before
its runs (``ROOT/horizon200/kws_rule.md``), which the section quotes before any number.

The page reads these runs and never starts them: they are `runs`, the runner's plan of the rule
(`experiments.planned.kws200_runs`) with ``ROOT/horizon200`` as the study's folder and the page's
corpus, made (or resumed) by

    python -m tff_robust.experiments --table=rmah_kws200 --data_dir=CORPUS --root_output_dir=ROOT/horizon200

arm A (FA's validation-chosen schedule) ``ROOT/horizon200/rmah_kws_c1.0_noniid_{fa,fa_rm}_s{0,1,2}``,
arm B (the schedule where FA fails: ``--client_lr=0.1 --local_steps=20``, FA+RM also
``--rm_weight=0.001``) the same names under ``ROOT/horizon200/kws_failing/`` (seeds 0, 1), the
ceiling ``ROOT/horizon200/rmah_kws_c1.0_iid_fa_s0``. A run counts by the runner's own state
(`runs.Run.status`): done, running (another process holds it), unfinished (stopped before its end),
or made with other flags than the plan's (a conflict: named, never read); a run recorded on another
copy of the corpus is the same run when its data.json states the corpus's fingerprint
(`experiments.data_identity`). Per finished run, from its metrics.csv: the window, test accuracy
averaged over the evaluations at rounds 180, 190, 200 (`kws_study.window_mean`), and the level-off
check, the window against rounds 150, 160, 170. Per seed D = FA+RM − FA, mean ± SE over seeds
(`common.paired`); the rule's verdict (`verdict_a`, `verdict_b`). While a run of the plan is not
done the section gives the command (`command`, relative to the page's checkout); none on record:
pending.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from tff_robust import experiments as ex
from tff_robust import plot
from tff_robust.common import markdown
from tff_robust.common.paired import paired_difference
from tff_robust.experiments import kws_study
from tff_robust.experiments.page import commit_check
from tff_robust.experiments.page.horizon import made_with
from tff_robust.experiments.page.plan import command_path, committed_lines
from tff_robust.experiments.page.seeds import RMAH_TABLE3, rmah_table3_mean
from tff_robust.experiments.planned import CEILING as CEILING_ARM, KWS200_ARMS, KWS200_CEILING, KWS200_ROW
from tff_robust.experiments.runs import REPO, flag_values

FOLDER = "horizon200"  # the study's folder under the page's runs root
RULE = os.path.join(FOLDER, "kws_rule.md")
CELL = f"rmah_kws_{KWS200_ROW}"
ARMS = {arm: (folder, seeds) for arm, (folder, seeds, _) in KWS200_ARMS.items()}  # arm -> (folder, seeds)
CEILING = "rmah_kws_{}_{}_s{}".format(*KWS200_CEILING)
METHODS = (("fa", "FA"), ("fa_rm", "FA+RM"))
WINDOW, BEFORE = (180, 190, 200), (150, 160, 170)
# The rule's numbers (kws_rule.md): held if D ≥ HELD_D on every seed; refuted if mean D ≤
# REFUTED_MEAN with SE ≤ REFUTED_SE; "still rising" if the window exceeds BEFORE's mean by > RISING.
HELD_D, REFUTED_MEAN, REFUTED_SE, RISING = 20.0, 5.0, 5.0, 2.0
GENERALISATION_GAP = 10.0  # training over test accuracy (points) past which the ceiling is named generalisation-bound
HELD, REFUTED, INCONCLUSIVE = "held", "refuted", "inconclusive"


@dataclasses.dataclass(frozen=True)
class Read:
  """One run's record: its window, the level-off window, the last round it reached, its state."""

  path: str
  window: float | None  # test accuracy (%) over WINDOW; None until the run is done
  before: float | None  # over BEFORE
  last_round: int
  status: str = ex.DONE  # the runner's state (`runs.Run.status`): done, busy (running) or pending

  @property
  def rise(self) -> float | None:
    return None if self.window is None or self.before is None else self.window - self.before

  def cell(self) -> str:
    """``35.2 (+1.3)``, ``… still rising`` past `RISING`, ``running: round 137`` (another process
    holds it) or ``unfinished: round 137``."""
    if self.window is None:
      if self.status == ex.DONE:
        return f"finished at round {self.last_round} without the window's evaluations"
      return f"{'running' if self.status == ex.BUSY else 'unfinished'}: round {self.last_round}"
    rise = self.rise
    if rise is None:
      return f"{self.window:.1f}"
    return f"{self.window:.1f} ({rise:+.1f}{', still rising' if rise > RISING else ''})"


@dataclasses.dataclass(frozen=True)
class Records:
  """The plan's runs on record: arms A and B by (arm, method) -> seed, the ceiling, and the runs
  made with other flags than the plan's ((arm, method, seed) -> the runner's reason; not read)."""

  found: dict[tuple[str, str], dict[int, Read]]
  ceiling: Read | None
  conflicts: dict[tuple[str, str, int], str]
  not_done: int = 0  # the plan's runs the runner does not count done (on record or not)


def runs(root: str, corpus: str) -> dict[tuple[str, str, int], ex.Run]:
  """The runner's plan of the rule in ``root``/`FOLDER` on ``corpus``: (arm, method, seed) -> run."""
  return ex.kws200_runs(os.path.join(root, FOLDER), corpus)


def read(run: ex.Run, status: str = ex.DONE) -> Read | None:
  """The run's `Read` in the runner's ``status`` (its windows only when done), or None when it has
  no metrics.csv and is not running."""
  path = run.output_dir
  if not os.path.isfile(os.path.join(path, "metrics.csv")):
    return Read(path, None, None, 0, status) if status == ex.BUSY else None
  rows = kws_study.read(path)
  last = max((int(r["round"]) for r in rows), default=0)
  if status != ex.DONE:
    return Read(path, None, None, last, status)
  return Read(path, kws_study.window_mean(rows, "test_accuracy", WINDOW),
              kws_study.window_mean(rows, "test_accuracy", BEFORE), last, status)


def command(root: str, corpus: str, base: str = REPO) -> str:
  """The command that makes (or resumes) every run of `runs`, run from ``base`` (`plan.command_path`)."""
  return (f"python -m tff_robust.experiments --table={ex.KWS200} --data_dir={command_path(corpus, base)} "
          f"--root_output_dir={command_path(os.path.join(root, FOLDER), base)}")


def _command_lines(root: str, corpus: str, base: str) -> list[str]:
  return ["The runs not yet in are made, or resumed, by the runner's plan of the rule (from the repository, on "
          "the page's corpus; a finished run is never redone, one made with other flags is refused):", "",
          "```sh", command(root, corpus, base), "```", ""]


def _why(run: ex.Run, root: str) -> str:
  """The runner's reason not to reuse ``run``'s folder, the folder named under ``root``."""
  reason = (run.conflict() or "").split(". Use another")[0].rstrip(".")
  return reason.replace(run.output_dir, f"`{os.path.relpath(run.output_dir, root)}`") + "."


def gather(root: str, corpus: str) -> Records:
  """Every run of `runs` on record in ``root``, by the runner's state."""
  found: dict[tuple[str, str], dict[int, Read]] = {}
  ceiling, conflicts, not_done = None, {}, 0
  for (arm, method, seed), run in runs(root, corpus).items():
    status = run.status()
    not_done += status != ex.DONE
    if status == ex.CONFLICT:
      conflicts[(arm, method, seed)] = _why(run, root)
      continue
    r = read(run, status)
    if r is None:
      continue
    if arm == CEILING_ARM:
      ceiling = r
    else:
      found.setdefault((arm, method), {})[seed] = r
  return Records(found, ceiling, conflicts, not_done)


def verdict_a(d: Mapping[int, float], seeds: Sequence[int] = ARMS["A"][1]) -> str:
  """The rule's headline verdict on D per seed (seed -> points): held, refuted or inconclusive
  (any of ``seeds`` missing is inconclusive)."""
  if any(s not in d for s in seeds):
    return INCONCLUSIVE
  values = [d[s] for s in seeds]
  if all(v >= HELD_D for v in values):
    return HELD
  mean, se = paired_difference(values, [0.0] * len(values))
  if mean <= REFUTED_MEAN and se <= REFUTED_SE:  # False for a NaN SE
    return REFUTED
  return INCONCLUSIVE


def verdict_b(d: Mapping[int, float], seeds: Sequence[int] = ARMS["B"][1]) -> str:
  """Arm B by the rule: the rescue holds at 200 rounds if D ≥ `HELD_D` on every seed of ``seeds``."""
  if any(s not in d for s in seeds):
    return INCONCLUSIVE
  return HELD if all(d[s] >= HELD_D for s in seeds) else "not held"


def differences(found: Mapping[tuple[str, str], Mapping[int, Read]], arm: str) -> dict[int, float]:
  """seed -> D = FA+RM − FA (points) on the seeds where both windows are in."""
  fa, rm = found.get((arm, "fa"), {}), found.get((arm, "fa_rm"), {})
  return {s: rm[s].window - fa[s].window for s in sorted(set(fa) & set(rm))
          if fa[s].window is not None and rm[s].window is not None}


def _rule_lines(root: str) -> list[str]:
  """The rule file as a quotation (its title left out), from ROOT or else the committed copy."""
  lines = committed_lines(root, RULE)
  if lines is None:
    return [f"The rule (`{RULE}`) is not in this checkout.", ""]
  body = "\n".join(lines).strip().splitlines()
  title = body.pop(0).lstrip("# ") if body and body[0].startswith("#") else "the rule"
  while body and not body[0].strip():
    body.pop(0)
  return [f"**The rule**, committed before any run of this cell ([runs/{RULE}](runs/{RULE}): "
          f"\"{title}\"), quoted:", ""] + [
      f"> {line}".rstrip() for line in body] + [""]


def _schedules(found: Mapping[tuple[str, str], Mapping[int, Read]]) -> str:
  """Each arm's schedule as its runs' experiment.json records it, and their commits."""
  parts, made = [], set()
  for (arm, method), by_seed in sorted(found.items()):
    record_path = os.path.join(next(iter(by_seed.values())).path, "experiment.json")
    if not os.path.exists(record_path):
      continue
    with open(record_path) as f:
      record = json.load(f)
    v = flag_values(record.get("flags", []))
    rm = f", RM {v['rm_weight']}" if method == "fa_rm" and "rm_weight" in v else ""
    parts.append(f"arm {arm} {dict(METHODS)[method]}: lr {v.get('client_lr', '?')} × "
                 f"{v.get('local_steps', '?')} steps{rm}")
    made |= {made_with(_record(r.path), r.path).split(",")[0] for r in by_seed.values()}
  return ("As recorded (experiment.json): " + "; ".join(parts) + f". Made at {', '.join(sorted(made))}."
          if parts else "")


def _commit_check(root: str, found: Mapping[tuple[str, str], Mapping[int, Read]]) -> str:
  """Arm A's runs re-made at one later commit (`commit_check`), named ``<method>_s<seed>``."""
  committed = {f"{m}_s{s}": (f"{label} seed {s}", r.path) for m, label in METHODS
               for s, r in sorted(found.get(("A", m), {}).items())}
  return commit_check.sentence(commit_check.checks(os.path.join(root, FOLDER), committed),
                               f"runs/{FOLDER}/{commit_check.FOLDER}/README.md")


def _record(run_dir: str) -> dict:
  path = os.path.join(run_dir, "experiment.json")
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _verdict_line(arm: str, d: Mapping[int, float]) -> str:
  seeds = ARMS[arm][1]
  mean, se = paired_difference(list(d.values()), [0.0] * len(d))
  stat = "no seed in" if not d else f"D = {mean:+.1f}" + ("" if math.isnan(se) else f" ± {se:.1f} (SE)")
  verdict = verdict_a(d) if arm == "A" else verdict_b(d)
  name = "the headline" if arm == "A" else "the rescue where FA fails"
  return f"**Arm {arm} ({name}): {verdict}** — {stat}; {len(d)} of {len(seeds)} seeds in."


def _table_lines(records: Records) -> list[str]:
  """The arms' table (a run made with other flags named so), the verdicts and the level-off check."""
  found, body = records.found, []
  for arm, (_, seeds) in ARMS.items():
    d = differences(found, arm)
    for s in seeds:
      cells = [found.get((arm, m), {}).get(s) for m, _ in METHODS]
      shown = [c.cell() if c else "made with other flags" if (arm, m, s) in records.conflicts else "not on record"
               for c, (m, _) in zip(cells, METHODS)]
      body.append([arm, str(s)] + shown + [f"{d[s]:+.1f}" if s in d else "not yet"])
  lines = ["Test accuracy (%) averaged over the evaluations at rounds 180, 190, 200 (the window), "
           "with its change from rounds 150–170 in brackets (> +2: still rising); D = FA+RM − FA "
           "on the same seed.", ""]
  lines += markdown.table(["arm", "seed", "FA", "FA+RM", "D (points)"], body) + [""]
  lines += [_verdict_line(arm, differences(found, arm)) for arm in ARMS] + [""]
  rising = [f"arm {arm} {label} seed {s}" for arm in ARMS for m, label in METHODS
            for s, r in sorted(found.get((arm, m), {}).items()) if r.rise is not None and r.rise > RISING]
  return lines + ["Level-off check: " + (f"still rising — {', '.join(rising)}." if rising
                                         else "no run in rose more than 2 points over its last 50 rounds."), ""]


def _why_lines(found: Mapping[tuple[str, str], Mapping[int, Read]]) -> list[str]:
  """Why a refuted headline differs from the paper, from the records (none unless arm A is refuted)."""
  d = differences(found, "A")
  if verdict_a(d) != REFUTED:
    return []
  fa, rm = found[("A", "fa")], found[("A", "fa_rm")]
  fa_window = statistics.fmean(fa[s].window for s in d)
  rises = [(fa[s].rise, rm[s].rise) for s in d if fa[s].rise is not None and rm[s].rise is not None]
  horizon = ""
  if rises:
    fa_rise, rm_rise = (statistics.fmean(column) for column in zip(*rises))
    horizon = (f" *The horizon*: from rounds 150–170 to the window FA rose {fa_rise:+.1f} and FA+RM "
               f"{rm_rise:+.1f} points on average, so D moved by {rm_rise - fa_rise:+.1f}; the curves climb "
               "together.")
  paper = RMAH_TABLE3["c1.0_noniid"]
  rescue = ("at 30 rounds and, by this rule, at 200 (arm B above)" if verdict_b(differences(found, "B")) == HELD
            else "at 30 rounds")
  return [f"**Why this differs from the paper.** The paper's FA on this cell is {paper['fa']}; here FA, on the "
          f"schedule chosen on validation speakers, reaches {fa_window:.1f} % (mean over seeds "
          f"{', '.join(map(str, sorted(d)))}): the paper's rescue is measured against a far weaker FA. Where "
          f"FA's schedule fails (lr 0.1 × 20, *Where FA fails* above) RM does rescue it, {rescue}. "
          "Ruled out:" + horizon + " *RM doing nothing*: it changes the clients (*What each method does to the "
          "clients*, above). *RM's weight*: on this schedule validation preferred no RM to 1e-5, 1e-4 and 1e-3 "
          "at rounds 26–30 ([runs/kws_moderate/notes.md](runs/kws_moderate/notes.md)).", ""]


def _conflict_lines(records: Records) -> list[str]:
  """The runs made with other flags than the plan's, each with the runner's reason (none: [])."""
  if not records.conflicts:
    return []
  label = lambda arm, m, s: ("the ceiling" if arm == CEILING_ARM else f"arm {arm} {dict(METHODS)[m]}") + f" seed {s}"
  return ["Made with other flags than the runner's plan of the rule (not read; the runner refuses to reuse them):",
          ""] + [f"- {label(*k)}: {why}" for k, why in records.conflicts.items()] + [""]


def _ceiling_lines(ceiling: Read | None, found: Mapping[tuple[str, str], Mapping[int, Read]]) -> list[str]:
  """The ceiling's window and, once it and arm A's FA are in, how far one keyword per client sets FA
  below it here and in the paper (the room a rescue has), from the records."""
  paper_iid = RMAH_TABLE3["c1.0_iid"]["fa"]
  if ceiling is None or ceiling.window is None:
    return [f"The ceiling, FA on iid clients (seed 0): {ceiling.cell() if ceiling else 'not on record'} (the "
            f"paper's iid FA: {paper_iid}).", ""]
  rows = kws_study.read(ceiling.path)
  evaluated = [r for r in rows if "test_accuracy" in r]
  peak = max(evaluated, key=lambda r: r["test_accuracy"])
  first, last = rows[0], rows[-1]
  text = (f"The ceiling, FA on iid clients (seed 0, the iid row's flagfile schedule: lr {first['client_lr']:g} × "
          f"{first['local_steps']:.0f} steps at round 1, not tuned): {ceiling.cell()} (the paper's iid FA: "
          f"{paper_iid}). Its test accuracy peaked at {100 * peak['test_accuracy']:.1f} % at round "
          f"{peak['round']:.0f}; its clients' training accuracy was {100 * last['train_accuracy']:.1f} % at round "
          f"{last['round']:.0f}")
  gap_to_train = 100 * last["train_accuracy"] - ceiling.window
  text += (f", {gap_to_train:.1f} points above its window: what it lacks is generalisation to the "
           "speakers held out for test, not fitting its training clips." if gap_to_train > GENERALISATION_GAP else ".")
  fa = [r.window for r in found.get(("A", "fa"), {}).values() if r.window is not None]
  if fa:
    fa_mean = statistics.fmean(fa)
    gap = ceiling.window - fa_mean
    paper_gap = rmah_table3_mean("c1.0_iid", "fa") - rmah_table3_mean(KWS200_ROW, "fa")
    text += (f" Arm A's FA ({fa_mean:.1f} %, mean over its {len(fa)} seeds) is {gap:.1f} points below "
             f"it: one keyword per client costs FA {gap:.1f} points here against {paper_gap:.1f} in the paper, so "
             f"D ≥ +{HELD_D:.0f} would put FA+RM {abs(HELD_D - gap):.1f} points "
             f"{'above' if HELD_D > gap else 'below'} FA on iid clients.")
  return [text, ""]


def section(page, root: str, corpus: str | None = None) -> None:
  """The subsection (``page``: a `results.Page`; ``root``: the runs' folder; ``corpus``: the page's
  keyword corpus, by default ``root``/kws_corpus as the page's)."""
  paper = RMAH_TABLE3["c1.0_noniid"]
  page.lines += ["### Table 3's one-keyword cell at 200 rounds", "",
                 "The flagfiles' horizon (the decay schedule acts at rounds 50, 100, 150); the paper: FA "
                 f"{paper['fa']}, FA+RM {paper['fa_rm']}, FA+RM+AH {paper['fa_rm_ah']}.", ""]
  page.lines += _rule_lines(root)
  corpus = corpus or os.path.join(root, "kws_corpus")
  records = gather(root, corpus)
  found, ceiling, base = records.found, records.ceiling, os.path.dirname(page.docs)  # commands run from docs' parent
  if not found and ceiling is None and not records.conflicts:
    page.lines += ["**Runs pending**: no run of this cell at 200 rounds is on record yet (arm A in "
                   f"`{FOLDER}/`, arm B in `{FOLDER}/{ARMS['B'][0]}/`, the ceiling `{FOLDER}/{CEILING}`); "
                   "the page judges them by the rule above once their records are committed.", ""]
    page.lines += _command_lines(root, corpus, base)
    return
  page.lines += _table_lines(records) + _why_lines(found) + _conflict_lines(records)
  page.lines += _ceiling_lines(ceiling, found)
  if records.not_done:
    page.lines += _command_lines(root, corpus, base)
  provenance = " ".join(filter(None, (_schedules(found), _commit_check(root, found))))
  page.lines += [provenance, ""] if provenance else []
  curves = {f"arm {arm} {label}": [r.path for r in found.get((arm, m), {}).values() if r.last_round]
            for arm in ARMS for m, label in METHODS}
  curves = {k: v for k, v in curves.items() if v}
  if ceiling is not None and ceiling.last_round:
    curves["FA, iid (ceiling)"] = [ceiling.path]
  if not curves:
    return
  page.figure("results_kws200_curves.png", lambda p: draw(p, curves, f"KWS (espeak), C = 1.0, 200 rounds, {page.stamp}"),
              f"Test accuracy per evaluation, Table 3's C = 1.0 cells at 200 rounds (mean over the seeds on "
              f"record, band min..max, a curve ending where its shortest run does; shaded: rounds 150–170 and the "
              f"window 180–200); {page.stamp}, "
              f"`{page.command}`.")


def draw(out_png: str, curves: Mapping[str, Sequence[str]], title: str) -> str:
  """One panel: each curve's test accuracy (%), mean over its runs with the min..max band."""
  fig, ax = plt.subplots(figsize=(7.5, 4.2))
  for k, (label, dirs) in enumerate(curves.items()):
    x, ys = plot.aligned([plot.read_metrics(d, need_ah=False) for d in dirs], "test_accuracy", scale=100.0)
    plot.mean_band(ax, x, ys, label, color=f"C{k % 10}", marker="o", markersize=3,
                   linestyle="--" if label.startswith("arm B") else ":" if "iid" in label else "-")
  for lo, hi in ((BEFORE[0], BEFORE[-1]), (WINDOW[0], WINDOW[-1])):
    ax.axvspan(lo, hi, color="0.85", zorder=0)
  ax.set(xlabel="round", ylabel="test accuracy (%)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  return plot.save(fig, out_png, title, dpi=110)
