"""Representation matching (RM): §3.1, eqs. 1-2 and Fig. 2 of seed 000.

A client trains a model M^i (weights w^i) next to a frozen copy M^F of the
server model (weights w). The activations of interest are a_0 = the input, the
output of every point-wise non-linearity, and a_M = the top layer (logits).
Matching layer f_j (parameters θ_j) rebuilds the frozen model's a_j(x; w) from
the trainable model's next activation of interest a_{j+1}(x; w^i) (eq. 1):

  L_M = Σ_{j=0}^{M-1} ‖f_j(a_{j+1}(x; w^i); θ_j) − a_j(x; w)‖²,

squared L2 summed over all units of a_j, averaged over the batch.

The matching layers (``form``, `matching_layers`):
- ``authors`` (default): as the paper's authors built them. A non-linearity followed by a
  max-pool is read after the pool (their layer order conv → pool → ReLU). f_j is one layer:
  a flat a_{j+1} → one Linear to all of a_j's units; a spatial a_{j+1} → unpooled through
  its own max-pool at the *trainable* model's argmaxes (Zhao et al. 2015, "what-where"),
  zero-padded to a_j's rows and columns, one conv (the model's kernel, 'same'); then a_j's
  own non-linearity (identity for the input). The reconstruction of a pooled layer is dense.
- ``reversed``: the layers between a_j and a_{j+1} undone one by one in reverse order, with
  no non-linearity; a conv before an unpooling leaves 3/4 of a pre-pool target at zero.

Everything here is plain TF ops on variables made at construction time, so it
works eagerly, in `tf.function` and inside `tff.tensorflow.computation` graphs.

L_M's scale grows with layer width. What the model w^i feels is weighted per term by
`normalized_matching_loss`: ``sum`` is eq. 1 as printed (the authors' coefficient is 1e-4 on
this sum), ``unit`` divides term j by a_j's number of units. θ always descends eq. 1's sum
form with an optimizer of its own (see `client_work`). ``top_source`` can feed the top term
softmax(a_M) instead of the logits, or drop it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.methods.rm import matching_layers

_L = tf.keras.layers

# Exact classes (subclasses such as Conv2DTranspose or DepthwiseConv2D of Conv2D
# would be silently mis-reversed, so they are not accepted).
_PARAM_TYPES = (_L.Dense, _L.Conv2D)
_SHAPE_TYPES = (_L.Flatten, _L.Reshape, _L.MaxPooling2D)
_IDENTITY_TYPES = (_L.Dropout,)
_ACTIVATION_TYPES = (_L.Activation, _L.ReLU, _L.LeakyReLU)
_SUPPORTED_TYPES = _PARAM_TYPES + _SHAPE_TYPES + _IDENTITY_TYPES + _ACTIVATION_TYPES
SUPPORTED_LAYERS: tuple[str, ...] = tuple(t.__name__ for t in _SUPPORTED_TYPES)

# How eq. 1's terms are weighted in the model's objective (see `normalized_matching_loss`).
NORMALIZATIONS = ("unit", "sum")
# What f_{M-1}, the top matching layer, rebuilds a_{M-1} from: the top layer a_M as printed
# (``logits``), its softmax (bounded), or nothing (no top term).
TOP_SOURCES = ("logits", "softmax", "none")
# Which matching layers f_j are built: ``authors`` (one conv or Linear per f_j after unpooling,
# ending in the target's own non-linearity, as the paper's authors built them) or ``reversed``
# (every layer between a_j and a_{j+1} undone in reverse order, no non-linearity).
LAYER_FORMS = ("authors", "reversed")

# Activation functions that are not point-wise and so cannot be matched.
_NON_POINTWISE = ("softmax", "log_softmax")


class UnsupportedLayerError(ValueError):
  """The model has a layer (or structure) that representation matching cannot reverse."""


def _supported_list() -> str:
  return ", ".join(SUPPORTED_LAYERS)


def _layer_error(layer: tf.keras.layers.Layer, why: str) -> UnsupportedLayerError:
  return UnsupportedLayerError(
      f"representation matching cannot reverse layer '{layer.name}' "
      f"({type(layer).__name__}): {why}. Supported layer types: {_supported_list()} "
      f"(Dense/Conv2D with point-wise activations, channels_last, no dilation/groups).")


def _layers(layers) -> list:
  """The model's layers without a leading InputLayer."""
  return [l for l in layers if not isinstance(l, _L.InputLayer)]


def _activation_name(fn) -> str:
  return getattr(fn, "__name__", type(fn).__name__)


def _is_nonlinear(layer: tf.keras.layers.Layer) -> bool:
  """Whether `layer`'s output is a point-wise non-linearity (an activation of interest)."""
  if isinstance(layer, (_L.ReLU, _L.LeakyReLU)):
    return True
  if isinstance(layer, (_L.Activation,) + _PARAM_TYPES):
    return _activation_name(layer.activation) != "linear"
  return False


def _is_trivial(layer: tf.keras.layers.Layer) -> bool:
  """Layers that neither change the representation's shape nor carry parameters."""
  return isinstance(layer, _IDENTITY_TYPES) or (
      isinstance(layer, _L.Activation) and not _is_nonlinear(layer))


@dataclasses.dataclass(frozen=True)
class _Plan:
  """Static description of a model: per-layer shapes and activation points."""

  shapes: tuple[tuple[int, ...], ...]     # shapes[i] = input shape of layer i; [-1] = output
  act_after: tuple[int, ...]              # layer indices whose output is a_1..a_M
  act_layers: tuple[int, ...]             # the layer whose non-linearity made a_1..a_M
  pool_layers: tuple[int, ...]            # layer indices of the max-pools, in order
  layer_types: tuple[type, ...]


def _check_layer(layer: tf.keras.layers.Layer, in_shape: tuple) -> None:
  if type(layer) not in _SUPPORTED_TYPES:
    raise _layer_error(layer, "unsupported layer type")
  act = getattr(layer, "activation", None)
  if act is not None and _activation_name(act) in _NON_POINTWISE:
    raise _layer_error(layer, f"activation '{_activation_name(act)}' is not point-wise")
  if isinstance(layer, _L.Dense) and len(in_shape) != 1:
    raise _layer_error(layer, f"Dense on a rank-{len(in_shape) + 1} input {in_shape} "
                       "(only flat inputs are supported; add a Flatten)")
  if isinstance(layer, (_L.Conv2D, _L.MaxPooling2D)):
    if layer.data_format != "channels_last":
      raise _layer_error(layer, f"data_format='{layer.data_format}' (need channels_last)")
    if len(in_shape) != 3:
      raise _layer_error(layer, f"input shape {in_shape} is not (height, width, channels)")
  if isinstance(layer, _L.Conv2D):
    if tuple(layer.dilation_rate) != (1, 1):
      raise _layer_error(layer, f"dilation_rate={layer.dilation_rate}")
    if layer.groups != 1:
      raise _layer_error(layer, f"groups={layer.groups}")
    if layer.padding not in ("same", "valid"):
      raise _layer_error(layer, f"padding='{layer.padding}'")


def _input_shape(model: tf.keras.Model) -> tuple[int, ...]:
  shape = None
  try:
    shape = model.input_shape
  except AttributeError:
    shape = getattr(model, "_build_input_shape", None)
  if shape is None or isinstance(shape, list):
    raise UnsupportedLayerError(
        f"representation matching needs a built model with one known input shape; "
        f"model '{model.name}' has input shape {shape}")
  shape = tuple(tf.TensorShape(shape).as_list()[1:])
  if any(d is None for d in shape):
    raise UnsupportedLayerError(
        f"representation matching needs a fully known input shape; model '{model.name}' "
        f"has (batch,)+{shape}")
  return shape


def _pool_after(layers: Sequence, i: int) -> int:
  """The index of a MaxPooling2D that follows layer i through identity layers only, else i."""
  k = i + 1
  while k < len(layers) and isinstance(layers[k], _IDENTITY_TYPES):
    k += 1
  return k if k < len(layers) and isinstance(layers[k], _L.MaxPooling2D) else i


def _plan(model: tf.keras.Model, form: str = "authors") -> _Plan:
  """Validates `model` and derives the static plan (no variables are created).

  In the ``authors`` form a non-linearity followed by a max-pool is read after the pool: the
  authors' layer order conv → pool → ReLU (max-pooling commutes with a non-decreasing
  point-wise activation), so the pooled activation is the activation of interest."""
  if not isinstance(model, tf.keras.Sequential):
    raise UnsupportedLayerError(
        f"representation matching needs a tf.keras.Sequential model; got "
        f"{type(model).__name__} '{model.name}'. Supported layer types: {_supported_list()}")
  if not model.built:
    raise UnsupportedLayerError(
        f"model '{model.name}' is not built: build it with a known input shape "
        "(tf.keras.Input(...) as first layer or model.build((None, ...)))")
  layers = _layers(model.layers)
  if not layers:
    raise UnsupportedLayerError(f"model '{model.name}' has no layers")
  shape = _input_shape(model)
  shapes = [shape]
  for layer in layers:
    _check_layer(layer, shape)
    shape = tuple(tf.TensorShape(layer.compute_output_shape((None,) + shape)).as_list()[1:])
    shapes.append(shape)
  n = len(layers)
  act_after = [i for i, l in enumerate(layers) if _is_nonlinear(l)]
  # The top layer a_M is the model output. If only parameter-free identity layers
  # (Dropout, linear Activation) follow the last non-linearity, that output *is*
  # the last non-linearity and is not counted twice.
  if act_after and all(_is_trivial(l) for l in layers[act_after[-1] + 1:]):
    act_after.pop()
  act_after.append(n - 1)
  act_layers = tuple(act_after)
  if form == "authors":
    act_after = [_pool_after(layers, i) for i in act_after[:-1]] + [n - 1]
  pools = [i for i, l in enumerate(layers) if isinstance(l, _L.MaxPooling2D)]
  return _Plan(shapes=tuple(shapes), act_after=tuple(act_after), act_layers=act_layers,
               pool_layers=tuple(pools), layer_types=tuple(type(l) for l in layers))


def check_supported(model: tf.keras.Model, form: str = "authors") -> None:
  """Raises `UnsupportedLayerError` if RM cannot handle `model` (cheap: no variables made)."""
  _segments(model, 0, "logits", form)


def _activation_fn(layer: tf.keras.layers.Layer):
  """The point-wise non-linearity of a layer of interest, as a stateless callable."""
  if isinstance(layer, (_L.ReLU, _L.LeakyReLU)):
    return type(layer).from_config(layer.get_config())
  return layer.activation


def _segments(model: tf.keras.Sequential, seed: int, top_source: str, form: str):
  """The model's plan, the matching layers f_0..f_{M-1} as lists of ops (no variables yet) and
  θ's init functions."""
  if top_source not in TOP_SOURCES:
    raise ValueError(f"top_source={top_source!r}; valid: {', '.join(TOP_SOURCES)}")
  if form not in LAYER_FORMS:
    raise ValueError(f"form={form!r}; valid: {', '.join(LAYER_FORMS)}")
  plan = _plan(model, form)
  layers = _layers(model.layers)
  bounds = (-1,) + plan.act_after      # segment j covers layers bounds[j]+1 .. bounds[j+1]
  num_terms = len(plan.act_after) - (top_source == "none")
  if num_terms < 1:
    raise ValueError(f"--rm_top_source=none leaves no term to match: model '{model.name}' has "
                     "no point-wise non-linearity below its top layer; use logits or softmax")
  segments, init_fns, counter = [], [], [0]

  def next_seed() -> tuple[int, int]:
    counter[0] += 1
    return (int(seed), counter[0] - 1)

  for j in range(num_terms):
    lo, hi = bounds[j], bounds[j + 1]
    if form == "reversed":
      ops = matching_layers.reversed_ops(layers, plan.shapes, plan.pool_layers, lo, hi,
                                         f"rm_f{j}", next_seed)
    else:
      act = _activation_fn(layers[plan.act_layers[j - 1]]) if j > 0 else None
      try:
        ops = matching_layers.authors_ops(layers, plan.shapes, plan.pool_layers, lo, hi, act,
                                          f"rm_f{j}", next_seed)
      except ValueError as e:
        raise UnsupportedLayerError(f"representation matching (--rm_layers=authors) cannot build "
                                    f"f_{j} of model '{model.name}': {e}") from e
    for op in ops:
      init_fns.extend(op.init_fns())
    segments.append(ops)
  return plan, segments, init_fns


class RepresentationMatcher:
  """Matching layers θ = [θ_0, ..., θ_{M-1}] for one Sequential architecture (eq. 1).

  Attributes:
    theta: the matching parameters, in a fixed order (f_0 first; within f_j in
      the order the reversed layers are applied; kernel before bias).
    num_activations: M + 1, the number of activations a_0..a_M.
  """

  def __init__(self, model: tf.keras.Sequential, seed: int = 0, top_source: str = "logits",
               form: str = "authors"):
    """``top_source``: what f_{M-1} rebuilds a_{M-1} from (`TOP_SOURCES`): the top layer a_M
    (``logits``, Fig. 2 as printed), softmax(a_M), whose units stay in [0, 1] however far a
    large step moves the logits, or ``none``: no top term, eq. 1 runs over j < M-1.
    ``form``: which matching layers (`LAYER_FORMS`, see `matching_layers`)."""
    self._plan, self._segments, init_fns = _segments(model, seed, top_source, form)
    self._seed = int(seed)
    self.top_source, self.form = top_source, form
    self._init_fns = init_fns
    self.theta: list[tf.Variable] = []
    for name, fn in init_fns:
      self.theta.append(tf.Variable(fn, trainable=True, name=name.replace(":", "_")))
    k = 0
    for ops in self._segments:
      for op in ops:
        n = len(op.init_fns())
        op.set_vars(self.theta[k:k + n])
        k += n

  @property
  def num_activations(self) -> int:
    return len(self._plan.act_after) + 1

  def initial_theta(self) -> list[np.ndarray]:
    """The values fresh θ variables take (glorot-uniform kernels, zero biases).

    Deterministic given `seed` (stateless RNG), computed in a private graph so
    it can be called from eager code or while another graph is being built.
    """
    graph = tf.Graph()
    with graph.as_default():
      tensors = [fn() for _, fn in self._init_fns]
    with tf.compat.v1.Session(graph=graph) as sess:
      return list(sess.run(tensors))

  def _check_model(self, model: tf.keras.Model) -> None:
    types = tuple(type(l) for l in _layers(model.layers))
    if types != self._plan.layer_types:
      raise ValueError(
          f"model '{model.name}' has layers {[t.__name__ for t in types]}, but this "
          f"matcher was built for {[t.__name__ for t in self._plan.layer_types]}")

  @tf.autograph.experimental.do_not_convert
  def forward(self, model: tf.keras.Sequential, x: tf.Tensor, training: bool,
              record_argmax: bool) -> tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor]]:
    """Runs `model`'s own layers one by one.

    Returns:
      ``(logits, [a_0, ..., a_M], argmaxes)``: the logits equal
      ``model(x, training=training)``. ``argmaxes`` has one tensor per max-pool,
      its input (pre-pool activation), which fixes the argmax positions used to
      unpool (see `matching_layers.max_unpool`); it is empty unless `record_argmax` (the frozen
      model needs none).
    """
    self._check_model(model)
    h = tf.cast(x, tf.float32)
    acts, argmaxes = [h], []
    act_after = set(self._plan.act_after)
    for i, layer in enumerate(_layers(model.layers)):
      if record_argmax and isinstance(layer, _L.MaxPooling2D):
        argmaxes.append(h)
      h = layer(h, training=training)
      if i in act_after:
        acts.append(h)
    return h, acts, argmaxes

  @tf.autograph.experimental.do_not_convert
  def reconstructions(self, trainable_acts: Sequence[tf.Tensor],
                      argmaxes: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """[f_0(a_1; θ_0), ..., f_{M-1}(a_M; θ_{M-1})] from the trainable model's activations
    (f_{M-1} of softmax(a_M), or no f_{M-1}, as ``top_source`` says)."""
    if len(trainable_acts) != self.num_activations:
      raise ValueError(f"trainable_acts has {len(trainable_acts)} tensors; expected "
                       f"{self.num_activations} (a_0..a_M from forward())")
    if len(argmaxes) != len(self._plan.pool_layers):
      raise ValueError(
          f"argmaxes has {len(argmaxes)} tensors; expected {len(self._plan.pool_layers)} "
          "(call forward() on the trainable model with record_argmax=True)")
    outs = []
    top = len(trainable_acts) - 1
    for j, ops in enumerate(self._segments):
      h = trainable_acts[j + 1]
      if j + 1 == top and self.top_source == "softmax":
        h = tf.nn.softmax(h)
      for op in ops:
        h = op(h, argmaxes)
      outs.append(h)
    return outs

  @property
  def term_units(self) -> tuple[int, ...]:
    """Units of each target a_0, ..., a_{M-1} (a_{M-2} without a top term): the size of eq. 1's
    j-th term."""
    shapes = (self._plan.shapes[0],) + tuple(self._plan.shapes[i + 1] for i in self._plan.act_after)
    return tuple(int(np.prod(s)) for s in shapes[:len(self._segments)])

  @tf.autograph.experimental.do_not_convert
  def matching_terms(self, trainable_acts: Sequence[tf.Tensor], argmaxes: Sequence[tf.Tensor],
                     frozen_acts: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """Eq. 1's terms ‖f_j(a_{j+1}(x; w^i); θ_j) − a_j(x; w)‖², j = 0..M−1, each summed over
    a_j's units and averaged over the batch.

    Args:
      trainable_acts, argmaxes: the 2nd and 3rd outputs of `forward` on the
        trainable model M^i with ``record_argmax=True``.
      frozen_acts: the 2nd output of `forward` on the frozen model M^F; they
        are targets only (stop-gradient).
    """
    if len(frozen_acts) != self.num_activations:
      raise ValueError(f"frozen_acts has {len(frozen_acts)} tensors; expected "
                       f"{self.num_activations} (a_0..a_M from forward())")
    recs = self.reconstructions(trainable_acts, argmaxes)
    batch = tf.cast(tf.shape(trainable_acts[0])[0], tf.float32)
    return [tf.reduce_sum(tf.math.squared_difference(rec, tf.stop_gradient(target))) / batch
            for rec, target in zip(recs, frozen_acts[:len(recs)])]

  def matching_loss(self, trainable_acts: Sequence[tf.Tensor], argmaxes: Sequence[tf.Tensor],
                    frozen_acts: Sequence[tf.Tensor]) -> tf.Tensor:
    """Eq. 1 of seed 000 as printed (the sum of `matching_terms`), averaged over the batch."""
    return tf.add_n(self.matching_terms(trainable_acts, argmaxes, frozen_acts))


def normalized_matching_loss(terms: Sequence[tf.Tensor], units: Sequence[int],
                             normalize: str) -> tf.Tensor:
  """The matching loss the model w^i descends (weighted by the RM weight in eq. 2).

  ``sum``: Σ_j terms_j, eq. 1 as printed. ``unit``: Σ_j terms_j / U_j, where U_j
  is a_j's number of units: each layer's mean squared reconstruction error per
  unit, so the RM weight does not grow with layer width.
  """
  if normalize not in NORMALIZATIONS:
    raise ValueError(f"normalize={normalize!r}; valid: {', '.join(NORMALIZATIONS)}")
  if len(terms) != len(units):
    raise ValueError(f"{len(terms)} terms but {len(units)} unit counts")
  if normalize == "sum":
    return tf.add_n(list(terms))
  return tf.add_n([t / float(u) for t, u in zip(terms, units)])
