"""AH, adaptive hyper-parameters (seed 000 §3.2-3.3; ``--ah``): each round the server draws the
clients' learning rate and local steps h_t ~ P(·|ψ_t) and updates ψ by REINFORCE from the
relative loss decrease (eq. 7).

Modules: `options` (``AHConfig``, the ``--ah_*`` flags), `hparam_grid` (the grids, their
normalisation), `reinforce` (ψ's TF update), `policy` (the server and client components).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Optional

from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.methods.ah.policy import AdaptiveHparams, PreTrainingLoss, server_loss_fn
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method, Switch
from tff_robust.common import options

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


def check(config: "ProcessConfig") -> None:
  options.check(config.client.local_steps > 0, "local_steps", config.client.local_steps,
                "--ah tunes the local steps: use --local_steps > 0")


def server_val(config: "ProcessConfig") -> int:
  """The server-held validation sample of the first scheme (``--ah_loss_source=server``)."""
  return config.ah.val_examples if config.ah.loss_source == "server" else 0


def build(ctx: BuildContext) -> Built:
  """The policy ψ (server) and, with ``--ah_loss_source=clients``, the clients' pre-evaluation."""
  ah, cfg = ctx.config.ah, ctx.config
  if ah.loss_source == "clients":
    return Built(client=[PreTrainingLoss(ah.client_eval_batches, cfg.client.batch_size)],
                 server=[AdaptiveHparams(ah, cfg.seed, None)])
  if ctx.server_val is None:
    raise ValueError("--ah with --ah_loss_source=server needs a server validation set (server_val)")
  return Built(server=[AdaptiveHparams(ah, cfg.seed, server_loss_fn(ctx.spec, ctx.server_val))])


def describe(config: "ProcessConfig") -> Description:
  return Description(console=f"AH (loss from {config.ah.loss_source})", run_name="ah")


def reward_clip(text: str) -> Optional[float]:
  """``--ah_reward_clip`` as `AHConfig.min_reward` (a number < 0, or None for ``none``)."""
  clip = text.strip().lower()
  try:
    value = None if clip == "none" else float(clip)
  except ValueError:
    value = math.nan
  options.check(value is None or -math.inf < value < 0, "ah_reward_clip", text,
                "a finite number < 0, or none (unclipped)")
  return value


def configure(build_options: Callable[..., AHConfig], text: Mapping[str, str], on: frozenset) -> AHConfig:
  """``--ah``'s configuration: the ``--ah_*`` fields and the reward clip."""
  return build_options(AHConfig, min_reward=reward_clip(text["ah_reward_clip"]))


SWITCH = Switch("Adaptive hyper-parameters: sample (lr, steps) each round from P(h|ψ).", configure,
                (("ah_reward_clip", "-1", "Lower clip of r_t (a number < 0), or none (the seed's "
                  "unclipped reward)."),))
METHOD = Method("ah", runs=lambda config: config.ah is not None, build=build, check=check,
                describe=describe, label="AH", client_rank=2, server_val=server_val, options=(AHConfig,),
                switch=SWITCH)
