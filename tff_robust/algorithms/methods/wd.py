"""WD, the weight-divergence baseline (FedProx's proximal term, seed 000 §4; ``--wd_mu`` > 0, or
FedEx drawing μ): the client's objective gains μ ‖w^i − w_t‖² (`regularizers.weight_divergence`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import tensorflow as tf

from tff_robust.algorithms.client import Component, LocalRun, Step
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method
from tff_robust.algorithms.round_protocol import Broadcast, ClientHparams
from tff_robust.common import options
from tff_robust.common.options import option

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


@dataclasses.dataclass(frozen=True)
class WDConfig:
  """WD's option, the flag ``--wd_mu`` (held in ``ProcessConfig.methods``)."""

  mu: float = option(0.0, "wd_mu", "Weight-divergence (FedProx) coefficient μ (0 = off).",
                     check=lambda v: v >= 0, allowed="must be ≥ 0")

  def __post_init__(self):
    options.validate(self)


class ProximalTerm(Component):
  """The proximal term as a client component: + μ ‖w^i − w_t‖² (μ: ``--wd_mu``, or FedEx's draw).

  It sets the client's ``prox_mu`` to ``--wd_mu`` (FedEx's configuration, whose hooks run
  later, may replace it). It enters as its gradient, 2μ (w^i − w_t), added to the gradient of
  the rest of the objective: the same step as differentiating `weight_divergence` inside the
  tape, without the term's forward pass and its backward through the square and the sum
  (element-wise passes over every weight at each step, memory-bound: docs/performance.md,
  Table 4)."""

  key = "prox"

  def __init__(self, mu: float):
    self.mu = mu

  def hparams(self, hp: ClientHparams, broadcast: Broadcast, inputs, scratch: dict) -> ClientHparams:
    return hp._replace(prox_mu=tf.constant(self.mu, tf.float32))

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    mu2 = 2.0 * tf.cast(run.hp.prox_mu, tf.float32)
    return [g + tf.cast(mu2, g.dtype) * (w - tf.cast(w0, g.dtype))
            for g, w, w0 in zip(grads, run.model.trainable_variables, run.initial)]


def mu(config: "ProcessConfig") -> float:
  """``--wd_mu`` of ``config`` (0: no proximal term unless FedEx draws μ)."""
  return config.options_of(WDConfig).mu


def runs(config: "ProcessConfig") -> bool:
  """μ > 0, or FedEx draws μ (its configurations set ``prox_mu``)."""
  return mu(config) > 0 or (config.fedex is not None and config.fedex.tunes("prox_mu"))


def build(ctx: BuildContext) -> Built:
  return Built(client=[ProximalTerm(mu(ctx.config))])


def describe(config: "ProcessConfig") -> Description:
  m = mu(config)
  return Description(console=f"WD μ {m:.4g}", run_name="wd") if m > 0 else Description()


METHOD = Method("wd", runs=runs, build=build, describe=describe, options=(WDConfig,))
