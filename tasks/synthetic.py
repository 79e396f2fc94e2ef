"""FedProx's Synthetic(alpha, beta) federated data (Li et al., 2018, Sec. 5.1).

Client ``k`` of Synthetic(alpha, beta):

* ``u_k ~ N(0, alpha)``; ``W_k`` (10 x 60) and ``b_k`` (10) have entries ``~ N(u_k, 1)``
  (alpha controls how much the local models differ);
* ``B_k ~ N(0, beta)``; ``v_k`` (60) has entries ``~ N(B_k, 1)`` (beta controls how
  much the local inputs differ);
* ``x ~ N(v_k, Sigma)`` with diagonal ``Sigma_jj = j^(-1.2)``, ``j = 1..60``;
* ``y = argmax(softmax(W_k x + b_k))``.

``N(m, s)`` is read as mean ``m`` and *variance* ``s``, the usual notation.
(The authors' public generator passes alpha/beta as NumPy's standard
deviation; the two agree for alpha, beta in {0, 1}.) ``iid`` uses one
``W, b ~ N(0, 1)`` and ``v = 0`` for all clients. Client sizes follow a power
law: ``floor(LogNormal(4, 2)) + 50``. Each client's examples are split 80/20;
the 20% are pooled into the test set.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tff_robust import tasks
from tff_robust.tasks import partition as partition_lib
from tff_robust.tasks.base import Task, TaskOptions, sparse_accuracy

NAME = "synthetic"
# 'synthetic_<alpha>_<beta>' names are parsed, so adding a pair is adding a name here.
DATA_SOURCES = ("synthetic_1_1", "synthetic_0.5_0.5", "synthetic_0_0", "iid")
MODELS = ("logreg",)
PARTITIONS = ("natural",)
# --validation_fraction holds out a share of each client's training examples (partition.hold_out).
HOLDS_OUT_VALIDATION = True
NUM_CLASSES = 10
DIM = 60
TEST_FRACTION = 0.2
SIZE_LOGNORMAL_MEAN, SIZE_LOGNORMAL_SIGMA, SIZE_MIN = 4.0, 2.0, 50


@dataclasses.dataclass(frozen=True)
class SyntheticClient:
  """One client's examples and the parameters that generated them."""

  x: np.ndarray  # [n, 60] float32
  y: np.ndarray  # [n] int32
  w: np.ndarray  # [10, 60]
  b: np.ndarray  # [10]
  v: np.ndarray  # [60], the input mean


def parse_source(data_source: str) -> tuple[float, float] | None:
  """``'synthetic_<alpha>_<beta>'`` -> ``(alpha, beta)``; ``'iid'`` -> ``None``."""
  if data_source == "iid":
    return None
  prefix, _, rest = data_source.partition("_")
  alpha, _, beta = rest.partition("_")
  try:
    parsed = float(alpha), float(beta)
  except ValueError:
    parsed = None
  if prefix != "synthetic" or parsed is None or min(parsed) < 0:
    raise ValueError(f"data_source={data_source!r} is not 'iid' or 'synthetic_<alpha>_<beta>' "
                     "with alpha, beta >= 0.")
  return parsed


def input_variances() -> np.ndarray:
  """Diagonal of Sigma: ``j^(-1.2)`` for ``j = 1..60``."""
  return np.arange(1, DIM + 1, dtype=np.float64) ** -1.2


def generate(num_clients: int, alpha_beta: tuple[float, float] | None, seed: int) -> list[SyntheticClient]:
  """Draws every client's data (deterministic for ``seed``); ``alpha_beta=None`` is the iid variant."""
  if num_clients < 1:
    raise ValueError(f"num_clients must be >= 1, got {num_clients}.")
  rng = np.random.default_rng(seed)
  sizes = np.floor(rng.lognormal(SIZE_LOGNORMAL_MEAN, SIZE_LOGNORMAL_SIGMA, num_clients)).astype(int) + SIZE_MIN
  sd_x = np.sqrt(input_variances())
  if alpha_beta is None:
    shared_w = rng.normal(0.0, 1.0, (NUM_CLASSES, DIM))
    shared_b = rng.normal(0.0, 1.0, NUM_CLASSES)
  clients = []
  for n in sizes:
    if alpha_beta is None:
      w, b, v = shared_w, shared_b, np.zeros(DIM)
    else:
      alpha, beta = alpha_beta
      u = rng.normal(0.0, np.sqrt(alpha))
      w = rng.normal(u, 1.0, (NUM_CLASSES, DIM))
      b = rng.normal(u, 1.0, NUM_CLASSES)
      big_b = rng.normal(0.0, np.sqrt(beta))
      v = rng.normal(big_b, 1.0, DIM)
    x = v + sd_x * rng.standard_normal((n, DIM))
    y = np.argmax(x @ w.T + b, axis=1)  # softmax is monotone: argmax of the logits.
    clients.append(SyntheticClient(x.astype(np.float32), y.astype(np.int32), w, b, v))
  return clients


def create_logreg() -> tf.keras.Sequential:
  """Multinomial logistic regression: Dense(10) logits on 60 features."""
  return tf.keras.Sequential([tf.keras.Input(shape=(DIM,)), tf.keras.layers.Dense(NUM_CLASSES)],
                             name="synthetic_logreg")


def validate_options(options: TaskOptions) -> None:
  """Checks resolved options that need no data."""
  if options.num_clients < 1:
    raise ValueError(f"--num_clients={options.num_clients} is not valid for task 'synthetic'; "
                     "it must be >= 1.")
  parse_source(options.data_source)


def build_task(options: TaskOptions) -> Task:
  """Builds Synthetic(alpha, beta) with ``options.num_clients`` clients."""
  options = tasks.resolve_options(NAME, options)
  clients = generate(options.num_clients, parse_source(options.data_source), options.seed)
  rng = np.random.default_rng([options.seed, 1])
  train_x, train_y, test_x, test_y, parts = [], [], [], [], []
  offset = 0
  for c in clients:
    order = rng.permutation(c.y.size)
    num_test = max(1, int(round(TEST_FRACTION * c.y.size)))
    test_idx, train_idx = order[:num_test], order[num_test:]
    train_x.append(c.x[train_idx])
    train_y.append(c.y[train_idx])
    test_x.append(c.x[test_idx])
    test_y.append(c.y[test_idx])
    parts.append(np.arange(offset, offset + train_idx.size))
    offset += train_idx.size
  all_x, all_y = np.concatenate(train_x), np.concatenate(train_y)
  validation, held_desc = None, ""
  if options.validation_fraction > 0:
    parts, held = partition_lib.hold_out(parts, options.validation_fraction, options.seed)
    validation = tf.data.Dataset.from_tensor_slices((all_x[held], all_y[held]))
    held_desc = f" ({held.size} held out for validation)"
  train = partition_lib.client_data_from_arrays(all_x, all_y, parts)
  test = tf.data.Dataset.from_tensor_slices((np.concatenate(test_x), np.concatenate(test_y)))
  return Task(
      name=NAME,
      train=train,
      test=test,
      validation=validation,
      model_fn=create_logreg,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"FedProx {options.data_source}: {options.num_clients} clients (seed {options.seed}), "
            f"{offset} train{held_desc} / {sum(t.size for t in test_y)} test examples; model logreg."))
