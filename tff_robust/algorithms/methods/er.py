"""ER, entropy regularisation (seed 000 eq. 8, ``--er_h_min`` > 0): the client's objective gains
max(0, H_min − H(softmax(a_M))) on every batch (`regularizers.entropy_regularizer`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tff_robust.algorithms.client import Component, Forward, LocalRun, LossTerm
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method
from tff_robust.algorithms.regularizers import entropy_regularizer
from tff_robust.common import options
from tff_robust.common.options import option

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


@dataclasses.dataclass(frozen=True)
class ERConfig:
  """ER's option, the flag ``--er_h_min`` (held in ``ProcessConfig.methods``)."""

  h_min: float = option(0.0, "er_h_min", "Entropy regularisation H_min, eq. 8 of seed 000 (0 = off).",
                        check=lambda v: v >= 0, allowed="must be ≥ 0")

  def __post_init__(self):
    options.validate(self)


class EntropyTerm(Component):
  """ER as a client component: + max(0, H_min − H(softmax(a_M))) on every batch (eq. 8)."""

  key = "er"

  def __init__(self, h_min: float):
    self.h_min = h_min

  def loss(self, run: LocalRun, x, y, fwd: Forward) -> LossTerm:
    return LossTerm(entropy_regularizer(fwd.logits, self.h_min))


def h_min(config: "ProcessConfig") -> float:
  """H_min of ``config`` (0: ER off)."""
  return config.options_of(ERConfig).h_min


def build(ctx: BuildContext) -> Built:
  return Built(client=[EntropyTerm(h_min(ctx.config))])


def describe(config: "ProcessConfig") -> Description:
  return Description(console=f"ER H_min {h_min(config):.4g}")


METHOD = Method("er", runs=lambda config: h_min(config) > 0, build=build, describe=describe,
                options=(ERConfig,))
