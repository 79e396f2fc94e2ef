"""Byzantine clients: which of a round's clients misbehave, and what they send.

A byzantine client replaces its honest delta Δ (a list of tensors, one per
trainable weight) inside the client computation by:

* ``none``: Δ (no attack);
* ``sign_flip``: −s·Δ, s = ``scale`` (default 1: the plain sign-flipping attack);
* ``gaussian``: ε ~ N(0, σ²I) of Δ's shape, σ = ``sigma`` (default 1), drawn with
  TF's stateless RNG from ``seed`` (reproducible);
* ``scaled``: s·Δ, s = ``scale`` (default 10: model-replacement "boosting");
* ``nan``: every entry NaN (a corrupted update; the aggregator's guard must catch it).

Apply the attack *after* the client's own finiteness check (client_work drops a
non-finite update with weight 0): a byzantine client does not police itself, so
it keeps its honest weight.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.client import Component, LocalRun, Needs

ATTACKS = ("none", "sign_flip", "gaussian", "scaled", "nan")
DEFAULT_SCALE = {"sign_flip": 1.0, "scaled": 10.0}

SeedLike = Union[int, Sequence[int], np.ndarray]


def validate_attack(kind: str, fraction: float = 0.0, scale: Optional[float] = None,
                    sigma: float = 1.0) -> None:
  """Raises ``ValueError`` naming the flag for an invalid attack configuration."""
  if kind not in ATTACKS:
    raise ValueError(f"--byzantine_attack={kind!r} is not valid; choose one of: "
                     f"{', '.join(ATTACKS)}")
  if not isinstance(fraction, numbers.Real) or not 0.0 <= fraction < 1.0:
    raise ValueError(f"--byzantine_fraction={fraction!r} is not valid; it must be in [0, 1)")
  if scale is not None and (not isinstance(scale, numbers.Real) or not math.isfinite(scale)
                            or scale <= 0):
    raise ValueError(f"--byzantine_scale={scale!r} is not valid; choose a finite number > 0 "
                     f"(or None for the defaults {DEFAULT_SCALE})")
  if not isinstance(sigma, numbers.Real) or not math.isfinite(sigma) or sigma <= 0:
    raise ValueError(f"--byzantine_sigma={sigma!r} is not valid; choose a finite number > 0")


def apply_attack(kind: str, delta: Sequence[tf.Tensor], seed, scale: Optional[float] = None,
                 sigma: float = 1.0) -> list[tf.Tensor]:
  """The byzantine version of ``delta`` (see the module docstring for each ``kind``).

  Args:
    kind: one of `ATTACKS`.
    delta: the honest client delta, a list of float tensors.
    seed: int or scalar integer tensor (e.g. derived from round and client) seeding
      the ``gaussian`` noise; leaf j uses the stateless seed (seed, j).
    scale: s of ``sign_flip`` / ``scaled``; None = `DEFAULT_SCALE`.
    sigma: σ of ``gaussian``.
  """
  validate_attack(kind, 0.0, scale, sigma)
  delta = [tf.convert_to_tensor(d) for d in delta]
  if kind == "none":
    return delta
  if kind in DEFAULT_SCALE:
    s = DEFAULT_SCALE[kind] if scale is None else float(scale)
    factor = -s if kind == "sign_flip" else s
    return [tf.cast(factor, d.dtype) * d for d in delta]
  if kind == "gaussian":
    base = tf.cast(seed, tf.int64)
    return [tf.cast(sigma, d.dtype) * tf.random.stateless_normal(
        tf.shape(d), seed=tf.stack([base, tf.constant(j, tf.int64)]), dtype=d.dtype)
            for j, d in enumerate(delta)]
  return [tf.fill(tf.shape(d), tf.constant(np.nan, d.dtype)) for d in delta]  # nan


def maybe_attack(kind: str, delta: Sequence[tf.Tensor], is_byzantine, seed,
                 scale: Optional[float] = None, sigma: float = 1.0) -> list[tf.Tensor]:
  """``apply_attack`` where the boolean scalar ``is_byzantine`` holds, else ``delta``."""
  attacked = apply_attack(kind, delta, seed, scale=scale, sigma=sigma)
  flag = tf.cast(is_byzantine, tf.bool)
  return [tf.where(flag, a, tf.convert_to_tensor(d)) for a, d in zip(attacked, delta)]


class ByzantineAttack(Component):
  """The attack as a client component: a byzantine client (its input's flag) replaces the Δ it
  sends, after the trainer's finiteness check; its noise is seeded by the client's own seed."""

  key = "attack"
  needs = Needs(seed=True, byzantine=True)

  def __init__(self, kind: str, scale: Optional[float] = None, sigma: float = 1.0):
    validate_attack(kind, 0.0, scale, sigma)
    self.kind, self.scale, self.sigma = kind, scale, sigma

  def outgoing(self, run: LocalRun, delta: list) -> list:
    seed = run.inputs.seed
    noise_seed = tf.bitwise.bitwise_xor(seed[0], seed[1])
    return maybe_attack(self.kind, delta, run.inputs.byzantine, noise_seed, scale=self.scale,
                        sigma=self.sigma)


def num_byzantine(num_sampled: int, fraction: float) -> int:
  """round(fraction · n), halves rounded up."""
  return int(math.floor(fraction * num_sampled + 0.5))


def byzantine_mask(num_sampled: int, fraction: float, seed: SeedLike) -> np.ndarray:
  """Which of a round's ``num_sampled`` clients are byzantine: exactly round(fraction·n).

  The positions are a uniform draw without replacement from
  ``np.random.default_rng(seed)``; pass e.g. ``seed=(run_seed, round)`` for a
  reproducible, per-round choice.
  """
  validate_attack("none", fraction)
  if (isinstance(num_sampled, bool) or not isinstance(num_sampled, (int, np.integer))
      or num_sampled < 0):
    raise ValueError(f"num_sampled={num_sampled!r} is not valid; it must be an integer >= 0")
  k = num_byzantine(int(num_sampled), fraction)
  mask = np.zeros(int(num_sampled), dtype=bool)
  if k:
    mask[np.random.default_rng(seed).choice(int(num_sampled), size=k, replace=False)] = True
  return mask
