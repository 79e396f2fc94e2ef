"""The divergence guard on its own: what it rejects and which loss becomes the reference."""

import math

import pytest

from tff_robust.common.round_rows import accepted_update_norms
from tff_robust.simulation.guard import DivergenceGuard, UpdateNormGuard


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


def test_update_norm_guard_compares_with_the_median_of_the_accepted_window():
  guard = UpdateNormGuard(3.0, window=3)
  guard.start([])
  m = {"update_norm": 50.0}
  assert not guard.rejects(m) and math.isnan(m["guard_update_norm_ref"])  # no reference yet
  for norm in (1.0, 2.0):
    assert not guard.rejects({"update_norm": norm})
  assert guard.accepted == [50.0, 1.0, 2.0] and guard.reference() == 2.0
  m = {"update_norm": 6.5}
  assert guard.rejects(m) and m["guard_update_norm_ref"] == 2.0  # 6.5 > 3 × 2
  assert guard.rejects({"update_norm": math.inf}) and guard.rejects({"update_norm": math.nan})
  assert guard.accepted == [50.0, 1.0, 2.0]  # rejected norms never join the window
  assert not guard.rejects({"update_norm": 6.0})  # 6 ≤ 3 × 2
  assert guard.accepted == [1.0, 2.0, 6.0] and guard.reference() == 2.0  # the oldest left


def test_update_norm_guard_starts_from_the_accepted_rounds_of_a_resumed_run():
  history = [{"round": 1.0, "update_norm": 4.0, "rejected_round": 0.0},
             {"round": 2.0, "update_norm": 90.0, "rejected_round": 1.0},
             {"round": 3.0, "num_clients": 0.0, "skipped_round": 1.0},
             {"round": 4.0, "update_norm": 2.0, "rejected_round": 0.0},
             {"round": 5.0, "update_norm": 3.0, "rejected_round": 0.0}]
  assert accepted_update_norms(history) == [4.0, 2.0, 3.0]
  guard = UpdateNormGuard(2.0, window=2)
  guard.start(accepted_update_norms(history))
  assert guard.accepted == [2.0, 3.0] and guard.reference() == 2.5


def test_a_round_whose_every_client_update_was_non_finite_is_no_sample_of_the_window():
  """Such a round leaves the model as it was and reports ‖Δ‖ = 0: were it accepted, the zero
  would pull the median down and make the guard reject ordinary steps after it."""
  guard = UpdateNormGuard(3.0, window=3)
  guard.start([2.0, 2.0, 2.0])
  m = {"update_norm": 0.0, "num_clients": 5.0, "nonfinite_clients": 5.0, "skipped_round": 0.0}
  assert not guard.rejects(m) and m["guard_update_norm_ref"] == 2.0
  # The aggregator's own non-finite check counts too (the server step's condition).
  assert not guard.rejects({"update_norm": 0.0, "num_clients": 5.0, "nonfinite_clients": 2.0,
                            "agg_nonfinite_count": 3.0})
  assert guard.accepted == [2.0, 2.0, 2.0]
  # One surviving client is an update: 5 ≤ 3 × 2 is accepted and joins the window.
  assert not guard.rejects({"update_norm": 5.0, "num_clients": 5.0, "nonfinite_clients": 4.0})
  assert guard.accepted == [2.0, 2.0, 5.0]
  history = [{"update_norm": 3.0, "num_clients": 5.0, "nonfinite_clients": 0.0, "rejected_round": 0.0},
             {"update_norm": 0.0, "num_clients": 5.0, "nonfinite_clients": 5.0, "rejected_round": 0.0},
             {"update_norm": 0.0, "num_clients": 5.0, "nonfinite_clients": 1.0,
              "agg_nonfinite_count": 4.0, "rejected_round": 0.0},
             {"update_norm": 4.0, "num_clients": 5.0, "nonfinite_clients": 4.0, "rejected_round": 0.0}]
  assert accepted_update_norms(history) == [3.0, 4.0]


@pytest.mark.parametrize("factor,window,flag", [(1.0, 5, "update_norm_guard"), (0.5, 5, "update_norm_guard"),
                                                (3.0, 0, "update_norm_guard_window")])
def test_update_norm_guard_refuses_bad_settings(factor, window, flag):
  with pytest.raises(ValueError, match=f"--{flag}="):
    UpdateNormGuard(factor, window)
