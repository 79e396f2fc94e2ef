"""The results page's account of AH's keyword collapses, read round by round from the records.

For every finished run with AH among Table 3's (FA+AH, FA+RM+AH), each round whose sampled
client lr h_t is the top of the run's lr grid (``--ah_lr_grid``), and every round that sent a model
that had learned (L at most `LEARNED` below ln 10 before it) back to chance, whatever its lr
(`knockouts`): the round's update norm ‖Δ_t‖ against the run's median and against the median of
the rounds before it (the update-norm guard's ratio), the server loss L (``ah_loss``: the loss of
the aggregated model on AH's validation sample, measured after the round and before eq. 7 moves ψ
with it) before and after,
its range over every later round with the lr sampled there, and μ_lr (``ah_lr_mu``, after each
round's update) before, after and at the end. A run **collapsed** there when no later round brings
L more than `MARGIN` below ln 10, the loss of a uniform prediction over the ten keywords; else the
account says how many rounds L stayed at chance before it learned again.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from tff_robust import experiments as ex
from tff_robust.common import markdown
from tff_robust.common.round_rows import accepted_update_norms
from tff_robust.experiments import kws_study
from tff_robust.experiments.runs import flag_values

GUARD_WINDOW = 5  # --update_norm_guard_window's default, the window of docs/runs/guard_kws/plan.md
MARGIN = 0.05  # below ln 10: a later round that far under a uniform prediction has learned
LEARNED = 0.5  # below ln 10: L this far under a uniform prediction is a model that had learned


@dataclasses.dataclass(frozen=True)
class ReadRound:
  """One round the account reads (at the grid's top lr, or a model's death) and what followed it."""

  round: int
  lr: float  # h_t's client lr
  steps: int
  update: float  # ‖Δ_t‖ of the round
  median_update: float  # over the run's other rounds
  guard_reference: float | None  # the update-norm guard's: median ‖Δ‖ of the GUARD_WINDOW rounds before
  loss_before: float
  loss_after: float
  later_losses: tuple[float, ...]  # L after each later round
  later_lrs: tuple[float, ...]  # h_t's lr in each later round
  mu_before: float
  mu_after: float
  mu_end: float
  clients: int = 0  # the round's sampled clients
  nonfinite: int = 0  # of them, those whose update was non-finite (left out of the aggregate)

  @property
  def discarded(self) -> bool:
    """Every client's update was non-finite, so the round changed nothing (the model is kept)."""
    return self.clients > 0 and self.nonfinite >= self.clients

  @property
  def collapsed(self) -> bool:
    return bool(self.later_losses) and min(self.later_losses) >= math.log(10) - MARGIN

  @property
  def at_chance(self) -> int:
    """How many rounds from this one on L stays ≥ ln 10 − `MARGIN` (0: the round left it below)."""
    losses = (self.loss_after,) + self.later_losses
    return next((k for k, loss in enumerate(losses) if loss < math.log(10) - MARGIN), len(losses))

  def then(self) -> str:
    """What followed the round: collapsed, at chance for some rounds and learning again, or trained on."""
    if self.discarded:
      return f"no update: all {self.clients} clients non-finite"
    if self.collapsed:
      return "**collapsed**"
    if self.at_chance:
      return f"at chance {self.at_chance} round{'s' if self.at_chance > 1 else ''}, then learned again"
    return "trained on"

  @property
  def guard_ratio(self) -> str:
    """‖Δ_t‖ / `guard_reference`, as the guard would compare it in this unguarded run."""
    if self.discarded:
      return "no update"
    return "none before it" if self.guard_reference is None else f"{self.update / self.guard_reference:.1f}"


def _read_round(rows: Sequence[Mapping[str, float]], i: int) -> ReadRound:
  """Round ``rows[i]`` (``i`` ≥ 1) and what followed it."""
  row, later = rows[i], rows[i + 1:]
  others = accepted_update_norms(r for k, r in enumerate(rows) if k != i)
  # `simulation.guard.UpdateNormGuard`'s reference: in an unguarded run every round that updated
  # the model is accepted.
  window = accepted_update_norms(rows[:i])[-GUARD_WINDOW:]
  return ReadRound(int(row["round"]), row["client_lr"], int(row["local_steps"]), row["update_norm"],
                  statistics.median(others) if others else math.nan,
                  statistics.median(window) if window else None,
                  rows[i - 1]["ah_loss"], row["ah_loss"],
                  tuple(r["ah_loss"] for r in later), tuple(r["client_lr"] for r in later),
                  rows[i - 1]["ah_lr_mu"], row["ah_lr_mu"], rows[-1]["ah_lr_mu"],
                  int(row.get("num_clients", 0)), int(row.get("nonfinite_clients", 0)))


def _is_top(lr: float, top_lr: float) -> bool:
  """Whether a round's recorded lr is the grid's top (to 1e-3 relative: float32 in metrics.csv)."""
  return math.isclose(lr, top_lr, rel_tol=1e-3)


def _top_indices(rows: Sequence[Mapping[str, float]], top_lr: float) -> list[int]:
  return [i for i, row in enumerate(rows) if i > 0 and _is_top(row.get("client_lr", 0.0), top_lr)]


def top_rounds(rows: Sequence[Mapping[str, float]], top_lr: float) -> list[ReadRound]:
  """Every round of ``rows`` (`kws_study.read`) whose sampled lr is ``top_lr`` (to 1e-3 relative)."""
  return [_read_round(rows, i) for i in _top_indices(rows, top_lr)]


def knockouts(rows: Sequence[Mapping[str, float]]) -> list[int]:
  """The indices in ``rows`` of the rounds that sent a model that had learned back to chance: L
  before the round ≤ ln 10 − `LEARNED`, L after it ≥ ln 10 − `MARGIN`, at any lr. On one keyword
  per client L stays near ln 10 all run long, so there a round is read only at the top lr."""
  if not all("ah_loss" in r for r in rows):
    return []
  return [i for i in range(1, len(rows)) if rows[i - 1]["ah_loss"] <= math.log(10) - LEARNED
          and rows[i]["ah_loss"] >= math.log(10) - MARGIN]


def read_rounds(rows: Sequence[Mapping[str, float]], top_lr: float) -> list[ReadRound]:
  """The rounds the account reads: every round at ``top_lr`` and every `knockouts` round."""
  return [_read_round(rows, i) for i in sorted(set(_top_indices(rows, top_lr)) | set(knockouts(rows)))]


def _grid(run: ex.Run) -> tuple[float, float] | None:
  """(lowest, top) of the run's ``--ah_lr_grid``; None without one."""
  grid = flag_values(run.signature()).get("ah_lr_grid")
  values = [float(x) for x in grid.split(",")] if grid else []
  return (min(values), max(values)) if values else None


def collapsed(run: ex.Run) -> bool | None:
  """Whether the run collapsed by the criterion above (a round at its grid's top lr after which no
  round brings L more than `MARGIN` below ln 10); None for a run without an AH lr grid."""
  grid = _grid(run)
  if grid is None:
    return None
  return any(t.collapsed for t in top_rounds(kws_study.read(run.output_dir), grid[1]))


def _row(label: str, seed: int, t: ReadRound, final: float, then: str) -> list[str]:
  later = (f"{min(t.later_losses):.3f}–{max(t.later_losses):.3f} over {len(t.later_losses)} rounds at lr "
           f"{min(t.later_lrs):g}–{max(t.later_lrs):g}") if t.later_losses else "none"
  return [label, str(seed), f"{t.round}", f"{t.lr:g}", f"{t.steps}",
          "none" if t.discarded else f"{t.update:.2f} ({t.update / t.median_update:.0f}×)", t.guard_ratio,
          f"{t.loss_before:.3f} → {t.loss_after:.3f}", later,
          f"{t.mu_before:.4f} → {t.mu_after:.4f} → {t.mu_end:.4f}", f"{final:.1f}", then]


def _span(values: Sequence[float], spec: str) -> str:
  """``lo–hi`` of ``values`` in format ``spec``; one value when they are all the same."""
  lo, hi = format(min(values), spec), format(max(values), spec)
  return lo if lo == hi else f"{lo}–{hi}"


HEADER = ["method", "seed", "round", "client lr", "steps", "‖Δ_t‖ (× the run's median)",
          f"‖Δ_t‖ / median of the {GUARD_WINDOW} rounds before (the guard's ratio)",
          "L before → after", "L in every later round", "μ_lr before → after → end", "final test acc. (%)",
          "then"]


def section(page, runs: Sequence[ex.Run], labels: Mapping[str, str]) -> None:
  """The paragraph and table (``page``: a `results.Page`; ``runs``: Table 3's; ``labels``: method
  key -> label) for the runs with AH that sampled their grid's top lr or were knocked back to
  chance at another; nothing if none was."""
  # floor: runs that did not collapse, μ_lr ending at the grid's floor; below: knock-outs below the top
  body, collapsed, floor, below, discarded = [], [], [], [], []
  tops = set()
  for run in sorted(runs, key=lambda r: (r.cell.row, r.cell.column, r.seed)):
    grid = _grid(run) if "ah" in run.cell.column.split("_") and run.status() == ex.DONE else None
    if grid is None:
      continue
    label = labels.get(run.cell.column, run.cell.column) + (" (iid)" if run.cell.row.endswith("_iid") else "")
    final, died = ex.read_values(run, ex.ACCURACY)[0], None
    for t in read_rounds(kws_study.read(run.output_dir), grid[1]):
      at_top = _is_top(t.lr, grid[1])
      tops.add(grid[1])
      then = f"dead since round {died.round}" if died is not None else t.then()
      if died is None and t.collapsed:
        died = t
        collapsed.append(t)
      if not at_top and (died is None or died is t):
        below.append(f"{label} seed {run.seed} (round {t.round}, lr {t.lr:g} × {t.steps} steps, ‖Δ_t‖ "
                     f"{t.guard_ratio}× the median of the {GUARD_WINDOW} rounds before it, L "
                     f"{t.loss_before:.2f} → {t.loss_after:.2f}: {then.strip('*')}; grid top {grid[1]:g})")
      if t.discarded:
        discarded.append(f"{label} seed {run.seed} (round {t.round}, lr {t.lr:g} × {t.steps} steps, "
                         f"all {t.clients} clients)")
      elif at_top and not t.collapsed and t.mu_end <= 1.2 * grid[0]:
        floor.append(f"{label} seed {run.seed} (μ_lr {t.mu_end:.4f} at its end, {final:.1f} % test)")
      body.append(_row(label, run.seed, t, final, then))
  if not body:
    return
  text = ("**AH's collapses, round by round.** Every round in which AH sampled its grid's top client lr "
          f"({', '.join(f'{x:g}' for x in sorted(tops))}), and any round at another lr that sent a model "
          f"that had learned (L at most ln 10 − {LEARNED} before it) back to chance "
          f"(L at least ln 10 − {MARGIN} after it), from the runs' metrics.csv: L is the server loss "
          "of the aggregated model on AH's validation sample, measured after the round and before eq. 7 "
          f"moves μ with it (ln 10 = {math.log(10):.3f}: a uniform prediction); μ_lr is read after each "
          f"round's update. A run is marked collapsed when no later round brings L more than {MARGIN} "
          "below ln 10.")
  if below:
    text += f" Below the grid's top: {'; '.join(below)}."
  if collapsed:
    rounds = [len(t.later_losses) for t in collapsed]
    text += (f" In {'each of the ' + str(len(collapsed)) + ' collapses' if len(collapsed) > 1 else 'the collapse'} "
             f"the model died in that one round: L is {_span([t.loss_after for t in collapsed], '.2f')} when it "
             f"is measured, before μ_lr moves, and stays within {MARGIN} of ln 10 or above it for the "
             f"{_span(rounds, 'd')} rounds that follow, at every lr sampled there: μ_lr's fall is eq. 7's answer "
             "to that round, not its cause.")
    if floor:
      text += (f" After the same sample {' and '.join(floor)} did not collapse, and μ_lr ended at the grid's "
               "floor.")
  if discarded:
    text += (f" No update at all: {'; '.join(discarded)}, every sampled client's update non-finite, so "
             "the round left the model as it was (non-finite updates never reach it).")
  page.lines += [text, ""] + markdown.table(HEADER, body) + [""]
