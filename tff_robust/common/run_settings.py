"""The shape of a run's configuration that the console's header reads: `algorithms.config`'s
`ProcessConfig` and `simulation.loop`'s `LoopConfig` as protocols of the attributes it reads, so
`console` types them without importing the layers that define them (common imports nothing of the
project)."""

from __future__ import annotations

from typing import Optional, Protocol


class ClientSettings(Protocol):
  lr: float
  lr_schedule: str
  local_steps: int
  local_epochs: int
  batch_size: int


class RobustSettings(Protocol):
  aggregator: str
  trim_fraction: float
  clip_norm: Optional[float]
  zeroing: bool
  byzantine_attack: str
  byzantine_f: Optional[int]
  multi_krum_select: int
  rfa_iterations: int


class ProcessSettings(Protocol):
  """A `ProcessConfig` as the header reads it (the methods' line comes ready-made)."""

  client: ClientSettings
  robust: RobustSettings


class LoopSettings(Protocol):
  """A `LoopConfig` as the header reads it."""

  rounds: int
  output_dir: str
  client_dropout_rate: float
  byzantine_fraction: float
  divergence_factor: float
  update_norm_guard: float
  update_norm_guard_window: int
