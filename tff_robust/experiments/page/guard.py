"""The results page's account of the update-norm guard against AH's keyword collapses (issue 49),
judged by the plan and rule committed before any run (``ROOT/guard_kws/plan.md``, `PLAN`), which
the section quotes before any number.

The pairs (plan.md, *Runs*): FA+RM+AH on Table 3's C = 1.0 rows (`ROWS`), 30 rounds, the page's
corpus, with ``--update_norm_guard=25`` (`GUARD_FLAGS`) and without. Seeds 0-1: the guarded arm
in ``ROOT/guard_kws/`` (`FOLDER`), the unguarded arm the committed Table 3 runs at the top of ROOT;
seed 2: both arms new, in `SEED2_GUARDED` and `SEED2_UNGUARDED` (their runs of other seeds are not
read). Each run is read by the runner's state (`runs.Run.status`) and its final test accuracy by
the runner's `read_values`; a run is collapsed by the page's criterion (`collapses.collapsed`);
the guard's rejected rounds are the rounds its metrics.csv marks ``rejected_round``. Until its first
rejection a guarded run is its unguarded pair's computation, so each pair shows through which round
the two records agree in every training column (`identical_through`): a pair whose arms part before
any rejection differs for another reason than the guard (its verdict line says so).

The rule (`collapse_verdict`, `cost_pairs`): the guard **prevents** the collapses if neither
guarded seed-0 run collapses and each ends ≥ `GAIN` points above its unguarded pair, **does not**
if either collapses, **partly** otherwise; its cost, guarded − unguarded on the seed-1 and seed-2
pairs where neither run collapsed, is judged by the page's rule (`verdicts.judge`) with ≥ 2 such
pairs, else each difference is listed and nothing judged. Runs not on record are pending; a run
folder the runner does not count done shows as running with its last round.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Sequence

from tff_robust import experiments as ex
from tff_robust.common import markdown
from tff_robust.common.paired import FAILED, HELD, NOISE
from tff_robust.experiments.page import collapses, commits
from tff_robust.experiments.page.verdicts import Judged, judge
from tff_robust.experiments.page.plan import committed_lines

FOLDER = "guard_kws"  # under the page's runs root: the plan and the guarded arm of seeds 0-1
PLAN = os.path.join(FOLDER, "plan.md")
SEED2_GUARDED = os.path.join(FOLDER, "seed2_guarded")  # seed 2's guarded arm (plan.md: both arms new)
SEED2_UNGUARDED = os.path.join(FOLDER, "seed2_unguarded")  # seed 2's unguarded arm
GUARD_FLAGS = ("--update_norm_guard=25",)  # F = 25, window 5 (the flag's default): plan.md
ROWS = (("c1.0_noniid", "one keyword per client"), ("c1.0_iid", "iid"))
METHOD = ("fa_rm_ah", "FA+RM+AH")
SEEDS = (0, 1, 2)
HORIZON = 30  # rounds (plan.md: the Table 3 runs' horizon)
GAIN = 10.0  # points of test accuracy a guarded seed-0 run must gain for "prevents" (plan.md)
PREVENTS, DOES_NOT, PARTLY = "prevents", "does not", "partly"
VERDICT_WORDS = {PREVENTS: f"neither guarded run collapsed and each gained at least {GAIN:g} points",
                 DOES_NOT: "a guarded seed-0 run collapsed", PARTLY: f"no collapse, a gain under {GAIN:g} points"}
DONE, RUNNING, PENDING, OTHER_FLAGS = "done", "running", "pending", "made with other flags"
# The per-round training columns compared between a pair's records: AH's sample, the clients' loss, ‖Δ_t‖.
TRAINING = ("client_lr", "local_steps", "train_loss", "update_norm")
MACHINE_CHECK = os.path.join(FOLDER, "machine_check", "README.md")  # why a pair's arms may part early


@dataclasses.dataclass(frozen=True)
class Arm:
  """One run of a pair as its records stand."""

  path: str
  state: str  # DONE, RUNNING, PENDING or OTHER_FLAGS
  accuracy: float | None = None  # final test accuracy (%), once done
  collapsed: bool | None = None  # the page's criterion, once done
  last_round: int = 0  # the last round in metrics.csv
  rejected: tuple[int, ...] = ()  # rounds metrics.csv marks rejected_round

  def cell(self) -> str:
    """``13.1``, ``running: round 17``, ``pending`` or ``made with other flags``."""
    if self.state == DONE:
      return f"{self.accuracy:.1f}"
    return f"running: round {self.last_round}" if self.state == RUNNING else self.state


@dataclasses.dataclass(frozen=True)
class Pair:
  """One row x seed: the guarded and the unguarded run."""

  row: str
  seed: int
  guarded: Arm
  unguarded: Arm

  @property
  def difference(self) -> float | None:
    """Guarded − unguarded final test accuracy (points), once both are done."""
    g, u = self.guarded, self.unguarded
    return g.accuracy - u.accuracy if g.state == DONE and u.state == DONE else None

  @property
  def identical_through(self) -> int | None:
    """The last round through which both records agree in every `TRAINING` column they share (0: they
    differ from round 1); None until both runs are done (or without their metrics.csv)."""
    if self.difference is None:
      return None
    g, u = _training_rows(self.guarded.path), _training_rows(self.unguarded.path)
    if not g or not u:
      return None
    shared = [c for c in TRAINING if c in g[0] and c in u[0]]
    same = 0
    for a, b in zip(g, u):
      if any(a[c] != b[c] for c in shared):
        break
      same += 1
    return same

  @property
  def parts_before_the_guard(self) -> bool:
    """Whether the arms differ before the guard's first rejection (or, with none, at all): a
    difference that is not the guard's."""
    k = self.identical_through
    if k is None:
      return False
    first = self.guarded.rejected[0] if self.guarded.rejected else self.guarded.last_round
    return k < first

  @property
  def collapse_free(self) -> bool:
    """Both runs done and neither collapsed: a pair the cost is judged on."""
    return self.difference is not None and self.guarded.collapsed is False and self.unguarded.collapsed is False


def table() -> ex.Table:
  """``rmah_table3`` restricted to FA+RM+AH on `ROWS`: the plan's ``--rows``, ``--methods``."""
  return ex.select(ex.build_table("rmah_table3"), [METHOD[1]], [r for r, _ in ROWS])


def runs(root: str, corpus: str) -> dict[tuple[str, int], tuple[ex.Run, ex.Run]]:
  """(row, seed) -> (guarded, unguarded) run as the runner plans them (plan.md's commands): seeds 0-1
  guarded in `FOLDER`, unguarded at the top of ``root`` (Table 3's); seed 2 in its two folders."""
  plain = ex.Overrides(rounds=HORIZON, data_dir=corpus)
  guarded = ex.Overrides(rounds=HORIZON, data_dir=corpus, extra_flags=GUARD_FLAGS)
  where = {0: ((FOLDER, guarded), ("", plain)), 1: ((FOLDER, guarded), ("", plain)),
           2: ((SEED2_GUARDED, guarded), (SEED2_UNGUARDED, plain))}

  def one(row: str, seed: int, folder: str, over: ex.Overrides) -> ex.Run:
    planned = ex.plan(table(), seed + 1, os.path.join(root, folder), over)
    return next(r for r in planned if r.cell.row == row and r.seed == seed)

  return {(row, s): tuple(one(row, s, *arm) for arm in where[s]) for row, _ in ROWS for s in SEEDS}


def _training_rows(path: str) -> list[dict[str, str]]:
  """A run's metrics.csv rows in round order, as text (empty without one)."""
  if not os.path.isfile(os.path.join(path, "metrics.csv")):
    return []
  with open(os.path.join(path, "metrics.csv"), newline="") as f:
    return sorted((r for r in csv.DictReader(f) if r.get("round")), key=lambda r: float(r["round"]))


def _metrics(path: str) -> tuple[int, tuple[int, ...]]:
  """The last round of a run's metrics.csv and the rounds it marks rejected ((0, ()) without one)."""
  rows = _training_rows(path)
  rejected = tuple(int(float(r["round"])) for r in rows if float(r.get("rejected_round") or 0) > 0)
  return max((int(float(r["round"])) for r in rows), default=0), rejected


def read(run: ex.Run) -> Arm:
  """The run's `Arm`: by the runner's state; accuracy by `read_values`, collapse by `collapses.collapsed`."""
  status = run.status()
  last, rejected = _metrics(run.output_dir)
  if status == ex.CONFLICT:
    return Arm(run.output_dir, OTHER_FLAGS, last_round=last, rejected=rejected)
  if status == ex.DONE:
    return Arm(run.output_dir, DONE, ex.read_values(run, ex.ACCURACY)[0], collapses.collapsed(run), last, rejected)
  return Arm(run.output_dir, RUNNING if last else PENDING, last_round=last, rejected=rejected)


def gather(root: str, corpus: str) -> list[Pair]:
  """Every pair of the plan, in the page's order (rows, then seeds)."""
  return [Pair(row, s, read(g), read(u)) for (row, s), (g, u) in runs(root, corpus).items()]


def collapse_verdict(pairs: Sequence[Pair]) -> str | None:
  """The rule on the seed-0 pairs: `DOES_NOT` once either guarded run collapsed; `PREVENTS` when
  both pairs are in, neither guarded run collapsed and each gained ≥ `GAIN`; `PARTLY` when both are
  in without a collapse and a gain is under `GAIN`; None while a seed-0 run is not done."""
  seed0 = [p for p in pairs if p.seed == 0]
  if any(p.guarded.state == DONE and p.guarded.collapsed for p in seed0):
    return DOES_NOT
  if len(seed0) < len(ROWS) or any(p.difference is None for p in seed0):
    return None
  return PREVENTS if all(p.difference >= GAIN for p in seed0) else PARTLY


def cost_pairs(pairs: Sequence[Pair]) -> list[Pair]:
  """The pairs the cost is read on: seeds 1 and 2, both runs done, neither collapsed."""
  return [p for p in pairs if p.seed != 0 and p.collapse_free]


def cost(pairs: Sequence[Pair]) -> Judged | None:
  """Guarded − unguarded over `cost_pairs` (each row x seed a pair), judged by the page's rule on the
  claim "guarded − unguarded > 0"; None with fewer than 2 such pairs (the plan: nothing judged)."""
  found = cost_pairs(pairs)
  if len(found) < 2:
    return None
  return judge({i: p.guarded.accuracy for i, p in enumerate(found)},
               {i: p.unguarded.accuracy for i, p in enumerate(found)}, names=("guarded", "unguarded"))


# ---- the section --------------------------------------------------------------------------


def _plan_lines(root: str) -> list[str]:
  """The plan's *Rule* as a quotation with a link to the whole plan (from ROOT, else the committed copy)."""
  text = committed_lines(root, PLAN)
  if text is None:
    return [f"The plan (`{PLAN}`) is not in this checkout.", ""]
  start = next((i + 1 for i, line in enumerate(text) if line.strip() == "## Rule"), len(text))
  end = next((i for i in range(start, len(text)) if text[i].startswith("## ")), len(text))
  rule = text[start:end]
  while rule and not rule[0].strip():
    rule.pop(0)
  return [f"**The plan**, committed before any run of the guard ([runs/{PLAN}](runs/{PLAN}): F = 25 chosen "
          "there from the Table 3 runs' update norms, training quantities only), and its rule, quoted:", ""] + [
      f"> {line}".rstrip() for line in rule] + [""]


def _rejected(arm: Arm) -> str:
  """The rounds the guard rejected: ``none``, ``4, 13``, ``… so far`` while running; ``no record``
  without one (every cell of the page's tables holds a word or a number)."""
  if arm.state not in (DONE, RUNNING):
    return "no record"
  text = ", ".join(map(str, arm.rejected)) if arm.rejected else "none"
  return text + (" so far" if arm.state == RUNNING else "")


def _collapsed(arm: Arm) -> str:
  """``**yes**``/``no`` once the run is done; ``not yet`` while it runs; ``no record`` without one."""
  if arm.state != DONE:
    return "not yet" if arm.state == RUNNING else "no record"
  return "no AH grid" if arm.collapsed is None else "**yes**" if arm.collapsed else "no"


def stopped_training(arm: Arm) -> bool:
  """Whether the guard rejected every round from its first rejection to the run's end (≥ 2 rounds):
  the plan's warning, a collapse "prevented" by not training."""
  r = arm.rejected
  return len(r) >= 2 and r == tuple(range(r[0], arm.last_round + 1))


HEADER = ["clients", "seed", "guarded: test acc. (%)", "collapsed", "rejected rounds",
          "unguarded: test acc. (%)", "collapsed", "records identical through round", "guarded − unguarded (points)"]


def _identical(p: Pair) -> str:
  """``4``, ``none`` (they differ from round 1), ``30 (all)``, or ``not yet``."""
  k = p.identical_through
  if k is None:
    return "not yet"
  return "none" if k == 0 else f"{k} (all)" if k == p.guarded.last_round == p.unguarded.last_round else str(k)


def pair_table(pairs: Sequence[Pair]) -> list[str]:
  """One line per row x seed: each arm's final test accuracy and collapse, the guard's rejected rounds."""
  labels = dict(ROWS)
  body = [[labels[p.row], str(p.seed), p.guarded.cell(), _collapsed(p.guarded), _rejected(p.guarded),
           p.unguarded.cell(), _collapsed(p.unguarded), _identical(p),
           "not yet" if p.difference is None else f"{p.difference:+.1f}"] for p in pairs]
  return markdown.table(HEADER, body) + [""]


def _pair_words(p: Pair) -> str:
  g, u = p.guarded, p.unguarded
  if g.state != DONE:
    return f"{dict(ROWS)[p.row]}: guarded {g.cell()}"
  words = (f"{dict(ROWS)[p.row]}: guarded {g.accuracy:.1f} % ({'collapsed' if g.collapsed else 'no collapse'}, "
           f"rejected rounds {_rejected(g)}" + (", every round from its first rejection on" if stopped_training(g)
                                                else "") + ")")
  return words + (f" vs {u.accuracy:.1f} % unguarded, {p.difference:+.1f}" if p.difference is not None else "")


def verdict_lines(pairs: Sequence[Pair], root: str | None = None) -> list[str]:
  """The rule's two verdicts: the collapses (seed 0), a seed-0 pair that parts before the guard acts,
  and the cost where nothing collapsed (``root``: the runs root, for the machine check's link)."""
  seed0 = [p for p in pairs if p.seed == 0]
  v = collapse_verdict(pairs)
  head = (f"**The collapses (seed 0): {v}** ({VERDICT_WORDS[v]})" if v else
          f"**The collapses (seed 0): not judged yet** ({sum(p.guarded.state == DONE for p in seed0)} of "
          f"{len(seed0)} guarded seed-0 runs done)")
  lines = [head + " — " + "; ".join(_pair_words(p) for p in seed0) + ".", ""]
  early = [p for p in pairs if p.parts_before_the_guard]
  if early:
    link = (f" ([why the records part](runs/{MACHINE_CHECK}))"
            if root and os.path.isfile(os.path.join(root, MACHINE_CHECK)) else "")
    text = "Not the guard's: " + "; ".join(
        f"in the {dict(ROWS)[p.row]} seed-{p.seed} pair the records differ from round {p.identical_through + 1}, "
        + (f"before the guard's first rejection (round {p.guarded.rejected[0]})" if p.guarded.rejected
           else "and the guard rejected no round")
        for p in early) + (", so such a pair's difference, and whether its guarded run met a collapse at all, is "
                           f"not the guard's doing{link}.")
    if any(p.seed == 0 for p in early):
      acting = [dict(ROWS)[p.row] for p in seed0
                if p.difference is not None and p.guarded.rejected and not p.parts_before_the_guard]
      text += (" The rule's verdict above is given as the plan wrote it; of its seed-0 pairs, the guard acted in "
               + (" and ".join(f"the {a} pair" for a in acting) + " only." if acting else "none."))
    lines += [text, ""]
  found, judged = cost_pairs(pairs), cost(pairs)
  if judged is not None:
    gloss = {HELD: "the guarded runs end higher", FAILED: "the guard costs accuracy there",
             NOISE: "no cost or gain beyond one SE"}.get(judged.verdict, "")
    which = ", ".join(f"{dict(ROWS)[p.row]} seed {p.seed}" for p in found)
    lines.append(f"**Its cost where nothing collapsed: {judged.text(digits=1)}** ({gloss}) — guarded − unguarded "
                 f"over {len(found)} pairs ({which}), the claim \"guarded − unguarded > 0\" judged by the page's rule.")
  elif found:
    lines.append("**Its cost where nothing collapsed: not judged** (fewer than 2 such pairs; the plan lists each): "
                 + "; ".join(f"{dict(ROWS)[p.row]} seed {p.seed} {p.difference:+.1f}" for p in found) + ".")
  else:
    lines.append("**Its cost where nothing collapsed: not judged** — no seed-1 or seed-2 pair has both runs done "
                 "without a collapse yet.")
  left_out = [p for p in pairs if p.seed != 0 and p.difference is not None and not p.collapse_free]
  if left_out:
    lines.append("Left out of the cost (a run collapsed): " + "; ".join(_pair_words(p) for p in left_out) + ".")
  return lines + [""]


def _pending_lines(pairs: Sequence[Pair], root: str) -> list[str]:
  """Which runs are not done: running (their last round), not on record, made with other flags."""
  arms = [a for p in pairs for a in (p.guarded, p.unguarded)]
  lines = []
  for state, words in ((PENDING, "not on record yet"), (RUNNING, "running (not finished)"),
                       (OTHER_FLAGS, "made with other flags than the plan's (not read)")):
    dirs = sorted(a.path for a in arms if a.state == state)
    if dirs:
      lines.append(f"- {words}: {commits.folded(dirs, root)}")
  if not lines:
    return []
  return (["**Runs pending** (the plan's commands make them; the page reads them once their records are "
           f"committed under `{FOLDER}/`, seed 2's arms in `{SEED2_GUARDED}/` and `{SEED2_UNGUARDED}/`):", ""]
          + [line + "." for line in lines] + [""])


def section(page, root: str, corpus: str) -> None:
  """The subsection (``page``: a `results.Page`; ``root``, ``corpus``: the page's runs root and keyword
  corpus): the plan's rule first, then the pairs, the verdicts and what is pending."""
  page.lines += ["### The update-norm guard against AH's collapses", "",
                 "Issue 49: an optional guard (`--update_norm_guard=F`, `simulation/guard.py`) rejects a round whose "
                 "aggregated update ‖Δ_t‖ exceeds F × the median of the last 5 accepted rounds' norms, keeps the "
                 "previous model and lets the round counter and AH's policy move on. FA+RM+AH on both C = 1.0 rows, "
                 f"{HORIZON} rounds, with the guard (F = 25) and without, on the same seed.", ""]
  page.lines += _plan_lines(root)
  pairs = gather(root, corpus)
  page.lines += ["Final test accuracy (%) of each pair; collapsed by the criterion of the account above (no round "
                 f"after the top-lr round brings L more than {collapses.MARGIN} below ln 10); the guarded run's "
                 "rejected rounds from its metrics.csv. Seeds 0–1's unguarded runs are Table 3's; seed 2's "
                 f"arms are both new (`{SEED2_GUARDED}/`, `{SEED2_UNGUARDED}/`).", ""]
  page.lines += pair_table(pairs)
  page.lines += verdict_lines(pairs, root)
  page.lines += _pending_lines(pairs, root)
