"""Plain configuration of one learning process (what `flags/` parses into).

Each field's default, flag and check are declared here, once (`options.option`); the
dataclasses validate themselves on construction, so ``ProcessConfig()`` is the process that
``python -m tff_robust.main`` builds with no flags.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from tff_robust.algorithms import aggregation
from tff_robust.algorithms import attacks
from tff_robust.algorithms import privacy
from tff_robust.algorithms import schedules
from tff_robust.algorithms import server_opt
from tff_robust.common import options
from tff_robust.common.options import option, seed_option

if TYPE_CHECKING:  # the methods' options; the methods import this module, never the reverse
  from tff_robust.algorithms.methods.ah.options import AHConfig
  from tff_robust.algorithms.methods.fedex.space import FedExConfig

T = TypeVar("T")
WEIGHTINGS = ("num_examples", "uniform", "val_accuracy", "train_accuracy")
AGGREGATION_NORMS = ("sampled", "all")

_POSITIVE = lambda v: v > 0  # noqa: E731
_NON_NEGATIVE = lambda v: v >= 0  # noqa: E731
_AT_LEAST_ONE = lambda v: v >= 1  # noqa: E731

@dataclasses.dataclass(frozen=True)
class ClientConfig:
  """Local training on a client (Algorithm 2 of seed 004, CLIENTOPT = SGD).

  ``local_steps`` > 0 trains K steps of batch ``batch_size``; otherwise
  ``local_epochs`` passes over the client's data.
  """

  lr: float = option(0.05, "client_lr", "Client SGD learning rate η_l.", check=_POSITIVE, allowed="must be > 0")
  lr_schedule: str = option("constant", "client_lr_schedule",
                            "Client lr schedule: constant, invsqrt (η_l/√t), expdecay (staircase).",
                            choices=schedules.LR_SCHEDULES)
  lr_decay_rate: float = option(0.1, "client_lr_decay_rate", "expdecay factor γ.")
  lr_decay_every: int = option(500, "client_lr_decay_every", "expdecay: decay every N rounds.")
  local_steps: int = option(20, "local_steps", "Local SGD steps K per round (0: use --local_epochs).",
                            check=_NON_NEGATIVE, allowed="must be ≥ 0")
  local_epochs: int = option(0, "local_epochs", "Local epochs E when --local_steps=0.",
                             check=_NON_NEGATIVE, allowed="must be ≥ 0")
  steps_decay_rate: float = option(1.0, "local_steps_decay_rate",
                                   "Fixed decay of local steps: K·γ^floor((t-1)/N).",
                                   check=lambda v: 0 < v <= 1, allowed="must be in (0, 1]")
  steps_decay_every: int = option(1, "local_steps_decay_every", "Decay local steps every N rounds.",
                                  check=_AT_LEAST_ONE, allowed="must be ≥ 1")
  min_local_steps: int = option(1, "min_local_steps", "Lower bound of the decayed local steps.",
                                check=_AT_LEAST_ONE, allowed="must be ≥ 1")
  batch_size: int = option(64, "batch_size", "Client batch size B.", check=_AT_LEAST_ONE, allowed="must be ≥ 1")

  def __post_init__(self):
    options.validate(self)
    options.check(self.local_steps > 0 or self.local_epochs > 0, "local_epochs", self.local_epochs,
                  "must be ≥ 1 when --local_steps=0")
    # γ and N only matter to expdecay (schedules.client_lr ignores them otherwise).
    decay_rate = self.lr_decay_rate if self.lr_schedule == "expdecay" else 1.0
    schedules.validate_schedule(self.lr_schedule, decay_rate, self.lr_decay_every)

@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """Server optimizer of seed 004 (SERVEROPT applied to the pseudo-gradient -Δ).

  ``momentum`` None means 0.9 for sgdm (FedAvgM) and 0 otherwise; it is resolved on construction.
  """

  opt: str = option("sgd", "server_opt", "Server optimizer: " + ", ".join(server_opt.SERVER_OPTIMIZERS))
  lr: float = option(1.0, "server_lr", "Server learning rate η.")
  momentum: Optional[float] = option(None, "server_momentum",
                                     "sgdm (FedAvgM) momentum (default 0.9; only for sgdm).", kind="float")
  beta1: float = option(0.9, "server_beta1", "β1 of FedAdagrad/FedAdam/FedYogi.")
  beta2: float = option(0.99, "server_beta2", "β2 of FedAdam/FedYogi.")
  tau: float = option(1e-3, "server_tau", "τ (adaptivity) of FedAdagrad/FedAdam/FedYogi.")
  lr_decay: float = option(1.0, "server_lr_decay",
                           "Server lr decay γ per round: η_t = η γ^t (t = completed rounds; 1 = constant).",
                           check=lambda v: 0 < v <= 1, allowed="must be in (0, 1]")

  def __post_init__(self):
    if self.momentum is None:
      object.__setattr__(self, "momentum", 0.9 if self.opt == "sgdm" else 0.0)
    options.validate(self)
    server_opt.check_server_optimizer(self.opt, learning_rate=self.lr, momentum=self.momentum,
                                      beta1=self.beta1, beta2=self.beta2, tau=self.tau)

  def build_optimizer(self) -> Any:
    """SERVEROPT of this configuration (a `tff.learning.optimizers.Optimizer`), built once by the
    process (`server.ServerOptimizer`); the checks ran on construction."""
    return server_opt.build_server_optimizer(self.opt, learning_rate=self.lr, momentum=self.momentum,
                                             beta1=self.beta1, beta2=self.beta2, tau=self.tau)

@dataclasses.dataclass(frozen=True)
class RobustConfig:
  """Aggregation and fault model: `aggregation.build_aggregator` options and byzantine clients.

  ``byzantine_f`` None (unset) is resolved against the clients per round by the driver
  (`simulation.loop.resolve_robust`, which also checks the aggregator's assumption); a process
  built directly from this config takes None as f = 0.
  """

  aggregator: str = option("mean", "aggregator", "Aggregation: " + ", ".join(aggregation.AGGREGATORS))
  trim_fraction: float = option(0.2, "trim_fraction", "trimmed_mean: fraction dropped at each end per coordinate.")
  clip_norm: Optional[float] = option(None, "clip_norm",
                                      "norm_clip: fixed L2 norm (default: adaptive, 0.8-quantile).", kind="float")
  zeroing: bool = option(True, "zeroing", "Zero client updates with huge norms (TFF zeroing); non-finite "
                         "ones are always excluded.")
  zeroing_norm: Optional[float] = option(None, "zeroing_norm", "Fixed zeroing norm (default: TFF's adaptive one).",
                                         kind="float")
  byzantine_attack: str = option("none", "byzantine_attack", "Corruption: none, sign_flip, gaussian, scaled, nan.")
  byzantine_scale: Optional[float] = option(None, "byzantine_scale",
                                            "Scale of sign_flip (default 1) / scaled (default 10).", kind="float")
  byzantine_sigma: float = option(1.0, "byzantine_sigma", "σ of the gaussian attack.")
  byzantine_f: Optional[int] = option(
      None, "byzantine_f", "Byzantine clients f the aggregator assumes (krum, multi_krum, bulyan use it); a run "
      "whose aggregator cannot tolerate f of n clients per round stops before training (krum, multi_krum "
      "n ≥ 2f+3, bulyan n ≥ 4f+3, median, geometric_median n ≥ 2f+1, trimmed_mean also ⌊βn⌋ ≥ f, mean "
      "f = 0). Unset: round(--byzantine_fraction·n), checked for the four new rules only.",
      kind="int", check=lambda v: v is None or v >= 0, allowed="must be ≥ 0, or unset")
  multi_krum_select: int = option(0, "multi_krum_select", "multi_krum: the q best-scored updates averaged "
                                  "(0: n − f).", check=_NON_NEGATIVE, allowed="must be ≥ 0 (0: n − f)")
  rfa_iterations: int = option(10, "rfa_iterations", "geometric_median: smoothed Weiszfeld steps R (RFA).",
                               check=_AT_LEAST_ONE, allowed="must be ≥ 1")
  rfa_nu: float = option(1e-6, "rfa_nu", "geometric_median: smoothing ν of the Weiszfeld step (RFA).",
                         check=lambda v: 0 < v < math.inf, allowed="must be a finite number > 0")

  def __post_init__(self):
    options.validate(self)
    aggregation.validate_aggregator(self.aggregator, self.trim_fraction, self.clip_norm, self.zeroing_norm)
    attacks.validate_attack(self.byzantine_attack, 0.0, self.byzantine_scale, self.byzantine_sigma)

@dataclasses.dataclass(frozen=True)
class ProcessConfig:
  """Everything `process.build_process` needs besides the task.

  The methods' options: a method with a flag of its own that turns it on has a field (``ah``,
  ``fedex``; None: off); the others' options dataclasses (`Method.options`, e.g. RM's, whose
  weight > 0 turns RM on) are held in ``methods``, one per class, and read with
  ``options_of(cls)``: a class not given has its defaults. ``methods`` keeps only the ones that
  differ from their defaults, ordered by class, so equal configurations compare equal.
  """

  client: ClientConfig = dataclasses.field(default_factory=ClientConfig)
  server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
  weighting: str = option("num_examples", "weighting",
                          "Aggregation weights: num_examples, uniform, val_accuracy, train_accuracy.",
                          choices=WEIGHTINGS)
  # "sampled": Δ_t = Σ_{S_t} n_k Δ_k / Σ_{S_t} n_k (Reddi et al.); "all": Σ_{S_t} n_k Δ_k / N,
  # N over all K clients (seed 000, Algorithm 1 line 13).
  aggregation_norm: str = option("sampled", "aggregation_norm",
                                 "Denominator of the weighted mean: sampled (Σ n_k over the round's clients) or "
                                 "all (N over all K clients, seed 000 Algorithm 1 line 13: the step shrinks by ≈ C).",
                                 check=lambda v: v in AGGREGATION_NORMS,
                                 allowed="choose one of " + ", ".join(AGGREGATION_NORMS))
  ah: Optional["AHConfig"] = None  # AH's options (`methods.ah`), None: off
  fedex: Optional["FedExConfig"] = None  # FedEx's (`methods.fedex`), None: off
  robust: RobustConfig = dataclasses.field(default_factory=RobustConfig)
  seed: int = seed_option()
  algorithm: str = "fedavg"  # the method added by name (flag: `methods.registry.Selection`)
  dp: Optional[privacy.DPConfig] = None  # user-level DP-FedAvg (`privacy`), None: off
  methods: tuple[Any, ...] = ()  # the other methods' options (`options_of`)

  def __post_init__(self):
    object.__setattr__(self, "methods", _canonical(self.methods))
    options.validate(self)
    for check in _METHOD_CHECKS:  # the registry's: --algorithm's choices and each method's check
      check(self)
    if self.dp is not None:
      privacy.check_process(self)

  def options_of(self, cls: type[T]) -> T:
    """The options of dataclass ``cls`` (a method's, `Method.options`) held in ``methods``, else
    ``cls()``, its defaults."""
    return next((given for given in self.methods if type(given) is cls), None) or cls()

  def with_options(self, *given: Any) -> "ProcessConfig":
    """This configuration with ``given`` (methods' options) in place of those of their classes."""
    replaced = {type(g) for g in given}
    return dataclasses.replace(self, methods=tuple(m for m in self.methods if type(m) not in replaced) + given)

  @property
  def needs_client_val(self) -> bool:
    return self.weighting == "val_accuracy" or self.fedex is not None


def _canonical(held: Any) -> tuple[Any, ...]:
  """``ProcessConfig.methods`` as it is kept: frozen dataclass instances, one per class, those
  equal to their class's defaults left out, ordered by class (so equal configurations compare
  equal)."""
  held = tuple(held)
  classes = [type(m) for m in held]
  for given in held:
    if not dataclasses.is_dataclass(given) or isinstance(given, type):
      raise ValueError(f"ProcessConfig.methods holds {given!r}, not a method's options dataclass")
  if len(set(classes)) != len(classes):
    raise ValueError("ProcessConfig.methods holds two options of one class: "
                     + ", ".join(sorted(c.__name__ for c in classes)))
  kept = [m for m in held if m != type(m)()]
  return tuple(sorted(kept, key=lambda m: (type(m).__module__, type(m).__qualname__)))


# Checks a `ProcessConfig` runs on construction besides its own fields': `methods.registry`
# installs its check here when imported (`tff_robust.algorithms` imports it first), so this
# module needs no import of the methods.
_METHOD_CHECKS: list[Callable[[ProcessConfig], None]] = []


def install_check(check: Callable[[ProcessConfig], None]) -> None:
  """Makes every `ProcessConfig` run ``check`` on construction (idempotent)."""
  if check not in _METHOD_CHECKS:
    _METHOD_CHECKS.append(check)
