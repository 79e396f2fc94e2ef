"""FedEx's server half (seed 002): θ over the k client configurations in the server state,
broadcast to the clients, and its exponentiated-gradient step from their summed reports."""

from __future__ import annotations

import collections
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import server_state
from tff_robust.algorithms.methods.fedex import update
from tff_robust.algorithms.methods.fedex.space import FedExOptions
from tff_robust.algorithms.server import Round

ModelWeights = tff.learning.models.ModelWeights
KEY = update.FedExSampling.key


class FedExServer:
  """FedEx's θ over the k configurations: θ ← θ ⊙ exp(−η_t ∇̃), normalised (seed 002)."""

  key = KEY

  def __init__(self, options: FedExOptions, rows: Optional[int]):
    self.options = options
    self.rows = rows  # one θ row per hyper-parameter in the product space, else None

  def initial_state(self, weights: ModelWeights) -> collections.OrderedDict:
    return collections.OrderedDict(
        theta=tf.constant(update.initial_theta(self.options.k, self.rows), tf.float32),
        baseline_num=tf.constant(0.0), baseline_den=tf.constant(0.0))

  @staticmethod
  def broadcast(entry) -> tf.Tensor:
    """θ_t, which each client samples its configuration from."""
    return entry["theta"]

  @staticmethod
  def entry_of(theta) -> collections.OrderedDict:
    """An entry holding only θ: what `broadcast` needs (the refine evaluation's θ)."""
    return collections.OrderedDict(theta=theta)

  @classmethod
  def theta(cls, state) -> Optional[Any]:
    """θ of a process' full server state (its `server_state`), or None without FedEx."""
    entry = server_state.entry(state, cls.key)
    return None if entry is None else entry["theta"]

  def update(self, entry, round_: Round) -> tuple[collections.OrderedDict, collections.OrderedDict]:
    s = round_.reports[self.key]  # fedex.FedExReport, summed
    theta, num, den, fx_metrics = update.server_update(
        entry["theta"], entry["baseline_num"], entry["baseline_den"], s.loss, s.count, s.total,
        tf.cast(round_.t, tf.float32), self.options)
    metrics = collections.OrderedDict((k, tf.cast(v, tf.float32)) for k, v in fx_metrics.items())
    metrics["theta_max"] = tf.reduce_max(theta)
    return collections.OrderedDict(theta=theta, baseline_num=num, baseline_den=den), metrics
