"""RM, representation matching (seed 000 §3.1, eqs. 1-2; ``--rm_weight`` > 0): each client trains
next to a frozen copy of w_t and its own matching layers θ^i, and its objective gains the error
of rebuilding w_t's activations from its own.

Modules: `matching` (the matcher θ and eq. 1's terms), `matching_layers` (the layers f_j),
`matching_client` (the client component). Its options are the ``--rm_*`` fields of
`config.ClientConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method
from tff_robust.algorithms.methods.rm.matching_client import RepresentationMatching

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


def build(ctx: BuildContext) -> Built:
  c = ctx.config.client
  return Built(client=[RepresentationMatching(ctx.spec, c, ctx.config.seed, persist=c.rm_client_state == "persist")])


def describe(config: "ProcessConfig") -> Description:
  c = config.client
  return Description(console=f"RM weight {c.rm_weight:.4g} (θ {c.rm_client_state})", run_name="rm")


METHOD = Method("rm", runs=lambda config: config.client.rm_weight > 0, build=build, describe=describe,
                label="RM")
