"""The privacy DP-FedAvg (`algorithms.privacy`) spends: user-level (ε, δ) after t rounds, by Rényi
DP (Mironov 2017) with `dp_accounting`'s RDP accountant, for the driver's client sampling.

* ``fixed``: the driver's sampler, m of the N clients uniformly without replacement each round
  (`selection.sample_clients`). dp_accounting's bound for it (Wang, Balle and Kasiviswanathan 2019,
  Thm. 27; ``SampledWithoutReplacementDpEvent``) holds for the *replace-one* relation (N is public;
  neighbouring data sets differ in one client's data), under which one client moves the clipped sum
  by up to 2C: the Gaussian's noise multiplier relative to that sensitivity is z/2.
* ``poisson``: each client independently with probability q = m/N (McMahan et al. 2018's
  sampler; ``PoissonSampledDpEvent``), add-or-remove-one relation, sensitivity C, multiplier z.
  The driver does not sample this way; it is here for one that does.
* ``unamplified``: any selection that does not depend on the data, with no amplification counted:
  the Gaussian mechanism itself, replace-one, multiplier z/2. The driver's sampling with client
  dropout is this (the survivors of a fixed-size sample are not a fixed-size sample).

Each round is one such event (z does not change between rounds, and adaptive clipping's z is the
total of its two queries, as TFF's ``gaussian_adaptive`` splits it), so ε after t rounds is the
t-fold composition. δ defaults to 1/N^1.1 (below 1/N, so that releasing one client's data whole is
not within δ). z = 0 (clipping only) gives ε = ∞.

What ε covers: the sequence of models (and anything computed from them alone). The diagnostics the
loop also records of the clients — their local loss and accuracy, update norm, the counts of
non-finite or zeroed updates, and whether any update survived (which skips the server step) — are
exact aggregates of client data and are not covered; nor is choosing hyper-parameters (e.g. the
clip) on validation data carved from the clients' (`TaskOptions.validation_fraction` moves those
examples to the server: they are no longer the clients').
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from tff_robust.algorithms import privacy
from tff_robust.common import options
from tff_robust.simulation import selection

SAMPLINGS = ("fixed", "poisson", "unamplified")


def default_delta(num_clients: int) -> float:
  """δ = 1/N^1.1 for N clients."""
  return float(num_clients) ** -1.1


def round_event(noise_multiplier: float, num_clients: int, per_round: int,
                sampling: str = "fixed") -> dp_accounting.DpEvent:
  """One round's DP event (see the module docstring for the neighbouring relation of each)."""
  if sampling == "fixed":
    return dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, per_round, dp_accounting.GaussianDpEvent(noise_multiplier / 2))
  if sampling == "poisson":
    return dp_accounting.PoissonSampledDpEvent(per_round / num_clients,
                                               dp_accounting.GaussianDpEvent(noise_multiplier))
  if sampling == "unamplified":
    return dp_accounting.GaussianDpEvent(noise_multiplier / 2)
  raise ValueError(f"sampling={sampling!r} is not one of {SAMPLINGS}")


def neighboring_relation(sampling: str) -> dp_accounting.NeighboringRelation:
  relation = dp_accounting.NeighboringRelation
  return relation.ADD_OR_REMOVE_ONE if sampling == "poisson" else relation.REPLACE_ONE


@dataclasses.dataclass(frozen=True)
class PrivacyLedger:
  """User-level ε of a run after each round: ``metrics(t)`` is what the loop records."""

  noise_multiplier: float
  num_clients: int
  per_round: int
  delta: float
  sampling: str = "fixed"

  def __post_init__(self):
    if self.sampling not in SAMPLINGS:
      raise ValueError(f"sampling={self.sampling!r} is not one of {SAMPLINGS}")
    if not (1 <= self.per_round <= self.num_clients and 0 < self.delta < 1 and self.noise_multiplier >= 0):
      raise ValueError(f"not an accountable setting: {self}")

  @functools.cached_property
  def _one_round(self) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(orders, RDP of one round at each): computed once (seconds for a sample of N > m), as the
    accountant composes it; None without noise (ε = ∞)."""
    if self.noise_multiplier == 0:
      return None
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=neighboring_relation(self.sampling))
    accountant.compose(round_event(self.noise_multiplier, self.num_clients, self.per_round, self.sampling))
    # t rounds compose to t times this vector (RdpAccountant.compose with count=t); the accountant
    # keeps it in private fields, read once here (tests check ε against the accountant's own).
    return np.asarray(accountant._orders), np.asarray(accountant._rdp)  # pylint: disable=protected-access

  def epsilon(self, rounds: int) -> float:
    """ε after ``rounds`` rounds at ``delta`` (0 rounds: 0; no noise: ∞)."""
    if rounds <= 0:
      return 0.0
    if self._one_round is None:
      return math.inf
    orders, rdp = self._one_round
    return float(rdp_privacy_accountant.compute_epsilon(orders, rounds * rdp, self.delta)[0])

  def metrics(self, round_num: int) -> dict[str, float]:
    return {"dp_epsilon": self.epsilon(round_num), "dp_delta": self.delta}

  def describe(self) -> str:
    """How ε is counted, in words (the header's second privacy line)."""
    how = {"fixed": f"{self.per_round} of {self.num_clients} clients sampled without replacement "
                    "(replace-one: z/2 on sensitivity 2C)",
           "poisson": f"Poisson sampling q = {self.per_round}/{self.num_clients} (add-or-remove-one)",
           "unamplified": f"{self.per_round} of {self.num_clients} clients, no amplification counted "
                          "(client dropout; replace-one: z/2 on sensitivity 2C)"}[self.sampling]
    return f"user-level ε by RDP at δ {self.delta:.3g}, {how}"


def header_lines(dp: Optional[privacy.DPConfig], ledger_: Optional[PrivacyLedger]) -> list[str]:
  """The run header's lines about DP (none without it): the mechanism, then the accounting."""
  if dp is None or ledger_ is None:
    return []
  z, m = dp.noise_multiplier, dp.clients_per_round
  if dp.adaptive:
    clip = (f"adaptive clip (quantile {dp.clip_quantile:g}, lr {dp.clip_lr:g}, from "
            f"{dp.clip or privacy.ADAPTIVE_INITIAL_CLIP:g})")
    noise = f"noise z {z:g} (both queries)"
  else:
    clip = f"clip C {dp.clip:g}"
    noise = f"noise z {z:g} (std z·C/m = {z * dp.clip / m:.3g} on the mean)"
  return [f"privacy  DP-FedAvg: {clip}, {noise}, every client weighs 1" + (", no noise: ε = ∞" if z == 0 else ""),
          f"         {ledger_.describe()}"]


def resolve(process: Any, loop: Any, task: Any) -> Any:
  """``process`` (a `ProcessConfig`) with its DP config's m, N and δ filled in from the driver's
  sampling (``loop``: a `LoopConfig`) and ``task``; raises ValueError naming the flag when the run
  is not sound with DP: adaptive clipping's z against m, and server-side data (AH's loss, the
  divergence guard) that would be drawn from the clients' examples. Idempotent; without DP,
  ``process`` itself."""
  dp: Optional[privacy.DPConfig] = process.dp
  if dp is None:
    return process
  n = len(task.train.client_ids)
  m = selection.num_sampled(n, loop.clients_per_round, loop.client_fraction)
  privacy.check_cohort(dp, m)
  if task.validation is None:
    why = (f"task {task.name!r} holds no server-side validation set, so its examples would be "
           "drawn from the clients' data; set --validation_fraction > 0 (those examples then "
           "belong to the server, not to the clients)")
    options.check(loop.divergence_factor == 0, "divergence_factor", loop.divergence_factor,
                  f"with --dp_noise_multiplier the divergence guard's loss is not private: {why}, "
                  "or --divergence_factor=0")
    options.check(process.ah is None, "ah_loss_source", "server",
                  f"with --dp_noise_multiplier AH's L_t on the server is not private: {why}")
  delta = dp.delta if dp.delta is not None else default_delta(n)
  return dataclasses.replace(process, dp=dataclasses.replace(
      dp, clients_per_round=m, num_clients=n, delta=delta))


def ledger(dp: Optional[privacy.DPConfig], client_dropout_rate: float = 0.0) -> Optional[PrivacyLedger]:
  """The ledger of a `resolve`d DP config (None without DP)."""
  if dp is None:
    return None
  return PrivacyLedger(dp.noise_multiplier, dp.num_clients, dp.clients_per_round, dp.delta,
                       "unamplified" if client_dropout_rate > 0 else "fixed")
