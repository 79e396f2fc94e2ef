"""Tests for tff_robust.algorithms.matching (representation matching, eqs. 1-2 of seed 000)."""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.methods.rm import matching_layers

L = tf.keras.layers


# The five architectures RM must handle (as described in the brief / seed 000 §4).
def mnist_2nn():
  return tf.keras.Sequential([tf.keras.Input((784,)), L.Dense(100, activation="relu"),
                              L.Dense(100, activation="relu"), L.Dense(10)])


def cifar_cnn():
  return tf.keras.Sequential([
      tf.keras.Input((32, 32, 3)), L.Conv2D(32, 5, padding="same", activation="relu"),
      L.MaxPooling2D(2), L.Conv2D(64, 5, padding="same", activation="relu"), L.MaxPooling2D(2),
      L.Flatten(), L.Dense(1024, activation="relu"), L.Dense(10)])


def kws_net():
  conv = lambda: L.Conv2D(64, 3, padding="same", activation="relu")
  return tf.keras.Sequential([
      tf.keras.Input((32, 32, 1)), conv(), conv(), L.MaxPooling2D(2), conv(), conv(),
      L.MaxPooling2D(2), L.Flatten(), L.Dense(1024, activation="relu"), L.Dense(10)])


def emnist_cr_cnn():
  return tf.keras.Sequential([
      tf.keras.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"),
      L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2), L.Dropout(0.25), L.Flatten(),
      L.Dense(128, activation="relu"), L.Dropout(0.5), L.Dense(62)])


def mcmahan_cnn():
  # Second conv without activation, as in the brief: relu1 -> ... -> relu(Dense 512).
  return tf.keras.Sequential([
      tf.keras.Input((28, 28, 1)), L.Conv2D(32, 5, padding="same", activation="relu"),
      L.MaxPooling2D(2), L.Conv2D(64, 5, padding="same"), L.MaxPooling2D(2), L.Flatten(),
      L.Dense(512, activation="relu"), L.Dense(10)])


# Expected a_0..a_M shapes (without batch) and number of max-pools.
EXPECTED = collections.OrderedDict(
    mnist_2nn=(mnist_2nn, [(784,), (100,), (100,), (10,)], 0),
    cifar_cnn=(cifar_cnn, [(32, 32, 3), (32, 32, 32), (16, 16, 64), (1024,), (10,)], 2),
    kws_net=(kws_net, [(32, 32, 1), (32, 32, 64), (32, 32, 64), (16, 16, 64), (16, 16, 64),
                       (1024,), (10,)], 2),
    emnist_cr_cnn=(emnist_cr_cnn, [(28, 28, 1), (26, 26, 32), (24, 24, 64), (128,), (62,)], 1),
    mcmahan_cnn=(mcmahan_cnn, [(28, 28, 1), (28, 28, 32), (512,), (10,)], 2),
)


# The authors' form reads a non-linearity followed by a max-pool after the pool.
AUTHORS_SHAPES = dict(
    mnist_2nn=EXPECTED["mnist_2nn"][1],
    cifar_cnn=[(32, 32, 3), (16, 16, 32), (8, 8, 64), (1024,), (10,)],
    kws_net=[(32, 32, 1), (32, 32, 64), (16, 16, 64), (16, 16, 64), (8, 8, 64), (1024,), (10,)],
    emnist_cr_cnn=[(28, 28, 1), (26, 26, 32), (12, 12, 64), (128,), (62,)],
    mcmahan_cnn=[(28, 28, 1), (14, 14, 32), (512,), (10,)],
)


def _shapes(name, form):
  return AUTHORS_SHAPES[name] if form == "authors" else EXPECTED[name][1]


@pytest.fixture(autouse=True, scope="module")
def _models_live_with_this_module():
  """The models `_build`, `_frozen` and `_matcher` cache are dropped when pytest leaves this
  module. Keras swaps a layer class's bases to its TF1 form whenever a layer is made in graph mode
  (as a TFF computation's trace makes them), which makes every model built before unusable; a
  test of another module run in between (work stealing) would leave the cached ones so."""
  yield
  for cached in (_build, _frozen, _matcher):
    cached.cache_clear()


@functools.lru_cache(maxsize=None)
def _build(name, seed=0):
  """Each architecture is built once (glorot-initialising CIFAR's and KWS's 4M and 16M weights
  and building their layers cost about a third of this file's CPU when each test built its own):
  no test changes a model's weights (they train θ only, or take gradients without applying them)."""
  tf.keras.utils.set_random_seed(seed)
  return EXPECTED[name][0]()


def _inputs(model, batch, seed=0):
  shape = (batch,) + tuple(model.input_shape[1:])
  return tf.constant(np.random.default_rng(seed).uniform(size=shape).astype(np.float32))


def _perturbed_copy(model, builder, scale=0.05, seed=1):
  """A model of the same architecture whose weights differ slightly (the frozen M^F)."""
  rng = np.random.default_rng(seed)
  other = builder()
  other.set_weights([w + scale * rng.standard_normal(w.shape).astype(np.float32)
                     for w in model.get_weights()])
  return other


@functools.lru_cache(maxsize=None)
def _frozen(name):
  """The frozen M^F of ``_build(name)``, built once (see `_build`)."""
  return _perturbed_copy(_build(name), EXPECTED[name][0])


@functools.lru_cache(maxsize=None)
def _matcher(name, form):
  """θ at seed 0 for ``_build(name)``, shared by the tests that read it and do not train it."""
  return matching.RepresentationMatcher(_build(name), seed=0, form=form)


def _numpy_unpool(values, pre_pool, pool, strides, padding):
  """Reference: each pooled value added at its window's argmax (distinct inputs assumed)."""
  b, h, w, c = pre_pool.shape
  ph, pw = pool
  sh, sw = strides
  out_h, out_w = values.shape[1:3]
  if padding == "same":
    pad_top = max((out_h - 1) * sh + ph - h, 0) // 2
    pad_left = max((out_w - 1) * sw + pw - w, 0) // 2
  else:
    pad_top = pad_left = 0
  out = np.zeros_like(pre_pool)
  for n in range(b):
    for i in range(out_h):
      for j in range(out_w):
        for k in range(c):
          best, pos = -np.inf, None
          for di in range(ph):
            for dj in range(pw):
              y, x = i * sh + di - pad_top, j * sw + dj - pad_left
              if 0 <= y < h and 0 <= x < w and pre_pool[n, y, x, k] > best:
                best, pos = pre_pool[n, y, x, k], (y, x)
          out[n, pos[0], pos[1], k] += values[n, i, j, k]
  return out


@pytest.mark.parametrize("shape,pool,strides,padding", [
    ((2, 6, 6, 3), (2, 2), (2, 2), "valid"),
    ((2, 7, 5, 2), (2, 2), (2, 2), "same"),
    ((1, 7, 7, 2), (3, 3), (2, 2), "valid"),   # overlapping windows: shared argmaxes add up
])
def test_unpool_puts_each_value_at_its_argmax(shape, pool, strides, padding):
  rng = np.random.default_rng(0)
  pre = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float32)   # no ties
  pooled_shape = tf.nn.max_pool2d(pre, pool, strides, padding.upper()).shape
  values = rng.standard_normal(pooled_shape).astype(np.float32)
  expected = _numpy_unpool(values, pre, pool, strides, padding)

  eager = matching_layers.max_unpool(tf.constant(values), tf.constant(pre), pool, strides, padding)
  graph = tf.function(lambda v, p: matching_layers.max_unpool(v, p, pool, strides, padding))(
      tf.constant(values), tf.constant(pre))
  np.testing.assert_array_equal(eager.numpy(), expected)
  np.testing.assert_array_equal(graph.numpy(), expected)
  # Same positions as tf.nn.max_pool_with_argmax + scatter, the brief's reference scheme.
  if pool == strides:
    _, arg = tf.nn.max_pool_with_argmax(pre, pool, strides, padding.upper(),
                                        include_batch_in_index=True)
    scattered = tf.scatter_nd(tf.reshape(arg, [-1, 1]), tf.reshape(values, [-1]),
                              [int(np.prod(shape))])
    np.testing.assert_array_equal(tf.reshape(scattered, shape).numpy(), expected)

  # The gradient w.r.t. the pooled values reads the upstream gradient at the argmaxes.
  upstream = rng.standard_normal(shape).astype(np.float32)
  v = tf.constant(values)

  @tf.function
  def grad():
    with tf.GradientTape() as tape:
      tape.watch(v)
      out = matching_layers.max_unpool(v, tf.constant(pre), pool, strides, padding)
      loss = tf.reduce_sum(out * upstream)
    return tape.gradient(loss, v)

  want = np.zeros_like(values)
  for idx in np.ndindex(values.shape):   # brute force: perturb one pooled value
    e = np.zeros_like(values)
    e[idx] = 1.0
    want[idx] = np.sum(_numpy_unpool(e, pre, pool, strides, padding) * upstream)
  np.testing.assert_allclose(grad().numpy(), want, rtol=1e-6, atol=1e-6)


def test_unpool_with_ties_uses_one_position_per_window():
  # ReLU outputs: whole windows of zeros. Each value must still land exactly once.
  pre = np.zeros((2, 4, 4, 3), np.float32)
  pre[0, 0, 0, 0] = 1.0
  values = np.random.default_rng(1).uniform(1.0, 2.0, (2, 2, 2, 3)).astype(np.float32)
  for fn in (matching_layers.max_unpool, tf.function(matching_layers.max_unpool)):
    out = fn(tf.constant(values), tf.constant(pre), (2, 2), (2, 2), "valid").numpy()
    windows = out.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(2, 2, 2, 3, 4)
    assert np.all(np.count_nonzero(windows, axis=-1) == 1)
    np.testing.assert_allclose(windows.sum(-1), values, rtol=1e-6)
    assert out[0, 0, 0, 0] == values[0, 0, 0, 0]   # the real maximum wins


@pytest.mark.parametrize("form", matching.LAYER_FORMS)
@pytest.mark.parametrize("name", list(EXPECTED))
def test_forward_logits_activations_and_reconstruction_shapes(name, form):
  model = _build(name)
  matcher = _matcher(name, form)
  x = _inputs(model, 3)
  for record in (True, False):
    logits, acts, pools = matcher.forward(model, x, training=False, record_argmax=record)
    np.testing.assert_array_equal(logits.numpy(), model(x, training=False).numpy())
    assert [tuple(a.shape) for a in acts] == [(3,) + s for s in _shapes(name, form)]
    assert len(pools) == (EXPECTED[name][2] if record else 0)
    np.testing.assert_array_equal(acts[0].numpy(), x.numpy())
    np.testing.assert_array_equal(acts[-1].numpy(), logits.numpy())
  _, acts, pools = matcher.forward(model, x, training=False, record_argmax=True)
  recs = matcher.reconstructions(acts, pools)
  assert [r.shape for r in recs] == [a.shape for a in acts[:-1]]
  assert matcher.num_activations == len(_shapes(name, form))


@pytest.mark.parametrize("form", matching.LAYER_FORMS)
def test_separate_activation_layers_strides_and_build_shape(form):
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([
      L.Reshape((9, 9, 1)),
      L.Conv2D(8, 3, strides=2, padding="same"), L.ReLU(),       # 9x9 -> 5x5: transposed
      L.Conv2D(4, 3, strides=2, padding="valid"), L.LeakyReLU(),  # 5x5 -> 2x2: transposed
      L.Activation("linear"), L.Flatten(), L.Dense(6), L.Activation("tanh"),
      L.Dense(3), L.Dropout(0.5)])          # the trailing Dropout does not start a segment
  model.build((None, 81))
  matcher = matching.RepresentationMatcher(model, form=form)
  x = _inputs(model, 2)
  logits, acts, pools = matcher.forward(model, x, training=False, record_argmax=True)
  np.testing.assert_array_equal(logits.numpy(), model(x).numpy())
  assert [tuple(a.shape[1:]) for a in acts] == [(81,), (5, 5, 8), (2, 2, 4), (6,), (3,)]
  assert pools == []
  recs = matcher.reconstructions(acts, pools)
  assert [r.shape for r in recs] == [a.shape for a in acts[:-1]]
  assert [tuple(v.shape) for v in matcher.theta] == [
      (3, 3, 1, 8), (1,), (3, 3, 8, 4), (8,), (6, 16), (16,), (3, 6), (6,)]

  # A non-linear top layer is a_M itself (not counted twice).
  top = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(5, activation="relu"),
                             L.Dense(3, activation="sigmoid")])
  _, acts, _ = matching.RepresentationMatcher(top).forward(top, _inputs(top, 2), False, True)
  assert [tuple(a.shape[1:]) for a in acts] == [(4,), (5,), (3,)]


def test_theta_structure_of_both_forms():
  # CIFAR, both forms: f_0 conv 32->3, f_1 conv 64->32 (with an unpooling), f_2 Dense
  # 1024->8*8*64, f_3 Dense 10->1024.
  model = _build("cifar_cnn")
  for form in matching.LAYER_FORMS:
    shapes = [tuple(v.shape) for v in matching.RepresentationMatcher(model, form=form).theta]
    assert shapes == [(5, 5, 32, 3), (3,), (5, 5, 64, 32), (32,), (1024, 4096), (4096,),
                      (10, 1024), (1024,)]
  # EMNIST, reversed: 'valid' convs undone by transposed convs (filters (k, k, c_in, c_out)),
  # f_2 rebuilds the 24x24x64 pre-pool map.
  model = _build("emnist_cr_cnn")
  shapes = [tuple(v.shape) for v in matching.RepresentationMatcher(model, form="reversed").theta]
  assert shapes == [(3, 3, 1, 32), (1,), (3, 3, 32, 64), (32,), (128, 9216), (9216,),
                    (62, 128), (128,)]
  # EMNIST, authors: a 'same' conv after zero-padding 26->28 and 24->26 (filters (k, k, src,
  # target)), f_2 rebuilds the pooled 12x12x64 map.
  shapes = [tuple(v.shape) for v in matching.RepresentationMatcher(model).theta]
  assert shapes == [(3, 3, 32, 1), (1,), (3, 3, 64, 32), (32,), (128, 9216), (9216,),
                    (62, 128), (128,)]


@pytest.mark.parametrize("form", matching.LAYER_FORMS)
@pytest.mark.parametrize("top_source", matching.TOP_SOURCES)
def test_matching_loss_is_eq1_by_hand(top_source, form):
  """A one-hidden-layer net: L_M = mean_b ‖f_1(a_2) − a_1^F‖² + ‖f_0(a_1) − x‖², with a_2 the
  logits, their softmax, or no top term (``top_source``)."""
  tf.keras.utils.set_random_seed(3)
  model = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(3, activation="relu"),
                               L.Dense(2)])
  frozen = _perturbed_copy(model, lambda: tf.keras.Sequential(
      [tf.keras.Input((4,)), L.Dense(3, activation="relu"), L.Dense(2)]), scale=0.3)
  matcher = matching.RepresentationMatcher(model, seed=5, top_source=top_source, form=form)
  for v in matcher.theta:   # non-zero biases too
    v.assign(v + 0.1)
  x = _inputs(model, 5)
  _, acts, pools = matcher.forward(model, x, False, True)
  _, facts, _ = matcher.forward(frozen, x, False, False)
  got = matcher.matching_loss(acts, pools, facts).numpy()

  xn = x.numpy()
  w1, b1, w2, b2 = model.get_weights()
  fw1, fb1, _, _ = frozen.get_weights()
  theta = [v.numpy() for v in matcher.theta]
  k0, c0 = theta[:2]
  a1 = np.maximum(xn @ w1 + b1, 0)
  logits = a1 @ w2 + b2
  fa1 = np.maximum(xn @ fw1 + fb1, 0)
  want = np.sum((a1 @ k0 + c0 - xn) ** 2) / 5
  if top_source == "none":
    assert len(theta) == 2 and matcher.term_units == (4,)
  else:
    k1, c1 = theta[2:]
    top = logits if top_source == "logits" else np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    rec = top @ k1 + c1
    if form == "authors":   # f_1 ends with its target's (a_1's) ReLU
      rec = np.maximum(rec, 0)
    want += np.sum((rec - fa1) ** 2) / 5
    assert matcher.term_units == (4, 3)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_top_source_is_checked():
  model = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(2)])
  with pytest.raises(ValueError, match="top_source='probs'; valid: logits, softmax, none"):
    matching.RepresentationMatcher(model, top_source="probs")
  with pytest.raises(ValueError, match="--rm_top_source=none leaves no term to match"):  # a linear model has only the top term
    matching.RepresentationMatcher(model, top_source="none")


@pytest.mark.parametrize("form", matching.LAYER_FORMS)
@pytest.mark.parametrize("name", ["mnist_2nn", "cifar_cnn", "emnist_cr_cnn", "mcmahan_cnn"])
def test_gradients_reach_model_and_every_theta(name, form):
  model = _build(name)
  frozen = _frozen(name)
  matcher = _matcher(name, form)
  x = _inputs(model, 4)
  y = tf.constant([0, 1, 2, 3])
  ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  _, frozen_acts, _ = matcher.forward(frozen, x, training=False, record_argmax=False)
  sources = model.trainable_variables + matcher.theta + frozen.trainable_variables
  with tf.GradientTape() as tape:
    logits, acts, pools = matcher.forward(model, x, training=True, record_argmax=True)
    loss = ce(y, logits) + matcher.matching_loss(acts, pools, frozen_acts)
  grads = tape.gradient(loss, sources)
  n_live = len(model.trainable_variables) + len(matcher.theta)
  for var, g in zip(sources[:n_live], grads[:n_live]):
    assert g is not None, var.name
    g = tf.convert_to_tensor(g).numpy()
    assert np.all(np.isfinite(g)), var.name
    assert np.any(g != 0), var.name
  assert all(g is None for g in grads[n_live:])   # the frozen model M^F never trains


def test_matching_loss_keeps_frozen_targets_fixed():
  """Passing the trainable activations themselves as targets must give the same
  gradients as passing an independent (constant) copy: targets get no gradient."""
  model = _build("cifar_cnn")
  matcher = matching.RepresentationMatcher(model)
  x = _inputs(model, 2)
  _, copies, _ = matcher.forward(model, x, False, False)
  copies = [tf.constant(a.numpy()) for a in copies]
  grads = []
  for use_same in (True, False):
    with tf.GradientTape() as tape:
      _, acts, pools = matcher.forward(model, x, False, True)
      loss = matcher.matching_loss(acts, pools, acts if use_same else copies)
    grads.append(tape.gradient(loss, model.trainable_variables))
  for a, b in zip(*grads):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def _train_theta(model, matcher, x, lr, steps):
  _, targets, _ = matcher.forward(model, x, training=False, record_argmax=False)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      _, acts, pools = matcher.forward(model, x, training=False, record_argmax=True)
      loss = matcher.matching_loss(acts, pools, targets)
    for var, g in zip(matcher.theta, tape.gradient(loss, matcher.theta)):
      var.assign_sub(lr * g)
    return loss

  losses = [float(step()) for _ in range(steps)]
  return losses[0], losses[-1]


@pytest.mark.parametrize("form", matching.LAYER_FORMS)
def test_theta_alone_learns_to_match_dense_net(form):
  model = _build("mnist_2nn")
  matcher = matching.RepresentationMatcher(model, seed=1, form=form)
  first, last = _train_theta(model, matcher, _inputs(model, 8, seed=3), lr=0.01, steps=300)
  assert last < first / 20, (first, last)


def test_theta_alone_learns_to_match_cnn_up_to_the_unpooling_floor():
  """Unpooled maps are zero off the argmaxes, so the frozen activations there are an
  irreducible part of the loss; the rest must fall by a large factor."""
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([
      tf.keras.Input((10, 10, 2)), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(2),
      L.Flatten(), L.Dense(16, activation="relu"), L.Dense(5)])
  matcher = matching.RepresentationMatcher(model, seed=1, form="reversed")
  x = _inputs(model, 8, seed=3)
  _, acts, pools = matcher.forward(model, x, False, True)
  at_argmax = matching_layers.max_unpool(tf.ones((8, 4, 4, 4)), pools[0], (2, 2), (2, 2), "valid")
  floor = float(tf.reduce_sum(tf.square(acts[1]) * (1.0 - at_argmax))) / 8
  first, last = _train_theta(model, matcher, x, lr=1e-3, steps=300)
  assert last >= floor - 1e-3
  assert (last - floor) < (first - floor) / 5, (first, last, floor)


def test_initial_theta_is_deterministic_and_matches_fresh_variables():
  model = _build("emnist_cr_cnn")
  a = matching.RepresentationMatcher(model, seed=7)
  init = a.initial_theta()
  assert [v.shape for v in init] == [tuple(v.shape) for v in a.theta]
  for v, want in zip(a.theta, init):
    np.testing.assert_array_equal(v.numpy(), want)
  for v, w in zip(matching.RepresentationMatcher(model, seed=7).initial_theta(), init):
    np.testing.assert_array_equal(v, w)
  other = matching.RepresentationMatcher(model, seed=8).initial_theta()
  assert not np.array_equal(other[0], init[0])
  assert np.all(init[1] == 0)   # biases start at zero

  # Built inside a graph (as in a TFF computation): same fresh values.
  with tf.Graph().as_default() as graph:
    tf.keras.utils.set_random_seed(0)
    g_model = emnist_cr_cnn()
    g_matcher = matching.RepresentationMatcher(g_model, seed=7)
    np.testing.assert_array_equal(g_matcher.initial_theta()[0], init[0])
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      values = sess.run(g_matcher.theta)
  for v, w in zip(values, init):
    np.testing.assert_array_equal(v, w)


def test_runs_inside_a_tff_computation(tff_rt):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  del tff_rt

  def build():
    return tf.keras.Sequential([tf.keras.Input((6,)), L.Dense(5, activation="relu"),
                                L.Dense(3)])

  tf.keras.utils.set_random_seed(4)
  eager_model = build()
  weights = eager_model.get_weights()
  x = np.random.default_rng(2).uniform(size=(4, 6)).astype(np.float32)

  @tff.tensorflow.computation(tff.TensorType(np.float32, (None, 6)))
  def loss_and_grad_norm(batch):
    model = build()
    frozen = build()
    matcher = matching.RepresentationMatcher(model, seed=2)
    ops = [v.assign(w) for v, w in zip(model.weights, weights)]
    ops += [v.assign(w * 0.5) for v, w in zip(frozen.weights, weights)]
    with tf.control_dependencies(ops):
      _, targets, _ = matcher.forward(frozen, batch, False, False)
      with tf.GradientTape() as tape:
        _, acts, pools = matcher.forward(model, batch, True, True)
        loss = matcher.matching_loss(acts, pools, targets)
      grads = tape.gradient(loss, matcher.theta)
    return loss, tf.linalg.global_norm(grads)

  got_loss, got_norm = loss_and_grad_norm(x)

  frozen = build()
  frozen.set_weights([w * 0.5 for w in weights])
  matcher = matching.RepresentationMatcher(eager_model, seed=2)
  _, targets, _ = matcher.forward(frozen, x, False, False)
  with tf.GradientTape() as tape:
    _, acts, pools = matcher.forward(eager_model, x, True, True)
    loss = matcher.matching_loss(acts, pools, targets)
  norm = tf.linalg.global_norm(tape.gradient(loss, matcher.theta))
  np.testing.assert_allclose(got_loss, loss.numpy(), rtol=1e-5)
  np.testing.assert_allclose(got_norm, norm.numpy(), rtol=1e-5)


@pytest.mark.parametrize("bad,cls", [
    (L.BatchNormalization(name="bn"), "BatchNormalization"),
    (L.GroupNormalization(groups=2, name="gn"), "GroupNormalization"),
    (L.Conv2DTranspose(4, 3, name="deconv"), "Conv2DTranspose"),
])
def test_unsupported_layer_is_named(bad, cls):
  model = tf.keras.Sequential([tf.keras.Input((8, 8, 4)), L.Conv2D(4, 3, activation="relu"),
                               bad, L.Flatten(), L.Dense(3)])
  with pytest.raises(matching.UnsupportedLayerError) as err:
    matching.check_supported(model)
  msg = str(err.value)
  assert bad.name in msg and cls in msg
  for supported in ("Dense", "Conv2D", "MaxPooling2D", "Flatten", "Dropout", "Activation"):
    assert supported in msg
  with pytest.raises(ValueError):   # a ValueError too, and the matcher refuses it as well
    matching.RepresentationMatcher(model)


def test_unsupported_models_and_activations():
  rnn = tf.keras.Sequential([tf.keras.Input((5,), dtype=tf.int32), L.Embedding(10, 4, name="emb"),
                             L.LSTM(3, name="lstm"), L.Dense(2)])
  with pytest.raises(matching.UnsupportedLayerError, match="'emb' \\(Embedding\\)"):
    matching.check_supported(rnn)
  inp = tf.keras.Input((4,))
  functional = tf.keras.Model(inp, L.Add(name="add")([L.Dense(4)(inp), inp]))
  with pytest.raises(matching.UnsupportedLayerError, match="Sequential"):
    matching.check_supported(functional)
  softmax = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(3, activation="softmax",
                                                               name="probs")])
  with pytest.raises(matching.UnsupportedLayerError, match="'probs' \\(Dense\\).*softmax"):
    matching.check_supported(softmax)
  unbuilt = tf.keras.Sequential([L.Dense(3)])
  with pytest.raises(matching.UnsupportedLayerError, match="not built"):
    matching.check_supported(unbuilt)
  matching.check_supported(_build("kws_net"))   # supported: no error


def test_forward_rejects_a_different_architecture():
  matcher = matching.RepresentationMatcher(_build("mnist_2nn"))
  other = _build("cifar_cnn")
  with pytest.raises(ValueError, match="built for"):
    matcher.forward(other, _inputs(other, 1), False, True)
