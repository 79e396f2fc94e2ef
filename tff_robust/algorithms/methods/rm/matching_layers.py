"""The layers a matching layer f_j of representation matching is made of (seed 000, §3.1 and
Fig. 2), in two forms (`matching.LAYER_FORMS`):

- ``authors`` (`authors_ops`): one Linear (flat source) or one conv after unpooling the
  source through its own max-pool (spatial source), then the target's non-linearity;
- ``reversed`` (`reversed_ops`): Dense and Conv2D reversed by a linear map back to the layer's
  input shape, Flatten/Reshape by a reshape, MaxPooling2D by unpooling.

Unpooling puts values at the trainable model's argmax positions (Zhao et al. 2015).
`matching.RepresentationMatcher` chains the ops into f_0 .. f_{M-1}.
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


# ---- The authors' matching layers (seed 000 §3.1; its authors' public implementation) ------
# One parametrised layer per matching layer f_j, after unpooling the source through its own
# max-pools, then the target activation's own non-linearity.


def fit_spatial(x: tf.Tensor, size: Sequence[int]) -> tf.Tensor:
  """Zero-pads (or centre-crops) the rows and columns of [B, h, w, C] to ``size`` = (H, W);
  padding puts ⌊d/2⌋ before and the rest after, as the authors' matching layers do."""
  shape = x.shape.as_list()
  for axis, target in ((1, size[0]), (2, size[1])):
    d = target - shape[axis]
    if d > 0:
      pads = [[0, 0]] * 4
      pads[axis] = [d // 2, d - d // 2]
      x = tf.pad(x, pads)
    elif d < 0:
      start = (-d) // 2
      x = tf.slice(x, [0] * axis + [start] + [0] * (3 - axis),
                   [-1] * axis + [target] + [-1] * (3 - axis))
    shape = x.shape.as_list()
  return x


class MatchDense(ReversedLayer):
  """A fully connected source: Linear(source units → target units), reshaped to the target."""

  def __init__(self, n_src: int, target_shape: Sequence[int], name: str, seed: tuple[int, int]):
    self.n_src, self.target_shape = n_src, tuple(target_shape)
    self.n_tgt = int(math.prod(self.target_shape))
    self.name, self.seed = name, seed

  def init_fns(self):
    return [(f"{self.name}/kernel",
             lambda: _glorot_uniform([self.n_src, self.n_tgt], self.n_src, self.n_tgt, self.seed)),
            (f"{self.name}/bias", lambda: tf.zeros([self.n_tgt], tf.float32))]

  def set_vars(self, variables):
    self.kernel, self.bias = variables

  def __call__(self, x, argmaxes):
    y = tf.nn.bias_add(tf.matmul(x, self.kernel), self.bias)
    return tf.reshape(y, [-1, *self.target_shape]) if len(self.target_shape) > 1 else y


class MatchConv(ReversedLayer):
  """A convolutional source (already unpooled): fitted to the target's rows and columns
  (`fit_spatial`), then one conv, source channels → target channels, ``kernel`` × ``kernel``,
  'same' padding. A strided conv in between is undone by a transposed conv with its stride
  instead (``transpose_of``: (strides, padding) of that conv)."""

  def __init__(self, kernel: Sequence[int], c_src: int, target_shape: Sequence[int], name: str,
               seed: tuple[int, int], transpose_of: tuple | None = None):
    self.kh, self.kw = kernel
    self.c_src, self.target_shape = c_src, tuple(target_shape)
    self.transpose_of = transpose_of
    self.name, self.seed = name, seed

  def init_fns(self):
    k, c_src, c_tgt = self.kh * self.kw, self.c_src, self.target_shape[-1]
    # conv2d filters are (kh, kw, in, out); conv2d_transpose filters (kh, kw, out, in).
    shape = ([self.kh, self.kw, c_tgt, c_src] if self.transpose_of
             else [self.kh, self.kw, c_src, c_tgt])
    return [(f"{self.name}/kernel", lambda: _glorot_uniform(shape, k * c_src, k * c_tgt, self.seed)),
            (f"{self.name}/bias", lambda: tf.zeros([c_tgt], tf.float32))]

  def set_vars(self, variables):
    self.kernel, self.bias = variables

  def __call__(self, x, argmaxes):
    if self.transpose_of:
      strides, padding = self.transpose_of
      out_shape = tf.concat([tf.shape(x)[:1], tf.constant(self.target_shape, tf.int32)], 0)
      y = tf.nn.conv2d_transpose(x, self.kernel, out_shape, [1, *strides, 1], padding.upper())
      y = tf.ensure_shape(y, (None,) + self.target_shape)
    else:
      y = tf.nn.conv2d(fit_spatial(x, self.target_shape[:2]), self.kernel, 1, "SAME")
    return tf.nn.bias_add(y, self.bias)


class Activate(ReversedLayer):
  """The target activation's own point-wise non-linearity (ReLU for a ReLU layer)."""

  def __init__(self, fn):
    self.fn = fn

  def __call__(self, x, argmaxes):
    return self.fn(x)


# ---- Building f_j for the layers between a_j and a_{j+1} ----------------------------------
_L = tf.keras.layers


def reversed_ops(layers: Sequence, shapes: Sequence, pool_layers: Sequence[int], lo: int, hi: int,
                 name: str, next_seed) -> list[ReversedLayer]:
  """``reversed`` form: layers hi, hi-1, .., lo+1 each undone in turn (Dense and Conv2D by a
  linear map, Flatten/Reshape by a reshape, MaxPooling2D by unpooling), no non-linearity."""
  ops = []
  for i in range(hi, lo, -1):
    layer, in_shape, out_shape = layers[i], shapes[i], shapes[i + 1]
    if isinstance(layer, _L.Dense):
      ops.append(DenseInv(in_shape[-1], out_shape[-1], f"{name}_{layer.name}", next_seed()))
    elif isinstance(layer, _L.Conv2D):
      ops.append(ConvInv(layer, in_shape, out_shape, f"{name}_{layer.name}", next_seed()))
    elif isinstance(layer, (_L.Flatten, _L.Reshape)):
      ops.append(ReshapeInv(in_shape))
    elif isinstance(layer, _L.MaxPooling2D):
      ops.append(UnpoolInv(list(pool_layers).index(i), layer))
  return ops


def authors_ops(layers: Sequence, shapes: Sequence, pool_layers: Sequence[int], lo: int, hi: int,
                activation, name: str, next_seed) -> list[ReversedLayer]:
  """``authors`` form of f_j, source a_{j+1} (output of layer hi), target a_j (output of layer
  lo; the input when lo = -1): a flat source → one Linear to all of a_j's units; a spatial
  source → unpooled through the max-pools between the segment's last conv and a_{j+1} (the
  trainable model's own argmaxes), fitted to a_j's rows and columns, one conv (the model conv's
  kernel; 3 × 3 without one) → then a_j's own non-linearity (``activation``; None: identity).
  Raises ValueError for a spatial source whose max-pool lies below a conv of the segment."""
  src, tgt = shapes[hi + 1], shapes[lo + 1]
  if len(src) == 1:
    ops: list[ReversedLayer] = [MatchDense(src[0], tgt, name, next_seed())]
  else:
    seg = range(lo + 1, hi + 1)
    conv_tgt = tgt   # a flat target reshaped to rows × columns in the segment: match that shape
    if len(tgt) != 3:
      spatial = [i for i in seg if isinstance(layers[i], _L.Reshape) and len(shapes[i + 1]) == 3]
      if not spatial:
        raise ValueError(f"a spatial source {src} above a non-spatial target {tgt}")
      conv_tgt = shapes[spatial[0] + 1]
    params = [i for i in seg if isinstance(layers[i], (_L.Dense, _L.Conv2D))]
    last = params[-1] if params else lo
    pools = [i for i in seg if isinstance(layers[i], _L.MaxPooling2D)]
    if any(i < last for i in pools):
      raise ValueError(f"max-pool '{layers[pools[0]].name}' lies below conv '{layers[last].name}' "
                       "(its argmaxes cannot unpool the source); use --rm_layers=reversed")
    ops = [UnpoolInv(list(pool_layers).index(i), layers[i]) for i in reversed(pools)]
    conv = layers[last] if params else None
    kernel = tuple(conv.kernel_size) if conv is not None else (3, 3)
    transpose = None
    if conv is not None and tuple(conv.strides) != (1, 1):
      if len(params) > 1 or tuple(shapes[last]) != tuple(conv_tgt):
        raise ValueError(f"strided conv '{conv.name}' is not the only layer below the source")
      transpose = (tuple(conv.strides), conv.padding)
    ops.append(MatchConv(kernel, src[-1], conv_tgt, name, next_seed(), transpose))
    if conv_tgt != tgt:
      ops.append(ReshapeInv(tgt))
  if activation is not None:
    ops.append(Activate(activation))
  return ops
