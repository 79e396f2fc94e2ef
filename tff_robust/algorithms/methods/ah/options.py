"""AH's options (seed 000 §3.2-3.3): the grids of client learning rates and local steps, the
policy's initial mean and spread, eq. 7's hyper learning rate and baseline, and where L_t comes
from; each field is a flag ``--ah_*`` (`options.option`), turned on by ``--ah``."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from tff_robust.algorithms.methods.ah import hparam_grid
from tff_robust.common import options
from tff_robust.common.options import option

AH_LOSS_SOURCES = ("server", "clients")
AH_BASELINES = hparam_grid.BASELINES
_AT_LEAST_ONE = lambda v: v >= 1  # noqa: E731


@dataclasses.dataclass(frozen=True)
class AHConfig:
  """Adaptive hyper-parameters (seed 000 §3.2-3.3); grids and initial mean in real units.

  Both dimensions are normalised in log10 space by default (the default grids
  are geometric); ``steps_log_scale=False`` normalises the steps linearly.
  ``min_reward`` (flag ``--ah_reward_clip``) clips r_t from below; None = the seed's unclipped r_t.
  """

  lr_grid: tuple[float, ...] = option(hparam_grid.DEFAULT_LR_GRID, "ah_lr_grid",
                                      "Allowed client learning rates (normalised in log10 space).")
  steps_grid: tuple[int, ...] = option((5, 10, 20, 40, 80), "ah_steps_grid", "Allowed local SGD steps.",
                                       check=lambda v: all(s >= 1 for s in v), allowed="steps must be ≥ 1")
  steps_log_scale: bool = option(True, "ah_steps_log_scale", "Normalise the steps grid in log10 space.")
  window: int = option(5, "ah_window", "Baseline window Z of eq. 7.")
  hyper_lr: float = option(0.05, "ah_hyper_lr", "Hyper learning rate η_H.")
  init_lr: Optional[float] = option(None, "ah_init_lr", "Initial mean learning rate (default: grid centre).",
                                    kind="float")
  init_steps: Optional[int] = option(None, "ah_init_steps", "Initial mean local steps (default: grid centre).",
                                     kind="int")
  init_std: float = option(0.25, "ah_init_std", "Initial std of P(h|ψ) in normalised units.")
  loss_source: str = option("server", "ah_loss_source",
                            "Where L_t comes from: a server-held validation set, or the clients' own data.",
                            choices=AH_LOSS_SOURCES)
  client_eval_batches: int = option(2, "ah_client_eval_batches", "Batches each client evaluates (loss source clients).",
                                    check=_AT_LEAST_ONE, allowed="must be ≥ 1")
  val_examples: int = option(500, "ah_val_examples", "Size of the server validation set (loss source server).",
                             check=_AT_LEAST_ONE, allowed="must be ≥ 1")
  baseline: str = option("mean", "ah_baseline", "Baseline of the ψ update: mean (eq. 7), hold (eq. 7, ψ "
                         "held for the first Z rounds) or detrended (a line fitted through the window).",
                         check=lambda v: v in AH_BASELINES, allowed="choose one of " + ", ".join(AH_BASELINES))
  min_reward: Optional[float] = -1.0

  def __post_init__(self):
    options.validate(self)
    options.check(self.min_reward is None or -math.inf < self.min_reward < 0, "ah_reward_clip",
                  self.min_reward, "a finite number < 0, or none (unclipped)")
    self.policy_config()  # validates grids, window, η_H, init

  def policy_config(self):
    """The `hparam_grid.PolicyConfig` of this configuration (validates the values)."""
    init_mu = None
    if self.init_lr is not None or self.init_steps is not None:
      lr = self.init_lr if self.init_lr is not None else float(np.sqrt(min(self.lr_grid) * max(self.lr_grid)))
      steps = self.init_steps if self.init_steps is not None else float(np.sqrt(min(self.steps_grid) * max(self.steps_grid)))
      init_mu = (float(lr), float(steps))
    return hparam_grid.PolicyConfig(
        grids=(tuple(float(v) for v in self.lr_grid), tuple(float(v) for v in self.steps_grid)),
        log_scale=(True, self.steps_log_scale), names=("lr", "steps"), window=self.window,
        hyper_lr=self.hyper_lr, init_mu=init_mu, init_std=self.init_std,
        min_reward=self.min_reward, baseline=self.baseline)
