"""Synchronous successive halving (SHA) over global hyper-parameter arms.

Seed 002 adapts SHA (Li et al.) to federated tuning of the *global*
hyper-parameters and wraps FedEx in it. With n arms, elimination rate eta and
minimum budget r rounds, rung s = 0, 1, ... holds

  n_s = max(1, floor(n / eta^s)) arms, each trained to a cumulative budget r eta^s rounds,

and the best 1/eta of a rung (lowest validation loss, ``promote``) go on to the
next. The schedule ends with the first rung that has one arm, or with the last
rung whose budget does not exceed the maximum budget R (then the winner is the
best arm of that rung). Everything here is plain Python.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Rung:
  """Rung ``index`` of SHA: ``num_arms`` arms, each trained to ``budget_rounds`` rounds in total."""

  index: int
  num_arms: int
  budget_rounds: int


def _is_int(x) -> bool:
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def validate(num_arms: int, eta: int, min_rounds: int, max_rounds: Optional[int] = None) -> None:
  """Raises ``ValueError`` naming the flag on bad SHA settings."""
  if not _is_int(num_arms) or num_arms < 1:
    raise ValueError(f'--sha_arms must be an integer >= 1, got {num_arms!r}')
  if not _is_int(eta) or eta < 2:
    raise ValueError(f'--sha_eta must be an integer >= 2, got {eta!r}')
  if not _is_int(min_rounds) or min_rounds < 1:
    raise ValueError(f'--sha_min_rounds must be an integer >= 1, got {min_rounds!r}')
  if max_rounds is not None and (not _is_int(max_rounds) or max_rounds < min_rounds):
    raise ValueError(
        f'--sha_max_rounds must be an integer >= --sha_min_rounds={min_rounds} (or unset), '
        f'got {max_rounds!r}')


def sha_schedule(num_arms: int, eta: int, min_rounds: int,
                 max_rounds: Optional[int] = None) -> list[Rung]:
  """The rungs of synchronous SHA: n_s = max(1, floor(n / eta^s)), budget r eta^s.

  Stops after the first rung with a single arm, or before the first rung whose
  budget would exceed ``max_rounds`` (R).
  """
  validate(num_arms, eta, min_rounds, max_rounds)
  rungs = []
  s = 0
  while True:
    arms = max(1, num_arms // eta**s)
    budget = min_rounds * eta**s
    if max_rounds is not None and budget > max_rounds:
      break
    rungs.append(Rung(index=s, num_arms=arms, budget_rounds=budget))
    if arms == 1:
      break
    s += 1
  return rungs


def rounds_this_rung(schedule: list[Rung], index: int) -> int:
  """Rounds each surviving arm trains in rung ``index``: budget_s - budget_{s-1}."""
  if not 0 <= index < len(schedule):
    raise ValueError(f'rung index must be in [0, {len(schedule)}), got {index}')
  prev = schedule[index - 1].budget_rounds if index > 0 else 0
  return schedule[index].budget_rounds - prev


def total_rounds(schedule: list[Rung]) -> int:
  """Training rounds the whole schedule costs: sum_s n_s (budget_s - budget_{s-1})."""
  return sum(r.num_arms * rounds_this_rung(schedule, r.index) for r in schedule)


def _sort_key(item: tuple[str, float]) -> tuple[int, float, str]:
  name, loss = item
  loss = float(loss)
  # Non-finite losses (diverged arms) rank last; ties break by name.
  return (0, loss, name) if math.isfinite(loss) else (1, 0.0, name)


def promote(scores: Mapping[str, float], keep: int) -> list[str]:
  """The ``keep`` arms with the lowest validation loss, best first.

  Ties are broken by arm name (ascending); NaN/inf losses rank last. If fewer
  than ``keep`` arms are scored, all of them are returned.
  """
  if not _is_int(keep) or keep < 1:
    raise ValueError(f'keep must be an integer >= 1, got {keep!r}')
  ranked = sorted(scores.items(), key=_sort_key)
  return [name for name, _ in ranked[:keep]]
