"""Server optimizers of generalized FedAvg (Reddi et al., seed 004, Algorithms 2-4).

The server treats the weighted-mean client delta as a pseudo-gradient
(Algorithm 2 of seed 004): ``x_{t+1} = SERVEROPT(x_t, -Delta_t, eta, t)``.
TFF's ``model_delta_client_work`` already reports ``x_t - x_{i,K}^t``, so the
``gradients`` that ``tff.learning.templates.build_apply_optimizer_finalizer``
hands to ``Optimizer.next`` are exactly ``g_t = -Delta_t``.

``adagrad``, ``adam`` and ``yogi`` follow Reddi et al.'s updates exactly, with
first-moment momentum and *no* bias correction (TFF's ``build_adam`` /
``build_yogi`` bias-correct, so they are not used here)::

  m_t = beta1 m_{t-1} + (1 - beta1) Delta_t                   (m_{-1} = 0)
  v_t = v_{t-1} + Delta_t^2                                   (FedAdagrad)
  v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                 (FedAdam)
  v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (FedYogi)
  x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)                 (v_{-1} >= tau^2)

``sgd`` / ``sgdm`` (FedAvgM) are TFF's ``build_sgdm``: its accumulator
``a_t = mu a_{t-1} + g_t`` and step ``x - eta a_t`` are, with ``g_t = -Delta_t``,
exactly ``m_t = mu m_{t-1} + Delta_t``, ``x_{t+1} = x_t + eta m_t`` (``a_t = -m_t``).
"""

from __future__ import annotations

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adagrad', 'adam', 'yogi')
ADAPTIVE_OPTIMIZERS = ('adagrad', 'adam', 'yogi')

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY  # 'learning_rate'
BETA_1_KEY = 'beta_1'
BETA_2_KEY = 'beta_2'
TAU_KEY = 'tau'
M_KEY = 'm'
V_KEY = 'v'

# Relative slack for the check initial_v >= tau^2 (1e-3 ** 2 != 1e-6 in floats).
_REL_TOL = 1e-9


class ReddiAdaptiveOptimizer(tff.learning.optimizers.Optimizer):
  """FedAdagrad / FedAdam / FedYogi server step (Algorithms 3-4 of seed 004).

  State: ``OrderedDict(learning_rate, beta_1, beta_2, tau, m, v)`` where ``m``
  (the first moment of ``Delta_t``, paper sign) and ``v`` (the second moment)
  have the structure of the weights. ``beta_2`` is kept (unused) for
  ``adagrad`` so all three share one state structure.
  """

  def __init__(self, kind: str, learning_rate: float, beta1: float, beta2: float,
               tau: float, initial_v: float):
    if kind not in ADAPTIVE_OPTIMIZERS:
      raise ValueError(f'kind must be one of {ADAPTIVE_OPTIMIZERS}, got {kind!r}')
    self._kind = kind
    self._lr = float(learning_rate)
    self._beta1 = float(beta1)
    self._beta2 = float(beta2)
    self._tau = float(tau)
    self._initial_v = float(initial_v)

  @property
  def kind(self) -> str:
    return self._kind

  def initialize(self, specs: Any) -> collections.OrderedDict:
    m = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
    v = tf.nest.map_structure(
        lambda s: tf.fill(s.shape, tf.constant(self._initial_v, s.dtype)), specs)
    return collections.OrderedDict([
        (LEARNING_RATE_KEY, self._lr),
        (BETA_1_KEY, self._beta1),
        (BETA_2_KEY, self._beta2),
        (TAU_KEY, self._tau),
        (M_KEY, m),
        (V_KEY, v),
    ])

  def next(self, state: collections.OrderedDict, weights: Any,
           gradients: Any) -> tuple[collections.OrderedDict, Any]:
    """One server step with pseudo-gradient ``gradients = -Delta_t``."""
    gradients = tff.learning.optimizers.handle_indexed_slices_gradients(gradients)
    tff.learning.optimizers.check_weights_gradients_match(weights, gradients)
    tf.nest.assert_same_structure(weights, state[M_KEY])
    tf.nest.assert_same_structure(weights, state[V_KEY])
    lr, beta1, beta2, tau = (state[k] for k in (LEARNING_RATE_KEY, BETA_1_KEY,
                                                 BETA_2_KEY, TAU_KEY))

    def _step(x, m, v, g):
      dtype = g.dtype
      delta = -g
      delta_sq = tf.square(delta)
      b1 = tf.cast(beta1, dtype)
      b2 = tf.cast(beta2, dtype)
      m = b1 * m + (1.0 - b1) * delta
      if self._kind == 'adagrad':
        v = v + delta_sq
      elif self._kind == 'adam':
        v = b2 * v + (1.0 - b2) * delta_sq
      else:  # yogi
        v = v - (1.0 - b2) * delta_sq * tf.sign(v - delta_sq)
      x = x + tf.cast(lr, dtype) * m / (tf.sqrt(v) + tf.cast(tau, dtype))
      return x, m, v

    flat = [tf.nest.flatten(s) for s in (weights, state[M_KEY], state[V_KEY],
                                         gradients)]
    outs = [_step(*leaves) for leaves in zip(*flat)]
    new_x, new_m, new_v = (
        tf.nest.pack_sequence_as(weights, [o[i] for o in outs]) for i in range(3))
    new_state = collections.OrderedDict([
        (LEARNING_RATE_KEY, lr),
        (BETA_1_KEY, beta1),
        (BETA_2_KEY, beta2),
        (TAU_KEY, tau),
        (M_KEY, new_m),
        (V_KEY, new_v),
    ])
    return new_state, new_x

  def get_hparams(self, state: collections.OrderedDict) -> collections.OrderedDict:
    return collections.OrderedDict(
        (k, state[k]) for k in (LEARNING_RATE_KEY, BETA_1_KEY, BETA_2_KEY, TAU_KEY))

  def set_hparams(self, state: collections.OrderedDict,
                  hparams: collections.OrderedDict) -> collections.OrderedDict:
    unknown = set(hparams) - {LEARNING_RATE_KEY, BETA_1_KEY, BETA_2_KEY, TAU_KEY}
    if unknown:
      raise ValueError(f'Unknown hparams {sorted(unknown)}; valid: '
                       f'{[LEARNING_RATE_KEY, BETA_1_KEY, BETA_2_KEY, TAU_KEY]}')
    return tff.structure.update_struct(state, **hparams)


def check_server_optimizer(name: str, learning_rate: float, momentum: float = 0.0, beta1: float = 0.9,
                           beta2: float = 0.99, tau: float = 1e-3, initial_v: float | None = None) -> None:
  """Raises ValueError naming the flag when the settings make no SERVEROPT (`build_server_optimizer`
  checks this first; a config checks it without building the optimizer)."""
  if name not in SERVER_OPTIMIZERS:
    raise ValueError(f'--server_opt must be one of {SERVER_OPTIMIZERS}, got {name!r}')
  if not learning_rate > 0:
    raise ValueError(f'--server_lr must be > 0, got {learning_rate}')
  if not 0 <= momentum < 1:
    raise ValueError(f'--server_momentum must be in [0, 1), got {momentum}')
  if name == 'sgd' and momentum != 0:
    raise ValueError(f'--server_momentum={momentum} has no effect with '
                     "--server_opt=sgd; use --server_opt=sgdm for FedAvgM")
  if not 0 <= beta1 < 1:
    raise ValueError(f'--server_beta1 must be in [0, 1), got {beta1}')
  if not 0 < beta2 < 1:
    raise ValueError(f'--server_beta2 must be in (0, 1), got {beta2}')
  if not tau > 0:
    raise ValueError(f'--server_tau must be > 0, got {tau}')
  if initial_v is not None and not initial_v >= tau**2 * (1 - _REL_TOL):
    raise ValueError(f'--server_initial_v must be >= --server_tau**2 = {tau**2:g} '
                     f'(v_-1 >= tau^2, Algorithms 3-4 of seed 004), got {initial_v}')


def build_server_optimizer(
    name: str,
    learning_rate: float,
    momentum: float = 0.0,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
    initial_v: float | None = None,
) -> tff.learning.optimizers.Optimizer:
  """Returns SERVEROPT of Algorithm 2 of seed 004 as a TFF optimizer.

  Args:
    name: one of ``SERVER_OPTIMIZERS``.
    learning_rate: server learning rate eta > 0.
    momentum: FedAvgM momentum mu in [0, 1) (``sgdm`` only; must be 0 for ``sgd``).
    beta1: first-moment decay in [0, 1) (adaptive optimizers; 0 = no momentum).
    beta2: second-moment decay in (0, 1) (``adam``, ``yogi``).
    tau: adaptivity tau > 0 (adaptive optimizers).
    initial_v: v_{-1} >= tau^2; ``None`` means tau^2.
  """
  check_server_optimizer(name, learning_rate, momentum, beta1, beta2, tau, initial_v)
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(
        learning_rate=learning_rate, momentum=momentum)
  if initial_v is None:
    initial_v = tau**2
  return ReddiAdaptiveOptimizer(name, learning_rate, beta1, beta2, tau, initial_v)
