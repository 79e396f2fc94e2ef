"""The shape of a run's configuration that the console's header reads: `algorithms.config`'s
`ProcessConfig` and `simulation.loop`'s `LoopConfig` as protocols of the attributes it reads, so
`console` types them without importing the layers that define them (common imports nothing of the
project)."""

from __future__ import annotations

from typing import Any, Optional, Protocol


class ServerSettings(Protocol):
  opt: str
  lr: float
  momentum: float
  lr_decay: float


class ClientSettings(Protocol):
  lr: float
  lr_schedule: str
  local_steps: int
  local_epochs: int
  batch_size: int
  rm_weight: float
  rm_client_state: str
  er_h_min: float
  wd_mu: float


class RobustSettings(Protocol):
  aggregator: str
  trim_fraction: float
  clip_norm: Optional[float]
  zeroing: bool
  byzantine_attack: str
  byzantine_f: Optional[int]
  multi_krum_select: int
  rfa_iterations: int


class AHSettings(Protocol):
  loss_source: str


class FedExSettings(Protocol):
  options: Any  # a `fedex_space.FedExOptions` (its ``k``)


class ProcessSettings(Protocol):
  """A `ProcessConfig` as the header reads it (``ah.loss_source``, ``fedex.options.k`` when set)."""

  algorithm: str
  server: ServerSettings
  client: ClientSettings
  robust: RobustSettings
  weighting: str
  ah: Optional[AHSettings]
  fedex: Optional[FedExSettings]


class LoopSettings(Protocol):
  """A `LoopConfig` as the header reads it."""

  rounds: int
  output_dir: str
  client_dropout_rate: float
  byzantine_fraction: float
  divergence_factor: float
  update_norm_guard: float
  update_norm_guard_window: int
