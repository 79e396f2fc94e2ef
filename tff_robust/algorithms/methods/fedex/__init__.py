"""FedEx (seed 002; ``--fedex``): each client trains with a configuration c ~ θ of its local
hyper-parameters, and the server moves θ by exponentiated gradient on the clients' held-out
losses.

Modules: `space` (the search space, the k configurations, ``FedExOptions`` and ``FedExConfig``,
numpy), `update` (the per-round TF step and the client component), `server` (θ in the state).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tff_robust.algorithms.methods.fedex import space as fedex_space
from tff_robust.algorithms.methods.fedex.server import FedExServer
from tff_robust.algorithms.methods.fedex.space import FedExClient, FedExConfig, FedExOptions
from tff_robust.algorithms.methods.fedex.update import FedExSampling
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method, Switch
from tff_robust.algorithms.methods.wd import WDConfig
from tff_robust.common import options as options_lib

if TYPE_CHECKING:
  from tff_robust.algorithms.config import ProcessConfig


def fedex_client(config: "ProcessConfig") -> FedExClient:
  """The k FedEx configurations, drawn around the centre (seed 002)."""
  fc, ccfg = config.fedex, config.client
  space = fc.space or fedex_space.SearchSpace()
  options = fc.options or FedExOptions(seed=config.seed)
  center = dict(fc.center) if fc.center else space.midpoint()
  if not fc.center:
    defaults = {"learning_rate": ccfg.lr, "batch_size": ccfg.batch_size,
                "prox_mu": config.options_of(WDConfig).mu,  # --wd_mu
                "local_steps": ccfg.local_steps, "local_epochs": ccfg.local_epochs}
    for name in space.names:
      spec = space.spec(name)
      value = defaults.get(name)
      if value is None:
        continue
      if isinstance(spec, tuple) and value in spec:
        center[name] = value
      elif isinstance(spec, fedex_space.Range) and spec.low <= value <= spec.high:
        center[name] = value
  configs = fedex_space.sample_configs(space, center, options.radius, options.k, options.seed)
  return FedExClient(space=space, options=options, configs=configs)


def check(config: "ProcessConfig") -> None:
  fedex_space.check_space(config.fedex.space, config.client.local_steps, config.ah is not None)


def build(ctx: BuildContext) -> Built:
  """c ~ θ on each client; θ in the server state (one row per hyper-parameter in the product space)."""
  fx = fedex_client(ctx.config)
  rows = len(fx.space.names) if fx.options.product_space else None
  return Built(client=[FedExSampling(fx)], server=[FedExServer(fx.options, rows)])


def describe(config: "ProcessConfig") -> Description:
  k = (config.fedex.options or FedExOptions()).k
  return Description(console=f"FedEx (k {k})", run_name="fedex")


# The search space's flags ``--fedex_<name>`` (`space.parse_hparam`), each with its default range.
SPACE_FLAGS = (("learning_rate", "0.0001:1.0:log"), ("momentum", "0.0:0.9"),
               ("weight_decay", "0.00001:0.1:log"), ("prox_mu", "none"), ("local_epochs", "none"),
               ("local_steps", "none"), ("batch_size", "8,16,32,64,128"))


def configure(build_options: Callable[..., FedExOptions], text: Mapping[str, str], on: frozenset) -> FedExConfig:
  """FedEx's search space and options from the ``--fedex_*`` flags."""
  options_lib.check("ah" not in on or text["fedex_learning_rate"] == "none", "fedex_learning_rate",
                    text["fedex_learning_rate"], "--ah already tunes the learning rate: set it to none")
  space = fedex_space.SearchSpace(**{n: fedex_space.parse_hparam(n, text[f"fedex_{n}"]) for n, _ in SPACE_FLAGS})
  return FedExConfig(space=space, options=build_options(FedExOptions))


SWITCH = Switch("Tune client hyper-parameters with FedEx.", configure,
                tuple((f"fedex_{n}", default, f"FedEx search space of {n}: none, low:high[:log], or v1,v2,...")
                      for n, default in SPACE_FLAGS))
METHOD = Method("fedex", runs=lambda config: config.fedex is not None, build=build, check=check,
                describe=describe, label="FedEx", client_rank=1, options=(FedExOptions,), switch=SWITCH)
