"""User-level DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models", Algorithm 1 with fixed-size sampling): each client's update is clipped to L2 norm C, the
clipped updates are summed, Gaussian noise N(0, (zC)² I) is added to the sum, and the result is
divided by m, the clients sampled per round:

    Δ_t = (Σ_{i∈S_t} Δ_i · min(1, C / ‖Δ_i‖₂) + N(0, z²C² I)) / m

so the noise on the mean update has standard deviation z·C/m per coordinate. Every client weighs 1
(a weight from the client's data would not be bounded by C). With adaptive clipping (Andrew et al.
2021, "Differentially private learning with adaptive clipping") C follows the γ-quantile of the
clients' update norms, C ← C·exp(−η_C(b̃ − γ)), where b̃ is the noised share of clients whose
norm was at most C; z is then the total noise multiplier of both queries, as TFF splits it.

The mechanism is TFF's `tff.aggregators.DifferentiallyPrivateFactory` (``gaussian_fixed`` /
``gaussian_adaptive``), an unweighted factory, made weighted by
`tff.aggregators.as_weighted_aggregator` (the weights are ignored) inside the project's non-finite
guard and, optionally, zeroing at a fixed norm (`aggregation`). The privacy this buys is counted by
`tff_robust.simulation.privacy_accounting` (the sampling is the driver's).

`check_process` refuses the configurations whose other parts would reveal client data to the
server without noise, or whose aggregate has no bounded sensitivity to one client.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, Optional

import tensorflow_federated as tff

from tff_robust.algorithms import aggregation
from tff_robust.common import options
from tff_robust.common.options import option

# TFF's gaussian_adaptive default initial clip, used when --dp_clip_quantile is set without --dp_clip.
ADAPTIVE_INITIAL_CLIP = 0.1
# TFF's default noise on the clipped count, as a share of the clients per round (gaussian_adaptive):
# the total z must stay below 2 · this · m.
CLIPPED_COUNT_STDDEV_SHARE = 0.05


def _finite_or_none(low: float, high: float = math.inf) -> Callable[[Any], bool]:
  return lambda v: v is None or (math.isfinite(v) and low < v < high)


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """DP-FedAvg's mechanism (z, C, adaptive clipping) and the δ its ε is reported at.

  ``clients_per_round`` (m, the noised sum's divisor) and ``num_clients`` (N) are the driver's,
  filled in by `tff_robust.simulation.privacy_accounting.resolve` before the process is built, as is
  ``delta`` when it is unset (1/N^1.1).
  """

  noise_multiplier: Optional[float] = option(
      None, "dp_noise_multiplier",
      "User-level DP-FedAvg: Gaussian noise of std z·C on the sum of the clipped client updates "
      "(TFF's DifferentiallyPrivateFactory; noise on the mean: z·C/m). 0: clipping only (ε = ∞). "
      "Unset: no DP.", kind="float",
      check=lambda v: v is not None and math.isfinite(v) and v >= 0,
      allowed="a finite number ≥ 0 (0: clipping without noise, ε = ∞)")
  clip: Optional[float] = option(
      None, "dp_clip", "DP-FedAvg: L2 norm C each client's update is clipped to (fixed); with "
      "--dp_clip_quantile the initial C (default 0.1, TFF's).", kind="float",
      check=_finite_or_none(0.0), allowed="a finite number > 0")
  clip_quantile: Optional[float] = option(
      None, "dp_clip_quantile", "DP-FedAvg with adaptive clipping (Andrew et al. 2021): C follows "
      "this quantile γ of the clients' update norms, estimated with noise (TFF's gaussian_adaptive). "
      "Unset: the fixed --dp_clip.", kind="float", check=_finite_or_none(0.0, 1.0),
      allowed="a number in (0, 1)")
  clip_lr: float = option(0.2, "dp_clip_lr", "Adaptive clipping: learning rate η_C of the geometric "
                          "update C ← C·exp(−η_C(b̃ − γ)).", check=lambda v: math.isfinite(v) and v > 0,
                          allowed="a finite number > 0")
  delta: Optional[float] = option(
      None, "dp_delta", "δ of the reported (ε, δ) of user-level DP (default 1/N^1.1, N = the task's "
      "clients).", kind="float", check=_finite_or_none(0.0, 1.0), allowed="a number in (0, 1)")
  clients_per_round: int = 0  # m: set by the driver (privacy_accounting.resolve)
  num_clients: int = 0  # N: set by the driver

  def __post_init__(self):
    options.validate(self)
    options.check(self.clip is not None or self.clip_quantile is not None, "dp_clip", self.clip,
                  "DP-FedAvg needs a clip: --dp_clip=C (fixed) or --dp_clip_quantile=γ (adaptive)")

  @property
  def adaptive(self) -> bool:
    return self.clip_quantile is not None


def check_process(config: Any) -> None:
  """Raises ValueError (flag, value, reason) for a `config.ProcessConfig` with ``dp`` that is not
  sound: a part that releases client data without noise, or an aggregate whose sensitivity to one
  client is not bounded by C."""
  dp_is = "with --dp_noise_multiplier (DP-FedAvg)"
  options.check(config.weighting == "uniform", "weighting", config.weighting,
                f"{dp_is} every client weighs 1: a weight from its data (examples, accuracy) is "
                "not bounded by the clip; use --weighting=uniform")
  options.check(config.aggregation_norm == "sampled", "aggregation_norm", config.aggregation_norm,
                f"{dp_is} the noised sum is divided by the clients sampled per round; 'all' scales it "
                "by the round's clients' examples, released without noise; use --aggregation_norm=sampled")
  rob = config.robust
  options.check(rob.aggregator == "mean", "aggregator", rob.aggregator,
                f"{dp_is} the aggregate is TFF's noised mean of clipped updates; the robust "
                "aggregators' sensitivity to one client is not the clip's (clip with --dp_clip); "
                "use --aggregator=mean")
  options.check(not rob.zeroing or rob.zeroing_norm is not None, "zeroing", rob.zeroing,
                f"{dp_is} the adaptive zeroing norm is a quantile of the clients' update norms "
                "estimated without noise; use --nozeroing or a fixed --zeroing_norm")
  options.check(config.algorithm == "fedavg", "algorithm", config.algorithm,
                f"{dp_is} SCAFFOLD's control variates are averaged without clipping or noise; "
                "use --algorithm=fedavg")
  options.check(config.fedex is None, "fedex", True,
                f"{dp_is} FedEx steps θ on the clients' validation losses, released without noise, "
                "and every configuration it tries spends privacy this accountant does not count; "
                "use --nofedex")
  ah = config.ah
  options.check(ah is None or ah.loss_source == "server", "ah_loss_source",
                None if ah is None else ah.loss_source,
                f"{dp_is} the clients would send their loss to the server without noise; use "
                "--ah_loss_source=server (with a server-held --validation_fraction)")


def check_cohort(dp: DPConfig, clients_per_round: int) -> None:
  """Adaptive clipping spends part of z on the clipped count (std 0.05·m, TFF's default), which
  needs z < 0.1·m; raises ValueError naming the flag otherwise."""
  if dp.adaptive and dp.noise_multiplier > 0:
    bound = 2 * CLIPPED_COUNT_STDDEV_SHARE * clients_per_round
    options.check(dp.noise_multiplier < bound, "dp_noise_multiplier", dp.noise_multiplier,
                  f"with --dp_clip_quantile (adaptive clipping) z must be < 0.1·m = {bound:g} for "
                  f"m = {clients_per_round} clients per round (the clipped count's noise, 0.05·m, "
                  "takes its share of z); lower z or sample more clients")


def dp_factory(dp: DPConfig) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's DifferentiallyPrivateFactory of ``dp`` (its m must be resolved)."""
  if dp.clients_per_round < 1:
    raise ValueError("DPConfig.clients_per_round is not set: resolve it with the driver's sampling "
                     "(tff_robust.simulation.privacy_accounting.resolve) before building the process")
  z, m = float(dp.noise_multiplier), float(dp.clients_per_round)
  if dp.adaptive:
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        z, m, initial_l2_norm_clip=float(dp.clip or ADAPTIVE_INITIAL_CLIP),
        target_unclipped_quantile=float(dp.clip_quantile), learning_rate=float(dp.clip_lr))
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(z, m, float(dp.clip))


def build_dp_aggregator(dp: DPConfig, kind: str = "mean", *, zeroing: bool = False,
                        zeroing_norm: Optional[float] = None, check_nonfinite: bool = True,
                        **unused: Any) -> tff.aggregators.WeightedAggregationFactory:
  """DP-FedAvg's aggregation factory, with `aggregation.build_aggregator`'s keywords: the
  non-finite guard, zeroing at a fixed ∞-norm (optional), then the noised mean of clipped updates
  with every client weighing 1. Measurements: ``nonfinite_count``, with adaptive clipping ``clip``
  (this round's C), with zeroing ``zeroing_norm``, ``zeroed_count``. The other keywords (those of
  aggregators that `check_process` refuses with DP) are ignored."""
  del unused
  if kind != "mean":
    raise ValueError(f"--aggregator={kind!r} is not valid with --dp_noise_multiplier: use --aggregator=mean")
  inner = tff.aggregators.as_weighted_aggregator(dp_factory(dp))
  if zeroing:
    if zeroing_norm is None:
      raise ValueError("--zeroing with DP needs a fixed --zeroing_norm (or --nozeroing)")
    inner = tff.aggregators.zeroing_factory(float(zeroing_norm), inner)
  # A non-finite update is always replaced by a zero one (clipping a NaN would poison the sum).
  return aggregation.GuardedFactory(inner, exclude_nonfinite=True, check=check_nonfinite)


def with_dp(build: Callable[..., tff.aggregators.WeightedAggregationFactory],
            dp: Optional[DPConfig]) -> Callable[..., tff.aggregators.WeightedAggregationFactory]:
  """The aggregator builder `process` calls (with `aggregation.build_aggregator`'s arguments):
  ``build`` itself without DP (nothing of DP is built or traced), `build_dp_aggregator` bound to
  ``dp`` with it."""
  if dp is None:
    return build
  return functools.partial(build_dp_aggregator, dp)
