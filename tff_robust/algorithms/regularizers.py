"""Client-loss regularizers of seed 000 §4: entropy (eq. 8) and weight divergence (FedProx), as
functions; the client components that add them to the local objective are the methods ER
(`methods.er`) and WD (`methods.wd`)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Union

import tensorflow as tf


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
