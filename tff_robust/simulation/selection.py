"""Who trains in a round: the sampled clients (C·K of K), the ones that drop out, and the
byzantine ones among the survivors — each drawn from (seed, round) only, so a resumed run
draws the same clients as the uninterrupted one (seed 000 Algorithm 1 line 5; seed 003's
fault model)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tff_robust.algorithms import attacks


def num_sampled(num_clients: int, clients_per_round: int, fraction: float) -> int:
  """Clients per round: an explicit count, else max(1, round(C·K))."""
  if clients_per_round > 0:
    return min(clients_per_round, num_clients)
  return max(1, min(num_clients, int(round(fraction * num_clients))))


def sample_clients(client_ids: Sequence[str], n: int, seed: int, round_num: int) -> list[str]:
  """A reproducible sample of ``n`` distinct clients for ``round_num``."""
  rng = np.random.default_rng([seed, round_num, 0x5A4D])
  idx = rng.choice(len(client_ids), size=n, replace=False)
  return [client_ids[i] for i in sorted(idx)]


def surviving_clients(cids: Sequence[str], rate: float, seed: int, round_num: int) -> list[str]:
  """The sampled clients that did not drop out (each fails with probability ``rate``)."""
  if rate <= 0:
    return list(cids)
  rng = np.random.default_rng([seed, round_num, 0xD50])
  return [c for c, u in zip(cids, rng.random(len(cids))) if u >= rate]


class RoundClients(NamedTuple):
  sampled: list[str]
  training: list[str]  # the sampled clients that did not drop out
  byzantine: np.ndarray  # bool [len(training)]


@dataclasses.dataclass(frozen=True)
class ClientSelection:
  """Draws each round's clients (``per_round`` of ``client_ids``, sorted)."""

  client_ids: Sequence[str]
  per_round: int
  seed: int
  dropout_rate: float = 0.0
  byzantine_fraction: float = 0.0

  def __call__(self, round_num: int) -> RoundClients:
    sampled = sample_clients(self.client_ids, self.per_round, self.seed, round_num)
    training = surviving_clients(sampled, self.dropout_rate, self.seed, round_num)
    byzantine = attacks.byzantine_mask(len(training), self.byzantine_fraction, (self.seed, round_num))
    return RoundClients(sampled, training, byzantine)
