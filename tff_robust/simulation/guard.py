"""Round guards (seed 003's fault tolerance): a round a guard rejects keeps the previous model —
the role of ``should_discard_round`` in `tff.learning.programs.train_model`, except that the
round counter and AH's policy move on (`RobustProcess.after_rejection`).

* `DivergenceGuard`: the new model's loss on a fixed held-out sample is not finite, or exceeds
  ``factor`` × the last accepted model's.
* `UpdateNormGuard`: the aggregated update's norm ‖Δ_t‖ is not finite, or exceeds ``factor`` ×
  the median of the last ``window`` accepted rounds' norms (a step far larger than the recent
  ones: the one-round collapses of AH's top learning rate, issue 49)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np

from tff_robust.common.round_rows import updated_model


class DivergenceGuard:
  """``loss_of(state)``: the loss of a state's model on the guard's sample."""

  def __init__(self, factor: float, loss_of: Callable[[Any], float]):
    if factor <= 1:
      raise ValueError(f"--divergence_factor={factor!r} is not valid: must be 0 (off) or > 1")
    self.factor = factor
    self.loss_of = loss_of
    self.accepted_loss: Optional[float] = None

  def start(self, state) -> None:
    """The reference loss: the starting (or resumed) model's."""
    self.accepted_loss = self.loss_of(state)

  def rejects(self, new_state, metrics: dict[str, float]) -> bool:
    """Whether the round that produced ``new_state`` is rejected; adds ``guard_loss`` to
    ``metrics``. An accepted round's loss becomes the reference."""
    loss = self.loss_of(new_state)
    metrics["guard_loss"] = loss
    if not np.isfinite(loss) or (self.accepted_loss is not None and loss > self.factor * self.accepted_loss):
      return True
    self.accepted_loss = loss
    return False


class UpdateNormGuard:
  """Rejects a round whose ‖Δ_t‖ (the ``update_norm`` metric) is not finite or exceeds
  ``factor`` × the median of the last ``window`` accepted rounds' norms. Until a round has been
  accepted there is no reference, and only a non-finite norm is rejected. A round in which no
  client's update survived (`updated_model`) is neither rejected nor part of the window."""

  def __init__(self, factor: float, window: int):
    if factor <= 1:
      raise ValueError(f"--update_norm_guard={factor!r} is not valid: must be 0 (off) or > 1")
    if window < 1:
      raise ValueError(f"--update_norm_guard_window={window!r} is not valid: must be ≥ 1")
    self.factor = factor
    self.window = window
    self.accepted: list[float] = []

  def start(self, accepted_norms: Iterable[float]) -> None:
    """The reference: the norms of the rounds accepted before this start (a resumed run's
    metrics.csv), oldest first; only the last ``window`` count."""
    self.accepted = [float(v) for v in accepted_norms][-self.window:]

  def reference(self) -> Optional[float]:
    """The norm a round is compared with: the median of the window (None before any)."""
    return statistics.median(self.accepted) if self.accepted else None

  def rejects(self, metrics: dict[str, float]) -> bool:
    """Whether the round of ``metrics`` is rejected; adds ``guard_update_norm_ref`` (the
    reference, NaN before any accepted round) to ``metrics``. An accepted norm joins the window."""
    norm = metrics.get("update_norm", 0.0)
    ref = self.reference()
    metrics["guard_update_norm_ref"] = float("nan") if ref is None else ref
    if not updated_model(metrics):  # nothing to reject, and its zero norm is no reference
      return False
    if not np.isfinite(norm) or (ref is not None and norm > self.factor * ref):
      return True
    self.accepted = (self.accepted + [float(norm)])[-self.window:]
    return False
