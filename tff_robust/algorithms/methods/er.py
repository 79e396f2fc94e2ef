"""ER, entropy regularisation (seed 000 eq. 8, ``--er_h_min`` > 0): the client's objective gains
max(0, H_min − H(softmax(a_M))) on every batch (`regularizers.entropy_regularizer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tff_robust.algorithms.client import Component, Forward, LocalRun, LossTerm
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method
from tff_robust.algorithms.regularizers import entropy_regularizer

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


class EntropyTerm(Component):
  """ER as a client component: + max(0, H_min − H(softmax(a_M))) on every batch (eq. 8)."""

  key = "er"

  def __init__(self, h_min: float):
    self.h_min = h_min

  def loss(self, run: LocalRun, x, y, fwd: Forward) -> LossTerm:
    return LossTerm(entropy_regularizer(fwd.logits, self.h_min))


def build(ctx: BuildContext) -> Built:
  return Built(client=[EntropyTerm(ctx.config.client.er_h_min)])


def describe(config: "ProcessConfig") -> Description:
  return Description(console=f"ER H_min {config.client.er_h_min:.4g}")


METHOD = Method("er", runs=lambda config: config.client.er_h_min > 0, build=build, describe=describe)
