"""Plain configuration of one learning process (what `flags/` parses into)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

WEIGHTINGS = ("num_examples", "uniform", "val_accuracy", "train_accuracy")
AH_LOSS_SOURCES = ("server", "clients")
AH_BASELINES = ("mean", "hold", "detrended")
AGGREGATION_NORMS = ("sampled", "all")
RM_CLIENT_STATES = ("persist", "reset")
RM_NORMALIZATIONS = ("unit", "sum")  # = matching.NORMALIZATIONS


@dataclasses.dataclass(frozen=True)
class ClientConfig:
  """Local training on a client (Algorithm 2 of seed 004, CLIENTOPT = SGD).

  ``local_steps`` > 0 trains K steps of batch ``batch_size``; otherwise
  ``local_epochs`` passes over the client's data.
  """

  lr: float = 0.05
  lr_schedule: str = "constant"
  lr_decay_rate: float = 1.0
  lr_decay_every: int = 1
  local_steps: int = 20
  local_epochs: int = 0
  steps_decay_rate: float = 1.0
  steps_decay_every: int = 1
  min_local_steps: int = 1
  batch_size: int = 64
  rm_weight: float = 0.0  # representation matching, eq. 2 of seed 000 (0 = off)
  rm_normalize: str = "unit"  # eq. 1's terms in w's objective: "unit" (per unit) or "sum"
  rm_theta_lr: float = 1e-3  # Adam learning rate of the matching layers θ
  er_h_min: float = 0.0  # entropy regularisation, eq. 8 of seed 000 (0 = off)
  wd_mu: float = 0.0  # weight divergence (FedProx baseline) (0 = off)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """Server optimizer of seed 004 (SERVEROPT applied to the pseudo-gradient -Δ)."""

  opt: str = "sgd"
  lr: float = 1.0
  momentum: float = 0.0  # sgdm only
  beta1: float = 0.9
  beta2: float = 0.99
  tau: float = 1e-3
  lr_decay: float = 1.0  # eta_t = lr * lr_decay^t (t = completed rounds); 1 = constant


@dataclasses.dataclass(frozen=True)
class AHConfig:
  """Adaptive hyper-parameters (seed 000 §3.2-3.3); grids and initial mean in real units.

  Both dimensions are normalised in log10 space by default (the default grids
  are geometric); ``steps_log_scale=False`` normalises the steps linearly.
  """

  lr_grid: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
  steps_grid: tuple[int, ...] = (5, 10, 20, 40, 80)
  steps_log_scale: bool = True
  window: int = 5
  hyper_lr: float = 0.05
  init_lr: Optional[float] = None
  init_steps: Optional[int] = None
  init_std: float = 0.25
  loss_source: str = "server"
  client_eval_batches: int = 2
  baseline: str = "mean"  # eq. 7's window mean; "hold", "detrended": see reinforce.BASELINES
  min_reward: Optional[float] = -1.0  # reward clip; None = the seed's unclipped r_t

  def policy_config(self):
    """The `reinforce.PolicyConfig` of this configuration (validates the values)."""
    from tff_robust import reinforce  # pylint: disable=g-import-not-at-top
    init_mu = None
    if self.init_lr is not None or self.init_steps is not None:
      lr = self.init_lr if self.init_lr is not None else float(np.sqrt(min(self.lr_grid) * max(self.lr_grid)))
      steps = self.init_steps if self.init_steps is not None else float(np.sqrt(min(self.steps_grid) * max(self.steps_grid)))
      init_mu = (float(lr), float(steps))
    return reinforce.PolicyConfig(
        grids=(tuple(float(v) for v in self.lr_grid), tuple(float(v) for v in self.steps_grid)),
        log_scale=(True, self.steps_log_scale), names=("lr", "steps"), window=self.window,
        hyper_lr=self.hyper_lr, init_mu=init_mu, init_std=self.init_std,
        min_reward=self.min_reward, baseline=self.baseline)


@dataclasses.dataclass(frozen=True)
class FedExConfig:
  """FedEx (seed 002): k client configurations around ``center`` and θ over them.

  ``space`` is a `fedex.SearchSpace`, ``options`` a `fedex.FedExOptions`;
  ``center`` (None: the client configuration, else the space's midpoint).
  """

  space: Any = None
  options: Any = None
  center: Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class RobustConfig:
  """Aggregation and fault model: `aggregation.build_aggregator` options and byzantine clients."""

  aggregator: str = "mean"
  trim_fraction: float = 0.2
  clip_norm: Optional[float] = None
  zeroing: bool = True
  zeroing_norm: Optional[float] = None
  byzantine_attack: str = "none"
  byzantine_scale: Optional[float] = None
  byzantine_sigma: float = 1.0


@dataclasses.dataclass(frozen=True)
class ProcessConfig:
  """Everything `process.build_process` needs besides the task."""

  client: ClientConfig = dataclasses.field(default_factory=ClientConfig)
  server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
  weighting: str = "num_examples"
  # "sampled": Δ_t = Σ_{S_t} n_k Δ_k / Σ_{S_t} n_k (Reddi et al.); "all": Σ_{S_t} n_k Δ_k / N,
  # N over all K clients (seed 000, Algorithm 1 line 13).
  aggregation_norm: str = "sampled"
  ah: Optional[AHConfig] = None
  fedex: Optional[FedExConfig] = None
  robust: RobustConfig = dataclasses.field(default_factory=RobustConfig)
  seed: int = 0

  @property
  def uses_rm(self) -> bool:
    return self.client.rm_weight > 0

  @property
  def needs_client_val(self) -> bool:
    return self.weighting == "val_accuracy" or self.fedex is not None
