"""FedEx's build-time parts (seed 002), numpy only: the space of client hyper-parameters it
tunes (`SearchSpace`, flags ``--fedex_<name>``), the k candidate configurations drawn around a
center (`sample_configs`), a uniformly random center for random search (`random_center`), and
FedEx's options (`FedExOptions`, flags ``--fedex_*``), what a client needs of them
(`FedExClient`) and the method's configuration (`FedExConfig`). The per-round
exponentiated-gradient step that chooses among the configurations is `update.py`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Optional

import numpy as np

from tff_robust.algorithms import search_space
from tff_robust.common.options import option, seed_option

ETA_SCHEDULES = ('constant', 'invsqrt', 'adaptive')
OBJECTIVES = ('loss', 'error')  # what L_V(w_ti) in FedEx's gradient is
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
HPARAM_NAMES: tuple[str, ...] = tuple(_LIMITS)  # every client hyper-parameter FedEx can tune


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
    objective: L_V(w_ti) of the gradient: the validation ``loss`` or ``error``.
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
  objective: str = option('loss', 'fedex_objective',
                          "L_V of FedEx's gradient: a client's mean validation 'loss' (unbounded) or its "
                          "validation 'error' = 1 - accuracy (bounded in [0, 1]).", choices=OBJECTIVES)
  seed: int = seed_option()

  def __post_init__(self):
    if isinstance(self.k, bool) or not isinstance(self.k, numbers.Integral) or self.k < 1:
      raise ValueError(f'--fedex_k must be an integer >= 1, got {self.k!r}')
    if not (isinstance(self.radius, numbers.Real) and 0.0 <= self.radius <= 1.0):
      raise ValueError(f'--fedex_radius must be in [0, 1], got {self.radius!r}')
    validate_schedule(self.eta_schedule)
    if self.objective not in OBJECTIVES:
      raise ValueError(f'--fedex_objective must be one of {OBJECTIVES}, got {self.objective!r}')
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


@dataclasses.dataclass(frozen=True)
class FedExClient:
  """What a client needs for FedEx: the space, the options and the k configurations."""

  space: SearchSpace
  options: FedExOptions
  configs: dict  # name -> np.ndarray [k]

  @property
  def k(self) -> int:
    return self.options.k

  def tunes(self, name: str) -> bool:
    return name in self.space.names


def check_space(space: Optional[SearchSpace], local_steps: int, ah: bool) -> None:
  """Raises ValueError when FedEx's ``space`` (None: the default) clashes with the client's
  ``local_steps`` or with AH (which tunes the round's learning rate and local steps)."""
  names = (space or SearchSpace()).names
  if ah:
    clash = {"learning_rate", "local_steps", "local_epochs"} & set(names)
    if clash:
      raise ValueError(f"--ah tunes the round's learning rate and local steps; FedEx must not also "
                       f"tune {sorted(clash)} (set --fedex_{sorted(clash)[0]}=none)")
  if local_steps > 0 and "local_epochs" in names:
    raise ValueError("FedEx tunes local_epochs but --local_steps > 0: tune local_steps instead "
                     "(--fedex_local_epochs=none --fedex_local_steps=...) or use --local_steps=0")
  if local_steps == 0 and "local_steps" in names:
    raise ValueError("FedEx tunes local_steps but --local_steps=0 (epochs): tune local_epochs instead")
  if "dropout" in names:
    raise ValueError("--fedex_dropout is not supported: dropout rates are fixed in the Keras model")


@dataclasses.dataclass(frozen=True)
class FedExConfig:
  """FedEx (seed 002), ``--fedex``: k client configurations around ``center`` and θ over them.

  ``space``: the hyper-parameters it tunes (None: `SearchSpace()`'s defaults); ``options``:
  its flags ``--fedex_*`` (None: the defaults with the run's seed); ``center`` (None: the client
  configuration, else the space's midpoint).
  """

  space: Optional[SearchSpace] = None
  options: Optional[FedExOptions] = None
  center: Optional[dict] = None

  def tunes(self, name: str) -> bool:
    """Whether its space tunes hyper-parameter ``name`` (e.g. ``prox_mu``, the proximal term's μ)."""
    return name in (self.space or SearchSpace()).names
