"""The divergence guard (seed 003's fault tolerance): a round whose new model's loss on a
fixed held-out sample is not finite, or exceeds ``factor`` × the last accepted model's, is
rejected — the role of ``should_discard_round`` in `tff.learning.programs.train_model`,
except that the round counter and AH's policy move on (`RobustProcess.after_rejection`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np


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
