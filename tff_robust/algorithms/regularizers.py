"""Client-loss regularizers of seed 000 §4: entropy (eq. 8) and weight divergence (FedProx), as
functions and as the client components that add them to the local objective."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Union

import tensorflow as tf

from tff_robust.algorithms.client import Component, Forward, LocalRun, LossTerm, Step

Scalar = Union[float, tf.Tensor]


def entropy_regularizer(logits: tf.Tensor, h_min: Scalar) -> tf.Tensor:
  """Eq. 8 of seed 000: mean over the batch of max(0, H_min − H(softmax(logits))).

  Args:
    logits: [..., num_classes] top-layer activations a_M; every leading index is
      one example.
    h_min: entropy floor H_min in nats (natural log), >= 0; a Python number or
      a scalar tensor (e.g. a hyper-parameter fed into a TFF computation).
  """
  if isinstance(h_min, numbers.Number) and not h_min >= 0:
    raise ValueError(f"h_min must be a non-negative entropy in nats; got {h_min!r}")
  logits = tf.convert_to_tensor(logits)
  if logits.shape.rank is not None and logits.shape.rank < 1:
    raise ValueError(f"logits must have a class axis (rank >= 1); got shape {logits.shape}")
  log_p = tf.nn.log_softmax(logits, axis=-1)
  entropy = -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)
  h_min = tf.cast(h_min, entropy.dtype)
  return tf.reduce_mean(tf.nn.relu(h_min - entropy))


def weight_divergence(trainable_weights: Sequence[tf.Tensor],
                      initial_weights: Sequence[tf.Tensor]) -> tf.Tensor:
  """‖w_t − w^i‖², summed over all tensors (the FedProx / FA+WD baseline of seed 000 §4).

  `initial_weights` (the weights received from the server) get no gradient.
  """
  trainable_weights, initial_weights = list(trainable_weights), list(initial_weights)
  if len(trainable_weights) != len(initial_weights):
    raise ValueError(f"trainable_weights has {len(trainable_weights)} tensors but "
                     f"initial_weights has {len(initial_weights)}; they must pair up")
  total = tf.constant(0.0, tf.float32)
  for k, (w, w0) in enumerate(zip(trainable_weights, initial_weights)):
    w, w0 = tf.convert_to_tensor(w), tf.convert_to_tensor(w0)
    if not w.shape.is_compatible_with(w0.shape):
      raise ValueError(f"trainable_weights[{k}] has shape {w.shape} but "
                       f"initial_weights[{k}] has shape {w0.shape}")
    diff = tf.cast(w, tf.float32) - tf.stop_gradient(tf.cast(w0, tf.float32))
    total += tf.reduce_sum(tf.square(diff))
  return total


class EntropyTerm(Component):
  """ER as a client component: + max(0, H_min − H(softmax(a_M))) on every batch (eq. 8)."""

  key = "er"

  def __init__(self, h_min: float):
    self.h_min = h_min

  def loss(self, run: LocalRun, x, y, fwd: Forward) -> LossTerm:
    return LossTerm(entropy_regularizer(fwd.logits, self.h_min))


class ProximalTerm(Component):
  """The proximal term as a client component: + μ ‖w^i − w_t‖² (μ: ``--wd_mu``, or FedEx's draw).

  It enters as its gradient, 2μ (w^i − w_t), added to the gradient of the rest of the objective:
  the same step as differentiating `weight_divergence` inside the tape, without the term's
  forward pass and its backward through the square and the sum (element-wise passes over every
  weight at each step, memory-bound: docs/performance.md, Table 4)."""

  key = "prox"

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    mu2 = 2.0 * tf.cast(run.hp["prox_mu"], tf.float32)
    return [g + tf.cast(mu2, g.dtype) * (w - tf.cast(w0, g.dtype))
            for g, w, w0 in zip(grads, run.model.trainable_variables, run.initial)]
