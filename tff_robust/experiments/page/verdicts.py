"""The results page's verdicts: every claim "A beats B" is judged on the paired difference.

The rule (the page states it too). A claim reads "A − B > t", t its margin: 0 for "A beats B"
and "A ≥ B", −1 for "A ≥ B − 1". It is judged on the seeds both A and B have: d is the mean of
the per-seed differences A_s − B_s and SE = sd(A_s − B_s) / √n their standard error:

- **held** when d − t > SE (the difference clears its margin by more than one SE);
- **did not hold** when t − d > SE (it falls short of its margin by more than one SE);
- **within noise** otherwise (|d − t| ≤ SE).

With fewer than 2 paired seeds there is no SE, and the verdict says so. A claim made of several
parts ("the best of all", "within one point either way") held when every part held, did not hold
when any part did not, and is within noise otherwise; the part that decides is the one shown.

One SE is a loose bar: with three seeds a difference of one SE is far from significant at any
conventional level, so "held" means "the mean difference clears its margin by more than its SE"
and no more. Pure Python: the page's tests check it on constructed numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tff_robust.common.paired import FAILED, HELD, NOISE, TOO_FEW, paired_difference, verdict

# The rule itself (`verdict` and its words) lives in common.paired, where the studies reach it too.
_RANK = {FAILED: 0, TOO_FEW: 1, NOISE: 2, HELD: 3}  # a claim of parts is as good as its worst


@dataclasses.dataclass(frozen=True)
class Judged:
  """One difference A − B judged against its margin."""

  a: str
  b: str
  n: int  # paired seeds
  mean: float  # d: mean of the per-seed differences
  se: float  # sd of the per-seed differences / √n (NaN below 2 seeds)
  margin: float
  verdict: str

  def text(self, label_b: bool = False, digits: int = 2) -> str:
    """``+0.81 ± 0.35: held`` (``vs B`` first when asked; the margin when it is not 0)."""
    head = f"vs {self.b} " if label_b else ""
    if self.n == 0:
      return f"{head}no paired seeds"
    if self.n > 1 and round(abs(self.mean - self.margin), digits) == round(self.se, digits):
      digits += 1  # a lead and an SE that print alike would hide which is larger
    se = f" ± {self.se:.{digits}f}" if self.n > 1 else ""
    margin = f" (margin {self.margin:+g})" if self.margin else ""
    return f"{head}{self.mean:+.{digits}f}{se}{margin}: {self.verdict}"


def judge(a: Mapping[int, float], b: Mapping[int, float], margin: float = 0.0,
          names: tuple[str, str] = ("A", "B")) -> Judged:
  """The claim "A − B > margin" on the seed-matched values ``a``, ``b`` (seed -> value)."""
  seeds = sorted(set(a) & set(b))
  mean, se = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
  n = len(seeds)
  return Judged(names[0], names[1], n, mean, se, margin, verdict(mean, se, n, margin))


def all_of(parts: Sequence[Judged]) -> Judged:
  """The deciding part of a claim made of ``parts``: the worst verdict, then the smallest lead
  over its margin (in SEs)."""
  def key(j: Judged) -> tuple[int, float]:
    lead = j.mean - j.margin
    if j.se > 0:  # False for NaN
      lead /= j.se
    return _RANK[j.verdict], lead if lead == lead else 0.0
  return min(parts, key=key)


# ---- claims over the methods of a table --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Claim:
  """A sentence and its parts: each ``(a, b, margin)`` reads "a − b > margin" (``b = "*"``: every
  other method of the table); ``rows``: the rows it is about (None: every row)."""

  sentence: str
  parts: tuple[tuple[str, str, float], ...]
  rows: tuple[str, ...] | None = None

  def pairs(self, methods: Sequence[str]) -> list[tuple[str, str, float]]:
    """Each part as (a, b, margin), "*" spelled out over ``methods`` (the table's)."""
    return [(a, other, margin) for a, b, margin in self.parts
            for other in ([m for m in methods if m != a] if b == "*" else [b])]

  def judge(self, by_seed: Mapping[str, Mapping[int, float]], labels: Mapping[str, str]) -> Judged | str:
    """The deciding part on one row (method -> seed -> value; ``labels``: every method of the
    table, key -> label), or which methods it needs have no finished runs."""
    pairs = self.pairs(list(labels))
    missing = [labels.get(m, m) for m in dict.fromkeys(m for a, b, _ in pairs for m in (a, b)) if not by_seed.get(m)]
    if missing:
      return f"no runs of {', '.join(missing)}"
    return all_of([judge(by_seed[a], by_seed[b], margin, (labels.get(a, a), labels.get(b, b)))
                   for a, b, margin in pairs])

  @property
  def several(self) -> bool:
    return len(self.parts) > 1 or any(b == "*" for _, b, _ in self.parts)


def claims_table(claims: Sequence[Claim], by_seed: Mapping[tuple[str, str], Mapping[int, float]],
                 rows: Sequence[tuple[str, str]], labels: Mapping[str, str]
                 ) -> tuple[list[str], list[list[str]], list[tuple[str, str, Judged]]]:
  """Header and body of the page's table of claims (one column per row ``(key, label)``; ``labels``:
  every method of the table), and every verdict as (claim, row key, judged)."""
  header = ["claim (difference judged)"] + [label for _, label in rows]
  body, found = [], []
  for claim in claims:
    line = [claim.sentence]
    for key, _ in rows:
      if claim.rows is not None and key not in claim.rows:
        line.append("not claimed")
        continue
      judged = claim.judge({col: v for (r, col), v in by_seed.items() if r == key}, labels)
      if isinstance(judged, str):
        line.append(judged)
      else:
        line.append(judged.text(label_b=claim.several))
        found.append((claim.sentence, key, judged))
    body.append(line)
  return header, body, found


def grouped(verdicts: Mapping[str, str]) -> str:
  """``held in A, B; within noise in C``: the rows (keys) of each verdict, best verdict first."""
  by: dict[str, list[str]] = {}
  for row, v in verdicts.items():
    by.setdefault(v, []).append(row)
  return "; ".join(f"{v} in {', '.join(rows)}" for v, rows in sorted(by.items(), key=lambda kv: -_RANK[kv[0]]))


# What the page prints under "How a verdict is read" (the rule of `verdict`, in the page's words).
RULE = (
    "Every claim that one method beats another (\"A beats B\", \"A ≥ B\", \"A ≥ B − 1\") is read as "
    "\"A − B > t\", t its margin (0, or −1 for \"A ≥ B − 1\"), and judged on the **paired** "
    "difference: d, the mean over seeds of A − B on the same seed (same data, same clients), and "
    "its standard error SE = sd(A − B over seeds) / √n. The page prints d ± SE and **held** when "
    "d − t > SE (the difference clears its margin by more than one SE), **did not hold** when "
    "t − d > SE (it falls short by more than one SE), **within noise** otherwise; with fewer than "
    "2 paired seeds it says so instead of a verdict. A claim made of several parts (\"the best of "
    "all\", \"within one point either way\") held when every part held and did not hold when any "
    "did not; the part that decides is shown. One SE is a loose bar: with three seeds, \"held\" "
    "says the mean difference clears its margin by more than its standard error, not that it is "
    "significant.")
