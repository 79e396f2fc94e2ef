"""The reversed layers a matching layer f_j of representation matching is made of (seed 000,
§3.1 and Fig. 2): Dense and Conv2D reversed by a linear map back to the layer's input shape,
Flatten/Reshape by a reshape, MaxPooling2D by unpooling to the trainable model's argmax positions
(Zhao et al. 2015). `matching.RepresentationMatcher` chains them into f_0 .. f_{M-1}.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf


def max_unpool(values: tf.Tensor, pre_pool: tf.Tensor, pool_size: Sequence[int],
               strides: Sequence[int], padding: str) -> tf.Tensor:
  """Unpools `values` to the argmax positions of max-pooling `pre_pool`; zeros elsewhere.

  Each value at pooled position p goes to the position of the maximum of p's
  window in `pre_pool` (one position per window, also on ties), as in Zhao et
  al. (2015). This is what ``MaxPoolGrad`` computes, and its gradient
  (``MaxPoolGradGrad``) gathers from the same positions; on CPU it is much
  cheaper than ``max_pool_with_argmax`` + ``scatter_nd`` (whose backward ops
  dominated an RM step). No gradient flows into `pre_pool`.

  Args:
    values: [B, h, w, C], the shape of ``max_pool2d(pre_pool, ...)``.
    pre_pool: [B, H, W, C], the tensor that was pooled (it locates the argmaxes).
    pool_size, strides: the pooling window and strides, (rows, cols).
    padding: 'valid' or 'same' (any case).

  Returns:
    [B, H, W, C]. With overlapping windows, values sharing an argmax are summed
    (the adjoint of max pooling).
  """
  pre_pool = tf.stop_gradient(pre_pool)
  ksize, stride, pad = [1, *pool_size, 1], [1, *strides, 1], padding.upper()
  pooled = tf.nn.max_pool2d(pre_pool, ksize, stride, pad)
  return tf.raw_ops.MaxPoolGrad(orig_input=pre_pool, orig_output=pooled, grad=values,
                                ksize=ksize, strides=stride, padding=pad)


def _glorot_uniform(shape: Sequence[int], fan_in: int, fan_out: int, seed: Sequence[int]):
  limit = math.sqrt(6.0 / (fan_in + fan_out))
  return tf.random.stateless_uniform(shape, seed=seed, minval=-limit, maxval=limit,
                                     dtype=tf.float32)


class ReversedLayer:
  """One reversed layer inside a matching layer f_j."""

  def init_fns(self) -> list:
    return []

  def set_vars(self, variables: list[tf.Variable]) -> None:
    del variables

  def __call__(self, x: tf.Tensor, argmaxes: Sequence[tf.Tensor]) -> tf.Tensor:
    raise NotImplementedError


class DenseInv(ReversedLayer):
  """Dense(n_in→n_out) reversed: a linear Dense(n_out→n_in)."""

  def __init__(self, n_in: int, n_out: int, name: str, seed: tuple[int, int]):
    self.n_in, self.n_out, self.name, self.seed = n_in, n_out, name, seed

  def init_fns(self):
    return [(f"{self.name}/kernel",
             lambda: _glorot_uniform([self.n_out, self.n_in], self.n_out, self.n_in, self.seed)),
            (f"{self.name}/bias", lambda: tf.zeros([self.n_in], tf.float32))]

  def set_vars(self, variables):
    self.kernel, self.bias = variables

  def __call__(self, x, argmaxes):
    return tf.nn.bias_add(tf.matmul(x, self.kernel), self.bias)


class ConvInv(ReversedLayer):
  """Conv2D(c_in→c_out) reversed: conv c_out→c_in restoring the input's spatial size."""

  def __init__(self, layer: tf.keras.layers.Conv2D, in_shape, out_shape, name: str,
               seed: tuple[int, int]):
    self.kh, self.kw = layer.kernel_size
    self.strides = [1, *layer.strides, 1]
    self.padding = layer.padding.upper()
    self.in_shape = tuple(in_shape)      # (H, W, c_in): what f must produce
    self.c_out = out_shape[-1]
    self.transpose = tuple(in_shape[:2]) != tuple(out_shape[:2]) or tuple(layer.strides) != (1, 1)
    self.name, self.seed = name, seed

  def init_fns(self):
    c_in, c_out, k = self.in_shape[-1], self.c_out, self.kh * self.kw
    # conv2d filters are (kh, kw, in, out); conv2d_transpose filters (kh, kw, out, in).
    shape = ([self.kh, self.kw, c_in, c_out] if self.transpose
             else [self.kh, self.kw, c_out, c_in])
    return [(f"{self.name}/kernel",
             lambda: _glorot_uniform(shape, k * c_out, k * c_in, self.seed)),
            (f"{self.name}/bias", lambda: tf.zeros([c_in], tf.float32))]

  def set_vars(self, variables):
    self.kernel, self.bias = variables

  def __call__(self, x, argmaxes):
    if self.transpose:
      out_shape = tf.concat([tf.shape(x)[:1], tf.constant(self.in_shape, tf.int32)], 0)
      y = tf.nn.conv2d_transpose(x, self.kernel, out_shape, self.strides, self.padding)
      y = tf.ensure_shape(y, (None,) + self.in_shape)
    else:
      y = tf.nn.conv2d(x, self.kernel, 1, "SAME")
    return tf.nn.bias_add(y, self.bias)


class ReshapeInv(ReversedLayer):

  def __init__(self, shape):
    self.shape = [-1] + list(shape)

  def __call__(self, x, argmaxes):
    return tf.reshape(x, self.shape)


class UnpoolInv(ReversedLayer):

  def __init__(self, pool_index: int, layer: tf.keras.layers.MaxPooling2D):
    self.pool_index = pool_index
    self.pool_size, self.strides, self.padding = layer.pool_size, layer.strides, layer.padding

  def __call__(self, x, argmaxes):
    return max_unpool(x, argmaxes[self.pool_index], self.pool_size, self.strides, self.padding)
