"""WD, the weight-divergence baseline (FedProx's proximal term, seed 000 §4; ``--wd_mu`` > 0, or
FedEx drawing μ): the client's objective gains μ ‖w^i − w_t‖² (`regularizers.weight_divergence`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from tff_robust.algorithms.client import Component, LocalRun, Step
from tff_robust.algorithms.methods import fedex
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


class ProximalTerm(Component):
  """The proximal term as a client component: + μ ‖w^i − w_t‖² (μ: ``--wd_mu``, or FedEx's draw).

  It enters as its gradient, 2μ (w^i − w_t), added to the gradient of the rest of the objective:
  the same step as differentiating `weight_divergence` inside the tape, without the term's
  forward pass and its backward through the square and the sum (element-wise passes over every
  weight at each step, memory-bound: docs/performance.md, Table 4)."""

  key = "prox"

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    mu2 = 2.0 * tf.cast(run.hp.prox_mu, tf.float32)
    return [g + tf.cast(mu2, g.dtype) * (w - tf.cast(w0, g.dtype))
            for g, w, w0 in zip(grads, run.model.trainable_variables, run.initial)]


def runs(config: "ProcessConfig") -> bool:
  """μ > 0, or FedEx draws μ (its configurations set ``prox_mu``)."""
  return config.client.wd_mu > 0 or fedex.tunes(config, "prox_mu")


def build(ctx: BuildContext) -> Built:
  return Built(client=[ProximalTerm()])


def describe(config: "ProcessConfig") -> Description:
  mu = config.client.wd_mu
  return Description(console=f"WD μ {mu:.4g}", run_name="wd") if mu > 0 else Description()


METHOD = Method("wd", runs=runs, build=build, describe=describe)
