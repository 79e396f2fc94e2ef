"""Tests for tff_robust.tuning.sha: synchronous successive halving (seed 002's SHA baseline)."""

from __future__ import annotations

import math

import pytest

from tff_robust.tuning import sha
from tff_robust.tuning.sha import Rung


def _by_definition(n, eta, r, big_r=None):
  """n_s = max(1, floor(n / eta^s)), budget r eta^s, until one arm or budget > R."""
  out = []
  for s in range(64):
    arms, budget = max(1, math.floor(n / eta**s)), r * eta**s
    if big_r is not None and budget > big_r:
      break
    out.append((s, arms, budget))
    if arms == 1:
      break
  return out


@pytest.mark.parametrize('n,eta,r,big_r,expected', [
    (27, 3, 1, None, [(0, 27, 1), (1, 9, 3), (2, 3, 9), (3, 1, 27)]),
    (16, 2, 2, None, [(0, 16, 2), (1, 8, 4), (2, 4, 8), (3, 2, 16), (4, 1, 32)]),
    (10, 3, 5, None, [(0, 10, 5), (1, 3, 15), (2, 1, 45)]),
    (27, 3, 1, 10, [(0, 27, 1), (1, 9, 3), (2, 3, 9)]),  # capped by R: 3 arms left
    (2, 4, 3, None, [(0, 2, 3), (1, 1, 12)]),  # floor(2/4) = 0 -> one arm
    (1, 2, 4, None, [(0, 1, 4)]),
    (9, 3, 1, 1, [(0, 9, 1)]),
])
def test_schedule_matches_definition(n, eta, r, big_r, expected):
  got = sha.sha_schedule(n, eta, r, big_r)
  assert [(g.index, g.num_arms, g.budget_rounds) for g in got] == expected
  assert expected == _by_definition(n, eta, r, big_r)
  assert all(isinstance(g, Rung) for g in got)


def test_rounds_per_rung_and_total():
  sched = sha.sha_schedule(27, 3, 1)
  assert [sha.rounds_this_rung(sched, i) for i in range(4)] == [1, 2, 6, 18]
  assert sha.total_rounds(sched) == 27 * 1 + 9 * 2 + 3 * 6 + 1 * 18
  with pytest.raises(ValueError, match='rung index'):
    sha.rounds_this_rung(sched, 4)


def test_promote_picks_lowest_losses_with_deterministic_ties():
  scores = {'a': 0.9, 'b': 0.2, 'c': 0.5, 'd': 0.2, 'e': float('nan'), 'f': 0.4}
  assert sha.promote(scores, 1) == ['b']
  assert sha.promote(scores, 3) == ['b', 'd', 'f']
  assert sha.promote(dict(reversed(list(scores.items()))), 3) == ['b', 'd', 'f']
  assert sha.promote(scores, 6)[-1] == 'e'  # NaN (diverged) ranks last
  assert sha.promote({'x': float('inf'), 'y': 3.0}, 1) == ['y']
  assert sha.promote({'x': 1.0}, 3) == ['x']
  with pytest.raises(ValueError, match='keep'):
    sha.promote(scores, 0)


def test_full_run_keeps_the_best_arm():
  # Arm i has loss 1/(budget) + i/100 at any budget: arm 0 must win.
  arms = [f'arm{i:02d}' for i in range(20)]
  sched = sha.sha_schedule(len(arms), 2, 1)
  alive = arms
  for rung, nxt in zip(sched, sched[1:] + [None]):
    assert len(alive) == rung.num_arms
    scores = {a: 1.0 / rung.budget_rounds + int(a[3:]) / 100 for a in alive}
    alive = sha.promote(scores, nxt.num_arms if nxt else 1)
  assert alive == ['arm00']


def test_validation_names_flags():
  with pytest.raises(ValueError, match='--sha_arms.*0'):
    sha.sha_schedule(0, 3, 1)
  with pytest.raises(ValueError, match='--sha_eta.*1'):
    sha.sha_schedule(9, 1, 1)
  with pytest.raises(ValueError, match='--sha_eta.*2.5'):
    sha.sha_schedule(9, 2.5, 1)
  with pytest.raises(ValueError, match='--sha_min_rounds.*0'):
    sha.sha_schedule(9, 3, 0)
  with pytest.raises(ValueError, match='--sha_max_rounds.*2'):
    sha.sha_schedule(9, 3, 5, 2)
