"""Splitting a centralised labelled data set among simulated clients.

Four partitions:

* ``iid``: a seeded shuffle split into near-equal parts.
* ``one_class``: the non-iid split of seed 000 (Sec. 5): every client holds
  examples of exactly one class. With as many clients as classes, client ``k``
  holds all of the ``k``-th class; with more clients, client ``k`` holds class
  ``k mod C`` and a class's examples are split evenly among its clients.
* ``dirichlet``: the latent-Dirichlet-allocation split (Hsu et al., 2019): for
  every class ``c``, proportions ``p_c ~ Dir(alpha * 1_K)`` over the ``K``
  clients, and client ``k`` gets a ``p_{c,k}`` share of class ``c``. Small
  ``alpha`` gives skewed label mixes, large ``alpha`` near-iid ones.
* ``k_class``: McMahan et al.'s (2017) pathological non-iid split: the examples sorted by
  label (ties in a seeded random order) are cut into ``K·num_clients`` shards of consecutive
  examples (sizes differing by at most one), and each client gets ``K`` of them
  (``classes_per_client``), drawn without replacement by a seeded permutation of the shards.
  A client holds at most K classes when every shard lies within one class (class sizes that
  are multiples of the shard size); a shard that straddles two classes adds one, and two
  shards of the same class take one away (McMahan et al.: "most clients will only have
  examples of two digits").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

PARTITION_KINDS = ("iid", "one_class", "dirichlet", "k_class")

# (x, y) -> (x, y), applied with `tf.data.Dataset.map` to every element.
PreprocessFn = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


def partition(labels: np.ndarray, num_clients: int, kind: str, *, alpha: float = 0.5,
              seed: int = 0, classes_per_client: int = 2) -> list[np.ndarray]:
  """Returns each client's example indices (sorted, int64); deterministic for ``seed``.

  Args:
    labels: 1-D integer class labels of the whole data set.
    num_clients: number of clients ``K >= 1``.
    kind: one of ``iid``, ``one_class``, ``dirichlet``, ``k_class``.
    alpha: Dirichlet concentration (``dirichlet`` only), ``> 0``.
    classes_per_client: K, the shards per client (``k_class`` only), ``>= 1``.
    seed: non-negative seed for all random choices.

  Raises:
    ValueError: on a bad argument, e.g. fewer clients than classes for
      ``one_class`` or fewer examples than clients.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size == 0:
    raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}.")
  if not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"labels must be integers, got dtype {labels.dtype}.")
  if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
    raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}.")
  num_clients = int(num_clients)
  if num_clients > labels.size:
    raise ValueError(f"num_clients={num_clients} exceeds the number of examples ({labels.size}): "
                     "every client needs at least one example.")
  if kind not in PARTITION_KINDS:
    raise ValueError(f"kind={kind!r} is not a partition; choose one of: {', '.join(PARTITION_KINDS)}.")
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
  rng = np.random.default_rng(int(seed))
  if kind == "iid":
    parts = np.array_split(rng.permutation(labels.size), num_clients)
  elif kind == "one_class":
    parts = _one_class(labels, num_clients, rng)
  elif kind == "k_class":
    parts = _k_class(labels, num_clients, classes_per_client, rng)
  else:
    if not (np.isfinite(alpha) and alpha > 0):
      raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}.")
    parts = _dirichlet(labels, num_clients, float(alpha), rng)
  return [np.sort(p).astype(np.int64) for p in parts]


def _one_class(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
  """Client k gets an even share of class ``classes[k mod C]``."""
  classes = np.unique(labels)
  num_classes = classes.size
  if num_clients < num_classes:
    raise ValueError(
        f"one_class partition needs num_clients >= number of classes; got num_clients={num_clients} "
        f"for {num_classes} classes.")
  parts: list[Optional[np.ndarray]] = [None] * num_clients
  for c_pos, c in enumerate(classes):
    owners = list(range(c_pos, num_clients, num_classes))
    members = rng.permutation(np.flatnonzero(labels == c))
    if members.size < len(owners):
      raise ValueError(
          f"one_class partition: class {c} has {members.size} examples, fewer than its "
          f"{len(owners)} clients (num_clients={num_clients}).")
    for owner, share in zip(owners, np.array_split(members, len(owners))):
      parts[owner] = share
  return parts


def _k_class(labels: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
  """McMahan et al.'s shards: sorted by label, cut in k·num_clients, k shards per client."""
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
    raise ValueError(f"classes_per_client must be an integer >= 1, got {k!r}.")
  if k * num_clients > labels.size:
    raise ValueError(f"k_class partition: {k} shards for each of {num_clients} clients need at least "
                     f"{k * num_clients} examples, there are {labels.size}.")
  order = np.lexsort((rng.permutation(labels.size), labels))  # by label, ties in a seeded order
  shards = np.array_split(order, k * num_clients)
  owner_of = rng.permutation(k * num_clients)  # shard owner_of[j] goes to client j // k
  return [np.concatenate([shards[s] for s in owner_of[c * k:(c + 1) * k]]) for c in range(num_clients)]


def _dirichlet(labels: np.ndarray, num_clients: int, alpha: float,
               rng: np.random.Generator) -> list[np.ndarray]:
  """LDA split: class c's examples are cut in Dir(alpha)-distributed shares.

  A client left empty receives one random example from the currently largest
  client, so every client holds data (this is needed only for tiny ``alpha``).
  """
  shares: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for c in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == c))
    proportions = rng.dirichlet(np.full(num_clients, alpha))
    cuts = np.round(np.cumsum(proportions)[:-1] * members.size).astype(int)
    for k, piece in enumerate(np.split(members, cuts)):
      shares[k].append(piece)
  parts = [np.concatenate(s) if s else np.zeros([0], np.int64) for s in shares]
  for k in range(num_clients):
    if parts[k].size == 0:
      donor = int(np.argmax([p.size for p in parts]))
      pick = int(rng.integers(parts[donor].size))
      parts[k] = parts[donor][pick:pick + 1]
      parts[donor] = np.delete(parts[donor], pick)
  return parts


def client_data_from_arrays(x: np.ndarray, y: np.ndarray, parts: Sequence[np.ndarray],
                            preprocess: Optional[PreprocessFn] = None) -> tff.simulation.datasets.ClientData:
  """A ``ClientData`` whose client ``str(k)`` yields unbatched ``(x[i], y[i])`` for ``i`` in ``parts[k]``.

  Keep ``x`` compact (e.g. ``uint8``) and convert in ``preprocess``: the
  examples are constants in the dataset graphs that TFF ships to its workers.
  A dataset made by ``create_tf_dataset_for_client`` (Python client id) holds
  only that client's examples; the traced path used by ``dataset_computation``
  and ``create_tf_dataset_from_all_clients`` (client id as a string tensor)
  holds all of them and slices at run time.

  Args:
    x: features, first axis = examples.
    y: labels, first axis = examples.
    parts: each client's example indices (non-empty), e.g. from `partition`.
    preprocess: optional ``(x, y) -> (x, y)`` mapped over every element.
  """
  x, y = np.asarray(x), np.asarray(y)
  if x.shape[:1] != y.shape[:1]:
    raise ValueError(f"x and y must have the same number of examples, got {x.shape[:1]} and {y.shape[:1]}.")
  if len(parts) == 0:
    raise ValueError("parts must hold at least one client.")
  parts = [np.asarray(p, dtype=np.int64).reshape([-1]) for p in parts]
  for k, p in enumerate(parts):
    if p.size == 0:
      raise ValueError(f"parts[{k}] is empty: every client needs at least one example.")
    if p.min() < 0 or p.max() >= x.shape[0]:
      raise ValueError(f"parts[{k}] has indices outside [0, {x.shape[0]}).")
  order = np.concatenate(parts)
  x_all, y_all = x[order], y[order]
  offsets = np.concatenate([[0], np.cumsum([p.size for p in parts])]).astype(np.int64)
  num_clients = len(parts)

  def dataset_fn(client_id) -> tf.data.Dataset:
    if isinstance(client_id, str):
      k = int(client_id)
      if not 0 <= k < num_clients:
        raise ValueError(f"client_id={client_id!r} is not one of '0'..'{num_clients - 1}'.")
      lo, hi = offsets[k], offsets[k + 1]
      ds = tf.data.Dataset.from_tensor_slices((x_all[lo:hi], y_all[lo:hi]))
    else:
      k = tf.strings.to_number(client_id, out_type=tf.int64)
      start = tf.gather(tf.constant(offsets), k)
      size = tf.gather(tf.constant(offsets), k + 1) - start
      ds = tf.data.Dataset.from_tensor_slices((x_all, y_all)).skip(start).take(size)
    if preprocess is not None:
      ds = ds.map(preprocess)
    return ds

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      [str(k) for k in range(num_clients)], dataset_fn)


def check_num_clients(task: str, num_clients: int, kind: str, num_examples: int, num_classes: int,
                      source: str = "", classes_per_client: int = 2) -> None:
  """ValueError naming ``--num_clients`` when `partition` of a task's training labels would fail.

  Args:
    task: the task's registry name, for the message.
    num_clients: ``--num_clients``.
    kind: ``--partition``.
    num_examples: number of training examples to be partitioned.
    num_classes: number of classes (``one_class`` needs a client for each).
    source: ``--data_source`` to name in the message, if ``num_examples`` depends on it.
    classes_per_client: ``--classes_per_client`` (``k_class`` cuts K·num_clients shards).
  """
  if num_clients > num_examples:
    source_desc = f" with --data_source={source!r}" if source else ""
    raise ValueError(f"--num_clients={num_clients} is not valid for task {task!r}{source_desc}: only "
                     f"{num_examples} training examples.")
  if kind == "one_class" and num_clients < num_classes:
    raise ValueError(f"--num_clients={num_clients} is not valid for task {task!r} with "
                     f"--partition='one_class': it needs at least {num_classes} clients (one per class).")
  if kind == "k_class" and classes_per_client * num_clients > num_examples:
    source_desc = f" with --data_source={source!r}" if source else ""
    raise ValueError(f"--classes_per_client={classes_per_client} is not valid for task {task!r}{source_desc} "
                     f"with --num_clients={num_clients}: --partition='k_class' cuts "
                     f"{classes_per_client * num_clients} shards of the {num_examples} training examples; "
                     f"choose at most {num_examples // num_clients}.")


def hold_out(parts: Sequence[np.ndarray], fraction: float,
             seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
  """Moves ⌊fraction·n_k + ½⌋ of each client's examples, drawn from ``seed``, into one
  validation set (at most n_k − 1: every client keeps one example to train on).

  Returns (the clients' remaining indices, sorted; the validation indices, sorted). The
  validation set is stratified over clients, so it has the clients' label mix.
  """
  if not (isinstance(fraction, (int, float)) and 0.0 <= fraction < 1.0):
    raise ValueError(f"fraction must be in [0, 1), got {fraction!r}.")
  rng = np.random.default_rng([int(seed), 0x7A11])
  kept, held = [], []
  for p in parts:
    p = np.asarray(p, np.int64)
    m = min(int(np.floor(fraction * p.size + 0.5)), p.size - 1)
    out = rng.choice(p.size, size=m, replace=False) if m > 0 else np.zeros([0], np.int64)
    mask = np.zeros(p.size, bool)
    mask[out] = True
    kept.append(np.sort(p[~mask]))
    held.append(p[mask])
  return kept, np.sort(np.concatenate(held)).astype(np.int64)


def partitioned_client_data(x: np.ndarray, y: np.ndarray, num_clients: int, kind: str, *,
                            alpha: float = 0.5, seed: int = 0, classes_per_client: int = 2,
                            preprocess: Optional[PreprocessFn] = None,
                            validation_fraction: float = 0.0,
                            ) -> tuple[tff.simulation.datasets.ClientData, Optional[tf.data.Dataset], str]:
  """`partition` of ``y`` made into `client_data_from_arrays`, the validation data
  `hold_out` takes from it (``None`` when ``validation_fraction`` is 0), and a short
  description: ``kind``, with ``(alpha=...)`` for ``dirichlet``, ``(K=...)`` for ``k_class`` and
  the held-out count.
  """
  parts = partition(y, num_clients, kind, alpha=alpha, seed=seed, classes_per_client=classes_per_client)
  description = kind + {"dirichlet": f"(alpha={alpha:g})", "k_class": f"(K={classes_per_client})"}.get(kind, "")
  validation = None
  if validation_fraction > 0:
    parts, held = hold_out(parts, validation_fraction, seed)
    validation = tf.data.Dataset.from_tensor_slices((x[held], y[held]))
    if preprocess is not None:
      validation = validation.map(preprocess)
    description += f", {held.size} held out for validation"
  return client_data_from_arrays(x, y, parts, preprocess), validation, description
