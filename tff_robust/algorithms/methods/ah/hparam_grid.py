"""The hyper-parameter grid H of the adaptive hyper-parameter policy (seed 000, §3.3) and the
policy's configuration; the policy itself (sampling, reward, eq. 7) is `reinforce.py`.

Normalised grid. For dimension p with allowed raw values H_p, let g = log10(H_p)
if ``log_scale[p]`` else g = H_p. The normalised values are

    u = (g − mean(g)) / (2 · max|g − mean(g)|)

so every dimension has exactly zero mean and max|u| = 0.5, i.e. u ⊂ [−0.5, 0.5]
for any grid, symmetric or not (a one-value dimension maps to u = 0). For a
log-scale dimension equal ratios of raw values are equal steps in u. The grid
H is the Cartesian product of the per-dimension values, flattened in C order:
point j = (i_0, …, i_{D−1}) with j = ravel_multi_index(i, [|H_0|, …, |H_{D−1}|]).

Everything here is numpy, computed once when the process is built.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np

DEFAULT_LR_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
DEFAULT_STEPS_GRID = (5.0, 10.0, 20.0, 40.0, 80.0)

# Baselines r̂ of the update: "mean" is eq. 7; "hold" is eq. 7 with ψ held until the window
# is full (the first Z rounds); "detrended" subtracts, per window entry, a least-squares line
# through the window's rewards instead of their mean (see `baseline_values`).
BASELINES = ("mean", "hold", "detrended")

# Numerical safeguard on log_prec (std = exp(−log_prec / 2) in normalised units).
LOG_PREC_MIN = -6.0
LOG_PREC_MAX = 9.5


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """Hyper-hyper-parameters of the adaptive hyper-parameter policy.

  Attributes:
    grids: allowed raw values per dimension (strictly increasing, finite;
      positive for log-scale dimensions). Default: client learning rate and
      number of local SGD steps.
    log_scale: per dimension, normalise log10 of the values. Default: both (the
      default grids are geometric), as `options.AHConfig`.
    names: per dimension, a short name used in metric keys and in error
      messages as ``--ah_<name>_grid``. Default ``("lr", "steps")`` for D = 2,
      ``("h0", "h1", ...)`` otherwise.
    window: Z, the baseline interval of Eq. 7 (window of Z + 1 rounds).
    hyper_lr: η_H. Rewards are relative loss reductions, ~0.01–0.1 per round,
      and differ between grid points by ~0.01–0.05; at the default init_std
      the μ-score has magnitude ~A·|h − μ| ≈ 16·0.25 = 4, and each sample is
      reused in Z + 1 updates, so η_H = 0.05 moves μ by roughly 0.01–0.05
      normalised units (a fraction of one grid spacing, 0.2–0.25) per round:
      μ can cross the grid in tens to hundreds of rounds (the scale of Fig. 3)
      without one noisy round jumping a grid cell.
    init_mu: initial μ in RAW units (e.g. ``(0.01, 20)``); ``None`` = the
      centre of the normalised grid (μ = 0). Must lie inside the grid range.
    init_std: initial standard deviation in normalised units, the same for all
      dimensions: log_prec = −2 log(init_std). 0.25 keeps the neighbours of the
      mode likely (relative weight ~0.7 at a spacing of 0.2) while making the
      far end of the grid rare.
    min_reward: lower clip of the reward; a non-finite L_{t+1} (divergence)
      gets this reward. −1 is a doubling of the loss. ``None`` = no clip, the
      seed's r_t (a non-finite L_{t+1} then gives reward 0).
    baseline: one of `BASELINES`; "mean" is eq. 7.
  """

  grids: tuple[tuple[float, ...], ...] = (DEFAULT_LR_GRID, DEFAULT_STEPS_GRID)
  log_scale: tuple[bool, ...] = (True, True)
  names: Optional[tuple[str, ...]] = None
  window: int = 5
  hyper_lr: float = 0.05
  init_mu: Optional[tuple[float, ...]] = None
  init_std: float = 0.25
  min_reward: Optional[float] = -1.0
  baseline: str = "mean"

  def __post_init__(self):
    grids = tuple(tuple(float(v) for v in g) for g in self.grids)
    object.__setattr__(self, "grids", grids)
    object.__setattr__(self, "log_scale", tuple(bool(b) for b in self.log_scale))
    if not grids:
      raise ValueError("grids must hold at least one dimension, got ().")
    dims = len(grids)
    names = self.names
    if names is None:
      names = ("lr", "steps") if dims == 2 else tuple(f"h{p}" for p in range(dims))
    names = tuple(str(n) for n in names)
    object.__setattr__(self, "names", names)
    if len(names) != dims or len(set(names)) != dims:
      raise ValueError(f"names must be {dims} distinct names (one per grid), got {names}.")
    if len(self.log_scale) != dims:
      raise ValueError(f"log_scale must have one entry per grid ({dims}), got {self.log_scale}.")
    for name, g, log in zip(names, grids, self.log_scale):
      flag = f"--ah_{name}_grid"
      if not g:
        raise ValueError(f"{flag} must hold at least one value, got ().")
      if not all(math.isfinite(v) for v in g):
        raise ValueError(f"{flag} values must be finite, got {g}.")
      if any(b <= a for a, b in zip(g, g[1:])):
        raise ValueError(f"{flag} values must be strictly increasing, got {g}.")
      if log and g[0] <= 0:
        raise ValueError(f"{flag} is log-scale so its values must be > 0, got {g}.")
    if (isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer))
        or self.window < 1):
      raise ValueError(f"--ah_window (window, Z) must be an integer >= 1, got {self.window!r}.")
    if not (math.isfinite(self.hyper_lr) and self.hyper_lr >= 0):
      raise ValueError(f"--ah_hyper_lr (hyper_lr) must be finite and >= 0, got {self.hyper_lr!r}.")
    if not (math.isfinite(self.init_std) and self.init_std > 0):
      raise ValueError(f"--ah_init_std (init_std) must be finite and > 0, got {self.init_std!r}.")
    if self.min_reward is not None and not (math.isfinite(self.min_reward) and self.min_reward < 0):
      raise ValueError(f"--ah_reward_clip (min_reward) must be a finite number < 0 or none, "
                       f"got {self.min_reward!r}.")
    if self.baseline not in BASELINES:
      raise ValueError(f"--ah_baseline (baseline) must be one of {', '.join(BASELINES)}, "
                       f"got {self.baseline!r}.")
    if self.init_mu is not None:
      init_mu = tuple(float(v) for v in self.init_mu)
      object.__setattr__(self, "init_mu", init_mu)
      if len(init_mu) != dims:
        raise ValueError(
            f"--ah_init_mu (init_mu) must have {dims} values (one per grid), got {init_mu}.")
      for name, v, g in zip(names, init_mu, grids):
        if not (g[0] <= v <= g[-1]):
          raise ValueError(f"--ah_init_{name} (init_mu) must lie in the grid range "
                           f"[{g[0]}, {g[-1]}], got {v}.")

  @property
  def dims(self) -> int:
    return len(self.grids)


class Bounds(NamedTuple):
  """Clamp ranges applied after each update (numpy, [D] each)."""

  mu_lo: np.ndarray
  mu_hi: np.ndarray
  log_prec_lo: np.ndarray
  log_prec_hi: np.ndarray


def _transformed(config: PolicyConfig, p: int) -> np.ndarray:
  g = np.asarray(config.grids[p], np.float64)
  return np.log10(g) if config.log_scale[p] else g


def shift_scale(config: PolicyConfig) -> tuple[np.ndarray, np.ndarray]:
  """Per-dimension (shift, scale) with u = (g − shift) / scale."""
  shifts, scales = [], []
  for p in range(config.dims):
    g = _transformed(config, p)
    m = g.mean()
    half_range = np.max(np.abs(g - m))
    shifts.append(m)
    scales.append(2.0 * half_range if half_range > 0 else 1.0)
  return np.asarray(shifts), np.asarray(scales)


def normalized_axes(config: PolicyConfig) -> list[np.ndarray]:
  """Normalised allowed values of each dimension: zero mean, max |u| = 0.5."""
  shift, scale = shift_scale(config)
  return [((_transformed(config, p) - shift[p]) / scale[p]).astype(np.float32)
          for p in range(config.dims)]


def _product(axes: Sequence[np.ndarray]) -> np.ndarray:
  mesh = np.meshgrid(*axes, indexing="ij")
  return np.stack([m.reshape(-1) for m in mesh], axis=-1)


def normalized_grid(config: PolicyConfig) -> np.ndarray:
  """The grid H in normalised units, [N, D] float32, N = Π |H_p| (C order)."""
  return _product(normalized_axes(config)).astype(np.float32)


def grid_values(config: PolicyConfig) -> np.ndarray:
  """The grid in raw units, [N, D] float32, rows aligned with `normalized_grid`."""
  return _product([np.asarray(g, np.float64) for g in config.grids]).astype(np.float32)


def bounds(config: PolicyConfig) -> Bounds:
  """μ range (the normalised grid's min/max per dimension) and the log_prec safeguard."""
  axes = normalized_axes(config)
  d = config.dims
  return Bounds(
      mu_lo=np.asarray([a.min() for a in axes], np.float32),
      mu_hi=np.asarray([a.max() for a in axes], np.float32),
      log_prec_lo=np.full([d], LOG_PREC_MIN, np.float32),
      log_prec_hi=np.full([d], LOG_PREC_MAX, np.float32))


def normalize(config: PolicyConfig, raw_values: Sequence[float]) -> np.ndarray:
  """Raw values [..., D] to normalised units (numpy; log10 first on log dims)."""
  raw = np.asarray(raw_values, np.float64)
  shift, scale = shift_scale(config)
  g = np.where(np.asarray(config.log_scale), np.log10(np.where(config.log_scale, raw, 1.0)), raw)
  return ((g - shift) / scale).astype(np.float32)
