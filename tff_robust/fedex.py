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

Build-time parts (the search space and the k candidate configurations) are
numpy; the per-round parts are pure TensorFlow, usable eagerly, in a
``tf.function`` or inside a ``tff.tensorflow.computation``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_robust import search_space
from tff_robust.options import option, seed_option

ETA_SCHEDULES = ('constant', 'invsqrt', 'adaptive')
INTEGER_HPARAMS = ('local_epochs', 'local_steps', 'batch_size')


# ---------------------------------------------------------------------------
# Search space (numpy, build time).
# ---------------------------------------------------------------------------


Range = search_space.Range
HParamSpec = search_space.Spec

# name -> (smallest allowed value, whether the bound is inclusive, largest allowed
# value, whether inclusive, description for messages).
_LIMITS = {
    'learning_rate': (0.0, False, math.inf, False, '> 0'),
    'momentum': (0.0, True, 1.0, False, 'in [0, 1)'),
    'weight_decay': (0.0, True, math.inf, False, '>= 0'),
    'prox_mu': (0.0, True, math.inf, False, '>= 0'),
    'local_epochs': (1.0, True, math.inf, False, 'an integer >= 1'),
    'local_steps': (1.0, True, math.inf, False, 'an integer >= 1'),
    'batch_size': (1.0, True, math.inf, False, 'an integer >= 1'),
    'dropout': (0.0, True, 1.0, False, 'in [0, 1)'),
}


def _in_limits(name: str, value: float) -> bool:
  if not search_space.within(_LIMITS[name], value):
    return False
  return name not in INTEGER_HPARAMS or value == round(value)


@dataclasses.dataclass(frozen=True)
class SearchSpace:
  """The client hyper-parameters FedEx tunes (seed 002 tunes local training).

  Each field is ``None`` (not tuned: the client uses its fixed value), a tuple
  of allowed values (ordered numerically; perturbation moves along the sorted
  values), or a ``Range(low, high, log)``. ``local_epochs``, ``local_steps``
  and ``batch_size`` are integers (a ``Range`` for them is rounded). At most
  one of ``local_epochs`` / ``local_steps`` may be tuned. Defaults follow the
  local-training space of seed 002's experiments: learning rate 10^[-4, 0],
  momentum [0, 0.9], weight decay 10^[-5, -1], 1..5 local epochs, batch size
  8..128; FedProx mu, local steps and dropout are not tuned by default.
  """

  learning_rate: HParamSpec = Range(1e-4, 1.0, log=True)
  momentum: HParamSpec = Range(0.0, 0.9)
  weight_decay: HParamSpec = Range(1e-5, 1e-1, log=True)
  prox_mu: HParamSpec = None
  local_epochs: HParamSpec = (1, 2, 3, 4, 5)
  local_steps: HParamSpec = None
  batch_size: HParamSpec = (8, 16, 32, 64, 128)
  dropout: HParamSpec = None

  def __post_init__(self):
    for field in dataclasses.fields(self):
      spec = getattr(self, field.name)
      _validate_spec(field.name, spec)
      if isinstance(spec, (tuple, list)):  # store sorted, canonical tuples
        object.__setattr__(self, field.name, tuple(sorted(float(v) for v in spec)))
    if self.local_epochs is not None and self.local_steps is not None:
      raise ValueError(
          '--fedex_local_epochs and --fedex_local_steps cannot both be tuned; '
          f'got {self.local_epochs} and {self.local_steps} (set one to none)')
    if not self.names:
      raise ValueError(
          'the FedEx search space tunes nothing: set at least one of '
          f'{tuple("--fedex_" + n for n in _LIMITS)}')

  @property
  def names(self) -> tuple[str, ...]:
    """Names of the tuned hyper-parameters, in field order (= product-space rows)."""
    return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None)

  def spec(self, name: str) -> HParamSpec:
    if name not in _LIMITS:
      raise ValueError(f'unknown FedEx hyper-parameter {name!r}; choices: {tuple(_LIMITS)}')
    return getattr(self, name)

  def midpoint(self) -> dict[str, float]:
    """A central configuration: range midpoints (geometric for log), median tuple values."""
    out = {}
    for name in self.names:
      spec = self.spec(name)
      if isinstance(spec, Range):
        v = (math.sqrt(spec.low * spec.high) if spec.log else 0.5 * (spec.low + spec.high))
      else:
        v = spec[(len(spec) - 1) // 2]
      out[name] = _cast_value(name, spec, v)
    return out


def _cast_value(name: str, spec: HParamSpec, v: float) -> float:
  if name in INTEGER_HPARAMS:
    v = float(round(v))
    if isinstance(spec, Range):
      v = min(max(v, math.ceil(spec.low)), math.floor(spec.high))
  return float(v)


def _validate_spec(name: str, spec: HParamSpec) -> None:
  flag = f'--fedex_{name}'
  desc = _LIMITS[name][4]
  if spec is None:
    return
  if isinstance(spec, Range):
    low, high = spec.low, spec.high
    if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real)):
      raise ValueError(f'{flag} range bounds must be numbers, got {spec}')
    if not (_in_limits(name, float(low)) or (name in INTEGER_HPARAMS and low >= 1)):
      raise ValueError(f'{flag} range low={low} is invalid: values must be {desc}')
    if not (_in_limits(name, float(high)) or (name in INTEGER_HPARAMS and high >= 1)):
      raise ValueError(f'{flag} range high={high} is invalid: values must be {desc}')
    if not low <= high:
      raise ValueError(f'{flag} range needs low <= high, got low={low}, high={high}')
    if spec.log and not low > 0:
      raise ValueError(f'{flag} log range needs low > 0, got low={low}')
    if name in INTEGER_HPARAMS and math.floor(high) < math.ceil(low):
      raise ValueError(f'{flag} range [{low}, {high}] contains no integer')
    return
  if isinstance(spec, (tuple, list)):
    if not spec:
      raise ValueError(f'{flag} needs at least one value, got an empty tuple')
    for v in spec:
      if isinstance(v, bool) or not isinstance(v, numbers.Real) or not _in_limits(name, float(v)):
        raise ValueError(f'{flag} value {v!r} is invalid: values must be {desc}')
    return
  raise ValueError(
      f'{flag} must be None, a tuple of values or a Range(low, high, log), got {spec!r}')


def parse_hparam(name: str, text: str) -> HParamSpec:
  """Parses a ``--fedex_<name>`` flag value.

  ``none`` or ``''``: not tuned; ``low:high`` or ``low:high:log``: a Range;
  ``v1,v2,...``: allowed values (a single value fixes the hyper-parameter).
  """
  if name not in _LIMITS:
    raise ValueError(f'unknown FedEx hyper-parameter {name!r}; choices: {tuple(_LIMITS)}')
  spec = search_space.parse_spec(f'--fedex_{name}', text)
  _validate_spec(name, spec)
  return spec


def _check_center(space: SearchSpace, center: Mapping[str, float]) -> None:
  extra = sorted(set(center) - set(space.names))
  if extra:
    raise ValueError(f'center has hyper-parameters {extra} that the search space does not '
                     f'tune; tuned: {space.names}')
  for name in space.names:
    if name not in center:
      raise ValueError(f'center is missing {name!r}; it must give every tuned '
                       f'hyper-parameter {space.names}')
    spec, v = space.spec(name), float(center[name])
    if isinstance(spec, Range):
      if not spec.low <= v <= spec.high:
        raise ValueError(f'center {name}={v} is outside --fedex_{name} range '
                         f'[{spec.low}, {spec.high}]')
    elif not np.any(np.isclose(v, spec, rtol=1e-6, atol=0.0)):
      raise ValueError(f'center {name}={v} is not one of the --fedex_{name} values {spec}')


def _dtype(name: str):
  return np.int32 if name in INTEGER_HPARAMS else np.float32


def sample_configs(space: SearchSpace, center: Mapping[str, float], radius: float, k: int,
                   seed: int) -> dict[str, np.ndarray]:
  """k configurations drawn around ``center``; configuration 0 is ``center`` itself.

  For each tuned hyper-parameter independently: a ``Range`` value is drawn
  uniformly within +-radius*(high - low) of the center (in log space, and with
  log(high/low), for log ranges) and clipped to [low, high]; integer ones are
  rounded. A tuple's value is drawn by moving the center's position among the
  sorted values by a uniform offset in +-radius*(n_values - 1), rounded and
  clipped. ``radius`` = 0 repeats the center, 1 covers the whole space.
  Returns ``{name: array of length k}`` (int32 for integer hyper-parameters,
  float32 otherwise). Deterministic in ``seed``. The same arrays serve the
  product space (row h of theta indexes ``configs[space.names[h]]``).
  """
  if not isinstance(space, SearchSpace):
    raise ValueError(f'space must be a SearchSpace, got {type(space).__name__}')
  if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
    raise ValueError(f'--fedex_k must be an integer >= 1, got {k!r}')
  if not (isinstance(radius, numbers.Real) and 0.0 <= radius <= 1.0):
    raise ValueError(f'--fedex_radius must be in [0, 1], got {radius!r}')
  _check_center(space, center)
  rng = np.random.default_rng(seed)
  out = {}
  for name in space.names:
    spec, c = space.spec(name), float(center[name])
    u = rng.uniform(-1.0, 1.0, size=k)
    if isinstance(spec, Range):
      if spec.log:
        lo, hi, x = math.log(spec.low), math.log(spec.high), math.log(c)
        vals = np.exp(np.clip(x + u * radius * (hi - lo), lo, hi))
        vals = np.clip(vals, spec.low, spec.high)  # undo exp/log round-off
      else:
        vals = np.clip(c + u * radius * (spec.high - spec.low), spec.low, spec.high)
      vals[0] = c
      if name in INTEGER_HPARAMS:
        vals = np.clip(np.round(vals), math.ceil(spec.low), math.floor(spec.high))
    else:
      values = np.asarray(spec, np.float64)
      pos = int(np.argmin(np.abs(values - c)))
      idx = np.clip(np.round(pos + u * radius * (len(values) - 1)), 0, len(values) - 1)
      idx[0] = pos
      vals = values[idx.astype(np.int64)]
    out[name] = vals.astype(_dtype(name))
  return out


def random_center(space: SearchSpace, seed: int) -> dict[str, float]:
  """A configuration drawn uniformly from the whole space (random search; e.g. an SHA arm)."""
  rng = np.random.default_rng(seed)
  out = {}
  for name in space.names:
    spec = space.spec(name)
    if isinstance(spec, Range):
      if spec.log:
        v = math.exp(rng.uniform(math.log(spec.low), math.log(spec.high)))
        v = min(max(v, spec.low), spec.high)
      else:
        v = rng.uniform(spec.low, spec.high)
    else:
      v = spec[int(rng.integers(len(spec)))]
    out[name] = _cast_value(name, spec, v)
  return out


# ---------------------------------------------------------------------------
# Options.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FedExOptions:
  """FedEx settings (flags ``--fedex_*``).

  Attributes:
    k: number of configurations (per hyper-parameter in the product space).
    radius: perturbation radius of ``sample_configs`` (fraction of each range).
    eta_schedule: ``constant`` | ``invsqrt`` | ``adaptive``.
    eta0: base step size; ``None`` = sqrt(2 ln k).
    discount: gamma of the discounted-mean baseline, in [0, 1].
    entropy_cutoff: once the entropy of theta (in nats) falls below it, theta
      is frozen and clients use argmax theta; ``None`` = never.
    product_space: one categorical per hyper-parameter instead of one over k
      joint configurations.
    seed: seed for drawing the configurations and the clients' samples.
  """

  k: int = option(10, 'fedex_k', 'Number of configurations k.')
  radius: float = option(0.5, 'fedex_radius', 'Configurations are drawn within this fraction of each range.')
  eta_schedule: str = option('adaptive', 'fedex_eta_schedule', 'Step size η_t: η0, η0/√t, or η0/‖∇̃‖∞.',
                             choices=ETA_SCHEDULES)
  eta0: Optional[float] = option(None, 'fedex_eta0', 'η0 (default √(2 ln k)).', kind='float')
  discount: float = option(0.9, 'fedex_discount', 'Discount γ of the baseline λ_t.')
  entropy_cutoff: Optional[float] = option(None, 'fedex_entropy_cutoff',
                                           'Below this entropy of θ use its most likely config.', kind='float')
  product_space: bool = option(False, 'fedex_product_space', 'One categorical per hyper-parameter.')
  seed: int = seed_option()

  def __post_init__(self):
    if isinstance(self.k, bool) or not isinstance(self.k, numbers.Integral) or self.k < 1:
      raise ValueError(f'--fedex_k must be an integer >= 1, got {self.k!r}')
    if not (isinstance(self.radius, numbers.Real) and 0.0 <= self.radius <= 1.0):
      raise ValueError(f'--fedex_radius must be in [0, 1], got {self.radius!r}')
    validate_schedule(self.eta_schedule)
    if self.eta0 is not None and not (isinstance(self.eta0, numbers.Real) and self.eta0 > 0):
      raise ValueError(f'--fedex_eta0 must be > 0 (or unset for sqrt(2 ln k)), got {self.eta0!r}')
    if not (isinstance(self.discount, numbers.Real) and 0.0 <= self.discount <= 1.0):
      raise ValueError(f'--fedex_discount must be in [0, 1], got {self.discount!r}')
    if self.entropy_cutoff is not None and not (
        isinstance(self.entropy_cutoff, numbers.Real) and self.entropy_cutoff >= 0):
      raise ValueError(
          f'--fedex_entropy_cutoff must be >= 0 (or unset), got {self.entropy_cutoff!r}')

  @property
  def resolved_eta0(self) -> float:
    return default_eta0(self.k) if self.eta0 is None else float(self.eta0)


def validate_schedule(kind: str) -> None:
  if kind not in ETA_SCHEDULES:
    raise ValueError(f'--fedex_eta_schedule must be one of {ETA_SCHEDULES}, got {kind!r}')


def default_eta0(k: int) -> float:
  """sqrt(2 ln k): the exponentiated-gradient step for k experts (0 when k = 1)."""
  return math.sqrt(2.0 * math.log(k))


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
