"""The divergence guard on its own: what it rejects and which loss becomes the reference."""

import math

import pytest

from tff_robust.simulation.guard import DivergenceGuard


def test_rejects_a_non_finite_or_too_large_loss_and_keeps_the_last_accepted_reference():
  losses = {"w0": 2.0, "ok": 3.9, "big": 8.0, "nan": math.nan, "ok2": 7.5}
  guard = DivergenceGuard(2.0, losses.__getitem__)
  guard.start("w0")
  metrics = {}
  assert not guard.rejects("ok", metrics) and metrics["guard_loss"] == 3.9  # 3.9 ≤ 2 × 2.0
  assert guard.rejects("big", metrics) and metrics["guard_loss"] == 8.0  # 8.0 > 2 × 3.9
  assert guard.rejects("nan", metrics)
  assert guard.accepted_loss == 3.9  # rejected rounds never become the reference
  assert not guard.rejects("ok2", metrics) and guard.accepted_loss == 7.5  # 7.5 ≤ 2 × 3.9


@pytest.mark.parametrize("factor", [0.0, 1.0, 0.5])
def test_a_factor_of_one_or_less_is_refused(factor):
  with pytest.raises(ValueError, match="divergence_factor"):
    DivergenceGuard(factor, lambda s: 0.0)
