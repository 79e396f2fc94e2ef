"""RM's options (seed 000 §3.1, eqs. 1-2): the weight of eq. 2's matching term (0 = off), how
eq. 1's terms enter it, the matching layers and their own optimizer; each field is a flag
``--rm_*`` (`options.option`). A `ProcessConfig` holds one in ``methods``
(``config.options_of(RMConfig)``)."""

from __future__ import annotations

import dataclasses

from tff_robust.algorithms.methods.rm.matching import LAYER_FORMS, NORMALIZATIONS, TOP_SOURCES
from tff_robust.common import options
from tff_robust.common.options import option

# Where θ^i lives between rounds: per client (Algorithm 1 line 12), or fresh every round.
# (The other choices are `matching`'s: NORMALIZATIONS, TOP_SOURCES, LAYER_FORMS.)
CLIENT_STATES = ("persist", "reset")


@dataclasses.dataclass(frozen=True)
class RMConfig:
  """Representation matching, eq. 2 of seed 000 (``weight`` 0 = off)."""

  weight: float = option(0.0, "rm_weight", "Weight of the representation-matching loss in eq. 2 (0 = off).",
                         check=lambda v: v >= 0, allowed="must be ≥ 0")
  normalize: str = option("unit", "rm_normalize",
                          "How eq. 1's terms enter the model's loss: 'unit' = each layer's squared error "
                          "per unit (the weight does not grow with width), 'sum' = eq. 1 as printed.",
                          choices=NORMALIZATIONS)
  top_source: str = option("logits", "rm_top_source",
                           "What the top matching layer rebuilds a_{M-1} from: 'logits' (the top layer, "
                           "seed 000 Fig. 2), 'softmax' (its softmax, bounded), 'none' (no top term).",
                           choices=TOP_SOURCES)
  layers: str = option("authors", "rm_layers",
                       "The matching layers f_j: 'authors' (one conv or Linear after unpooling through "
                       "the source's own max-pool, then the target's non-linearity, as seed 000's authors "
                       "built them), 'reversed' (each layer between a_j and a_{j+1} undone, linear).",
                       choices=LAYER_FORMS)
  client_state: str = option("persist", "rm_client_state",
                             "Matching parameters θ: persist per client (Algorithm 1 line 12), or reset each round.",
                             choices=CLIENT_STATES)
  theta_lr: float = option(1e-3, "rm_theta_lr", "Adam learning rate of the matching layers θ "
                           "(their own optimizer, on eq. 1).", check=lambda v: v > 0, allowed="must be > 0")
  theta_lr_follows: bool = option(False, "rm_theta_lr_follows",
                                  "θ's Adam lr follows the round's client lr: rm_theta_lr · η_t / --client_lr "
                                  "(the schedule's decay or AH's draw); off: rm_theta_lr in every round.")

  def __post_init__(self):
    options.validate(self)

  @property
  def persist(self) -> bool:
    """θ^i is per-client state, kept between the rounds a client is sampled in."""
    return self.client_state == "persist"
