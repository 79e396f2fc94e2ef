"""What a sampled client receives in a round: its examples in an order drawn from (seed,
round, client), the held-out part for validation (`split_validation`), its own seed
(FedEx's c ~ θ, byzantine noise) and the state its client components keep (RM's persisted θ^i,
SCAFFOLD's c_i) — packed as the process' client input (`client_input.ClientInput`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms.methods.fedex import update as fedex_lib
from tff_robust.algorithms.client_input import ClientInput
from tff_robust.common import seeding
from tff_robust.simulation import client_states


def split_validation(dataset: tf.data.Dataset, every: int) -> tuple[tf.data.Dataset, tf.data.Dataset]:
  """(train, val): every ``every``-th example is held out for validation."""
  indexed = dataset.enumerate()
  val = indexed.filter(lambda i, _: i % every == 0).map(lambda _, e: e)
  train = indexed.filter(lambda i, _: i % every != 0).map(lambda _, e: e)
  return train, val


def data_seed(seed: int, round_num: int, index: int) -> int:
  """The shuffle seed of client ``index``'s data in ``round_num``."""
  return int(np.random.default_rng([seed, round_num, index, 0xDA7A]).integers(2**31 - 1))


@dataclasses.dataclass
class ClientFeed:
  """Builds the client inputs of a round (``client_ids`` sorted: a client's index is fixed)."""

  client_data: tff.simulation.datasets.ClientData
  client_ids: list[str]
  input: ClientInput
  seed: int
  shuffle_buffer: int
  val_every: int  # used when the input carries a validation part
  state_store: Optional[client_states.ClientStateStore] = None

  def __post_init__(self):
    self.index = {cid: i for i, cid in enumerate(self.client_ids)}

  def __call__(self, cid: str, round_num: int, byzantine: bool = False):
    data = self.client_data.create_tf_dataset_for_client(cid)
    val = None
    if self.input.has_val:
      data, val = split_validation(data, self.val_every)
    # The order comes from (seed, round, client) only. A fixed order per round (reshuffled
    # by the next round's seed): TF's reshuffling seed generator does not survive the
    # dataset's serialization to the TFF worker, which would make runs irreproducible.
    with seeding.global_seed(self.seed):
      data = data.shuffle(self.shuffle_buffer, seed=data_seed(self.seed, round_num, self.index[cid]),
                          reshuffle_each_iteration=False)
    seed = None
    if self.input.has_seed:  # the client's own seed for c ~ θ (FedEx), from (seed, round, id)
      seed = fedex_lib.client_seed(self.seed, round_num, self.index[cid])
    state = self.state_store.get(cid) if self.state_store is not None else None
    return self.input.pack(data, val=val, seed=seed, byzantine=byzantine, state=state)
