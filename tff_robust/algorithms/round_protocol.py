"""What a round sends and what a client trains with: one typed value each.

`Broadcast` is everything a client receives in round t: w_t, the round's hyper-parameters h_t
(`RoundHparams`) and each server component's extra (SCAFFOLD's c, FedEx's θ), under that
component's key. `make_broadcast` is the one place it is built: the process builds it inside the
round, the tuning studies' "refine" evaluation (`tuning.federated_eval`) outside it.

`ClientHparams` are the hyper-parameters of one client's local SGD (seed 004, Algorithm 2,
CLIENTOPT = SGD), one name per quantity: the round's η_l and K, the configured batch size and
epochs, μ of the proximal term, and the heavy-ball momentum and weight decay that FedEx may draw
(0 otherwise). A client component may replace some of them (FedEx's c ~ θ).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Optional, Protocol

import tensorflow as tf
import tensorflow_federated as tff

ModelWeights = tff.learning.models.ModelWeights


class RoundHparams(NamedTuple):
  """h_t: the round's client learning rate η_l and local steps K (0: epochs)."""

  lr: tf.Tensor  # float32
  steps: tf.Tensor  # int32


class Broadcast(NamedTuple):
  """What every client of round t receives."""

  model: ModelWeights  # w_t
  hparams: RoundHparams  # h_t
  extras: collections.OrderedDict  # each server component's broadcast value, by its key


class ClientHparams(NamedTuple):
  """The hyper-parameters of one client's local training (tensors inside a computation)."""

  learning_rate: tf.Tensor  # η_l (float32)
  local_steps: tf.Tensor  # K (int32; 0: local_epochs passes)
  local_epochs: tf.Tensor  # E (int32)
  batch_size: tf.Tensor  # B (int32)
  prox_mu: tf.Tensor  # μ of the proximal term (float32)
  momentum: tf.Tensor  # heavy-ball momentum (float32; FedEx only)
  weight_decay: tf.Tensor  # weight decay (float32; FedEx only)


class Broadcasting(Protocol):
  """A server component's side of the broadcast (`server.ServerComponent`)."""

  key: str

  def broadcast(self, entry) -> Optional[Any]: ...


def make_broadcast(model: ModelWeights, hparams, components: Iterable[Broadcasting],
                   entries: Mapping[str, Any]) -> Broadcast:
  """The round's broadcast: w_t, h_t (``hparams.lr``, ``hparams.steps``) and, for each component
  with something to send, ``component.broadcast(entries[component.key])`` under its key."""
  extras = collections.OrderedDict()
  for part in components:
    value = part.broadcast(entries[part.key])
    if value is not None:
      extras[part.key] = value
  return Broadcast(model=model, hparams=RoundHparams(lr=hparams.lr, steps=hparams.steps), extras=extras)


def initial_client_hparams(hparams: RoundHparams, *, local_epochs: int, batch_size: int,
                           prox_mu: float) -> ClientHparams:
  """A client's hyper-parameters before its components adjust them: h_t and the configuration's."""
  return ClientHparams(learning_rate=tf.cast(hparams.lr, tf.float32),
                       local_steps=tf.cast(hparams.steps, tf.int32),
                       local_epochs=tf.constant(local_epochs, tf.int32),
                       batch_size=tf.constant(batch_size, tf.int32),
                       prox_mu=tf.constant(prox_mu, tf.float32),
                       momentum=tf.constant(0.0), weight_decay=tf.constant(0.0))
