"""FedEx: exponentiated-gradient tuning of client hyper-parameters (seed 002).

FedEx (Khodak et al., seed 002, Algorithm "FedEx") keeps a categorical
distribution theta over k configurations c_1..c_k of the *client* (local
training) hyper-parameters in the server state. Every selected client samples
its own c_ti ~ theta_t, trains with it and reports the loss L_ti of the trained
model on a held-out part V_ti of its own data. The server then takes an
exponentiated-gradient step (seed 002, FedEx update):

  grad_j = sum_i |V_ti| (L_ti - lambda_t) 1[c_ti = c_j] / (theta_tj sum_i |V_ti|)
  theta_{t+1} = theta_t * exp(-eta_t grad) / ||theta_t * exp(-eta_t grad)||_1

The server only sees federated *sums*, so everything is written in terms of

  S_loss[j]  = sum_i |V_i| L_i 1[c_i = j]
  S_count[j] = sum_i |V_i| 1[c_i = j]
  S_total    = sum_i |V_i|

which gives grad_j = (S_loss[j] - lambda_t S_count[j]) / (theta_j S_total).
A client produces its share of the sums with ``client_sums``.

Baseline lambda_t (seed 002 leaves the scheme open): the discounted mean of the
earlier rounds' weighted mean validation losses Lbar_s = sum_j S_loss[j] / S_total,

  lambda_t = sum_{s<t} gamma^(t-1-s) Lbar_s / sum_{s<t} gamma^(t-1-s)   (gamma = 0.9),

and in the first round (no history) lambda_1 = Lbar_1, the current round's mean.

Step size eta_t: ``constant`` eta0; ``invsqrt`` eta0 / sqrt(t); ``adaptive``
eta0 / ||grad||_inf. The default eta0 is sqrt(2 ln k) for every schedule (the
exponentiated-gradient rate for k experts).

Product space (option): instead of one categorical over k joint configurations,
one categorical per hyper-parameter over that hyper-parameter's k candidate
values. theta is then an [H, k] tensor whose row h is the distribution of
hyper-parameter h (in ``SearchSpace.names`` order); a client samples one index
per row, and its sums are [H, k] (row h one-hot at the index of hyper-parameter
h). All the tensor functions below act on the last axis, so the same code runs
the joint ([k]) and the product ([H, k]) variants; in the product variant each
row's gradient uses that hyper-parameter's sums.

The build-time parts (the search space, the k candidate configurations and the
options) are numpy, in `fedex_space.py`; the per-round parts here are pure
TensorFlow, usable eagerly, in a ``tf.function`` or inside a
``tff.tensorflow.computation``. A client's part is one client component
(`FedExSampling`); the server's is `server.FedExServer`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms.client import Component, LocalResult, LocalRun, Needs, Step
from tff_robust.algorithms.methods.fedex.space import FedExClient, FedExOptions, validate_schedule
from tff_robust.algorithms.round_protocol import Broadcast, ClientHparams

def initial_theta(k: int, num_rows: Optional[int] = None) -> np.ndarray:
  """theta_1 = 1_k / k (seed 002); ``num_rows`` = H gives the product space's [H, k]."""
  if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
    raise ValueError(f'--fedex_k must be an integer >= 1, got {k!r}')
  shape = (k,) if num_rows is None else (num_rows, k)
  return np.full(shape, 1.0 / k, np.float32)


# ---------------------------------------------------------------------------
# Per-round TensorFlow parts.
# ---------------------------------------------------------------------------


def _f32(x) -> tf.Tensor:
  return tf.cast(tf.convert_to_tensor(x), tf.float32)


def _seed_pair(seed) -> tf.Tensor:
  """A stateless-RNG seed of shape [2] from an int or a [2] seed."""
  s = tf.cast(tf.convert_to_tensor(seed), tf.int64)
  if s.shape.rank == 0:
    return tf.stack([s, tf.constant(0, tf.int64)])
  if s.shape.rank != 1 or s.shape[0] != 2:
    raise ValueError(f'seed must be a scalar or shape [2], got shape {s.shape}')
  return s


def client_seed(seed, round_num, client_key) -> tf.Tensor:
  """A per-client, per-round stateless seed [2] from the run seed, the round and a client key.

  ``client_key`` is any integer that differs between clients (e.g. a hash of
  the client id, or its position in the round's cohort).
  """
  base = tf.cast(tf.convert_to_tensor(seed), tf.int64)
  t = tf.cast(tf.convert_to_tensor(round_num), tf.int64)
  key = tf.cast(tf.convert_to_tensor(client_key), tf.int64)
  return tf.stack([base * 1_000_003 + t, key])


def sample_client_config(theta, seed) -> tf.Tensor:
  """c_ti ~ theta_t (seed 002), a stateless categorical draw with a per-client seed.

  ``theta`` [k] gives an int32 scalar index; [H, k] (product space) one index per row, [H].
  """
  theta = _f32(theta)
  logits = tf.math.log(tf.reshape(theta, [-1, tf.shape(theta)[-1]]))
  idx = tf.random.stateless_categorical(logits, 1, _seed_pair(seed), dtype=tf.int32)[:, 0]
  return idx[0] if theta.shape.rank == 1 else idx


def entropy(theta) -> tf.Tensor:
  """Shannon entropy -sum_j theta_j ln theta_j (nats), over the last axis."""
  theta = _f32(theta)
  return -tf.reduce_sum(tf.math.multiply_no_nan(tf.math.log(theta), theta), axis=-1)


def converged(theta, entropy_cutoff: Optional[float]) -> tf.Tensor:
  """Whether entropy(theta) < cutoff (per row in the product space); False if no cutoff."""
  h = entropy(theta)
  if entropy_cutoff is None:
    return tf.zeros_like(h, tf.bool)
  return h < tf.constant(entropy_cutoff, tf.float32)


def effective_index(theta, entropy_cutoff: Optional[float], seed) -> tf.Tensor:
  """The configuration a client uses: argmax theta once entropy(theta) < cutoff, else c ~ theta."""
  sampled = sample_client_config(theta, seed)
  best = tf.argmax(_f32(theta), axis=-1, output_type=tf.int32)
  return tf.where(converged(theta, entropy_cutoff), best, sampled)


def client_sums(index, val_loss, num_val, k: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """One client's share of (S_loss, S_count, S_total): federated-sum these.

  ``index`` is the sampled configuration (scalar; or [H] in the product
  space), ``val_loss`` the mean loss L_i on its validation split and ``num_val``
  = |V_i|. Returns (|V_i| L_i onehot(index), |V_i| onehot(index), |V_i|) with
  shapes [k] (or [H, k]), [k] (or [H, k]) and [].
  """
  n = _f32(num_val)
  onehot = tf.one_hot(tf.cast(index, tf.int32), k, dtype=tf.float32)
  count = n * onehot
  # A client with no validation examples contributes nothing (and no NaN).
  loss = tf.math.multiply_no_nan(_f32(val_loss), count)
  return loss, count, n


def round_mean_loss(s_loss, s_total) -> tf.Tensor:
  """Lbar_t = sum_i |V_i| L_i / sum_i |V_i| (0 if no validation examples)."""
  s_loss = _f32(s_loss)
  total = tf.reduce_sum(s_loss, axis=-1)
  if s_loss.shape.rank == 2:  # every row of the product space sums the same losses
    total = tf.reduce_mean(total)
  return tf.math.divide_no_nan(total, _f32(s_total))


def fedex_gradient(s_loss, s_count, s_total, theta, baseline) -> tf.Tensor:
  """grad_j = (S_loss[j] - lambda_t S_count[j]) / (theta_j S_total) (seed 002, FedEx).

  Shapes [k] (or [H, k] for the product space, row by row); entries whose
  numerator is 0 (configurations no client sampled) are 0.
  """
  s_loss, s_count, theta = _f32(s_loss), _f32(s_count), _f32(theta)
  num = s_loss - _f32(baseline) * s_count
  return tf.math.divide_no_nan(num, theta * _f32(s_total))


def step_size(kind: str, eta0, round_num, grad) -> tf.Tensor:
  """eta_t: ``constant`` eta0, ``invsqrt`` eta0/sqrt(t) (t >= 1), ``adaptive`` eta0/||grad||_inf.

  For a [k] gradient returns a scalar; for the product space's [H, k] one
  step per row, shape [H, 1] (``adaptive`` normalises each row by its own
  max-norm). ``adaptive`` with a zero gradient returns eta0 (the step is a
  no-op then anyway).
  """
  validate_schedule(kind)
  grad = _f32(grad)
  eta0 = _f32(eta0)
  if kind == 'constant':
    eta = eta0
  elif kind == 'invsqrt':
    t = tf.maximum(_f32(round_num), 1.0)
    eta = eta0 / tf.sqrt(t)
  else:
    norm = tf.reduce_max(tf.abs(grad), axis=-1)
    eta = tf.where(norm > 0, eta0 / tf.where(norm > 0, norm, 1.0), eta0)
  if grad.shape.rank == 2:
    eta = tf.broadcast_to(tf.reshape(eta, [-1, 1]), [tf.shape(grad)[0], 1])
  return eta


def update_theta(theta, grad, eta) -> tf.Tensor:
  """theta_{t+1} = theta_t * exp(-eta grad) / ||.||_1 (seed 002), computed in log space.

  ``log theta - eta grad`` is normalised with log-sum-exp over the last axis,
  so large |eta grad| neither overflows nor divides by zero.
  """
  theta, grad, eta = _f32(theta), _f32(grad), _f32(eta)
  logits = tf.math.log(theta) - eta * grad
  return tf.exp(logits - tf.reduce_logsumexp(logits, axis=-1, keepdims=True))


def update_baseline(baseline_num, baseline_den, round_mean_loss_t,
                    discount) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Discounted-mean baseline lambda_t; returns (num', den', lambda_t).

  ``baseline_num`` = sum_{s<t} gamma^(t-1-s) Lbar_s and ``baseline_den`` =
  sum_{s<t} gamma^(t-1-s) (both 0 before the first round). lambda_t =
  num / den, or Lbar_t when den = 0 (first round). The returned num', den'
  fold in Lbar_t: num' = gamma num + Lbar_t, den' = gamma den + 1.
  """
  num, den, cur, g = (_f32(baseline_num), _f32(baseline_den), _f32(round_mean_loss_t),
                      _f32(discount))
  baseline = tf.where(den > 0, tf.math.divide_no_nan(num, den), cur)
  return g * num + cur, g * den + 1.0, baseline


def server_update(theta, baseline_num, baseline_den, s_loss, s_count, s_total, round_num,
                  options: FedExOptions) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, dict]:
  """One FedEx server step from the round's federated sums.

  Computes lambda_t (``update_baseline``), the gradient, eta_t and theta_{t+1}.
  A round without validation examples (S_total = 0) changes nothing. With an
  entropy cutoff, a theta (row) whose entropy is already below it is frozen.
  Returns (theta', baseline_num', baseline_den', metrics) with metrics
  ``baseline``, ``mean_val_loss``, ``eta``, ``grad_inf_norm``, ``entropy``.
  """
  theta = _f32(theta)
  s_total = _f32(s_total)
  has_data = s_total > 0
  mean_loss = round_mean_loss(s_loss, s_total)
  new_num, new_den, baseline = update_baseline(baseline_num, baseline_den, mean_loss,
                                               options.discount)
  grad = fedex_gradient(s_loss, s_count, s_total, theta, baseline)
  eta = step_size(options.eta_schedule, options.resolved_eta0, round_num, grad)
  new_theta = update_theta(theta, grad, eta)
  frozen = converged(theta, options.entropy_cutoff)
  if theta.shape.rank == 2:
    frozen = frozen[:, None]
  new_theta = tf.where(tf.logical_or(frozen, tf.logical_not(has_data)), theta, new_theta)
  new_num = tf.where(has_data, new_num, _f32(baseline_num))
  new_den = tf.where(has_data, new_den, _f32(baseline_den))
  metrics = {
      'baseline': baseline,
      'mean_val_loss': mean_loss,
      'eta': tf.reduce_mean(eta),
      'grad_inf_norm': tf.reduce_max(tf.abs(grad)),
      'entropy': tf.reduce_mean(entropy(new_theta)),
  }
  return new_theta, new_num, new_den, metrics


def gather_config(configs: Mapping[str, np.ndarray], index,
                  names: Optional[tuple[str, ...]] = None) -> dict[str, tf.Tensor]:
  """The hyper-parameter values of a sampled configuration, as tensors.

  Joint space: ``index`` is a scalar into every array. Product space: ``index``
  is [H], entry h indexing ``configs[names[h]]`` (``names`` = ``space.names``).
  """
  index = tf.convert_to_tensor(index)
  if names is None:
    names = tuple(configs)
  out = {}
  for h, name in enumerate(names):
    i = index if index.shape.rank == 0 else index[h]
    out[name] = tf.gather(tf.constant(np.asarray(configs[name])), i)
  return out


class FedExReport(NamedTuple):
  """A client's share of (S_loss, S_count, S_total) (`client_sums`)."""

  loss: tf.Tensor
  count: tf.Tensor
  total: tf.Tensor


class FedExSampling(Component):
  """FedEx's client side: c ~ θ (or argmax θ once converged) overrides the client's
  hyper-parameters; heavy-ball momentum and weight decay when the space tunes them; its share of
  the sums from the loss on its held-out examples (``objective`` loss or error)."""

  key = "fedex"
  needs = Needs(val=True, seed=True)

  def __init__(self, fedex: FedExClient):
    self.fedex = fedex

  def build(self, model) -> list:
    """Heavy-ball buffers, one per trained variable (only when FedEx tunes momentum)."""
    if not self.fedex.tunes("momentum"):
      return []
    return [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in model.trainable_variables]

  def hparams(self, hp: ClientHparams, broadcast: Broadcast, inputs, scratch: dict) -> ClientHparams:
    """c ~ θ_t (its index kept in ``scratch`` for the report) replaces the hyper-parameters it tunes."""
    fx = self.fedex
    index = effective_index(broadcast.extras[self.key], fx.options.entropy_cutoff, inputs.seed)
    names = fx.space.names if fx.options.product_space else None
    scratch[self.key] = index
    values = gather_config(fx.configs, index, names)
    return hp._replace(**{name: tf.cast(v, getattr(hp, name).dtype) for name, v in values.items()})

  def before_loop(self, run: LocalRun) -> None:
    for m in run.built[self.key]:
      m.assign(tf.zeros_like(m))

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    hp = run.hp
    if self.fedex.tunes("weight_decay"):
      grads = [g + hp.weight_decay * v for g, v in zip(grads, run.model.trainable_variables)]
    if self.fedex.tunes("momentum"):  # heavy-ball SGD: v <- μ v + g ; w <- w - η v
      grads = [m.assign(hp.momentum * m + g) for m, g in zip(run.built[self.key], grads)]
    return grads

  def after_loop(self, run: LocalRun, result: LocalResult) -> tuple[None, FedExReport]:
    """(|V| L onehot(c), |V| onehot(c), |V|) for the server's update."""
    t = result.train
    if self.fedex.options.objective == "error":
      mean_val = result.kept(1.0 - tf.math.divide_no_nan(t.val_correct, t.val_predictions))
    else:
      mean_val = result.kept(tf.math.divide_no_nan(t.val_loss_sum, t.val_count))
    return None, FedExReport(*client_sums(run.scratch[self.key], mean_val, t.val_count, self.fedex.k))
