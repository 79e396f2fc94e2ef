"""RM, representation matching (seed 000 §3.1, eqs. 1-2; ``--rm_weight`` > 0): each client trains
next to a frozen copy of w_t and its own matching layers θ^i, and its objective gains the error
of rebuilding w_t's activations from its own.

Modules: `options` (``RMConfig``, the ``--rm_*`` flags, held in ``ProcessConfig.methods``),
`matching` (the matcher θ and eq. 1's terms), `matching_layers` (the layers f_j),
`matching_client` (the client component).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import tensorflow as tf

from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method
from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.methods.rm.matching_client import RepresentationMatching
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.common import options

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


def rm_options(config: "ProcessConfig") -> RMConfig:
  """RM's options in ``config`` (its defaults, RM off, when none are given)."""
  return config.options_of(RMConfig)


def check(config: "ProcessConfig") -> None:
  """RM is refused with SCAFFOLD (`methods.scaffold`'s docstring says why)."""
  weight = rm_options(config).weight
  options.check(config.algorithm != "scaffold", "rm_weight", weight,
                "must be 0 with --algorithm=scaffold (RM and SCAFFOLD are not combined; choose "
                "--algorithm=fedavg for RM)")


def check_model(config: "ProcessConfig", model_fn: Callable[[], tf.keras.Model]) -> None:
  """The matching layers can be built for the task's model (`matching.check_supported`)."""
  matching.check_supported(model_fn(), rm_options(config).layers)


def build(ctx: BuildContext) -> Built:
  rm = rm_options(ctx.config)
  return Built(client=[RepresentationMatching(ctx.spec, rm, ctx.config.client.lr, ctx.config.seed)])


def describe(config: "ProcessConfig") -> Description:
  rm = rm_options(config)
  return Description(console=f"RM weight {rm.weight:.4g} (θ {rm.client_state})", run_name="rm")


METHOD = Method("rm", runs=lambda config: rm_options(config).weight > 0, build=build, check=check,
                describe=describe, label="RM", options=(RMConfig,), check_model=check_model)
