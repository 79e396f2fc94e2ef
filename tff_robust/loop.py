"""The training loop: samples clients, feeds the process, keeps client state,
releases metrics (CSV, TensorBoard, log) and checkpoints through `tff.program`.

Everything random is derived from (seed, round): the clients sampled, each
client's data order and the process' own per-round seeds. A run resumed from a
checkpoint therefore continues exactly as the uninterrupted run would.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.tasks.base import Task
from tff_robust import attacks
from tff_robust import client_states
from tff_robust import evaluation
from tff_robust import fedex as fedex_lib
from tff_robust import options
from tff_robust import seeding
from tff_robust.options import option, seed_option
from tff_robust.process import RobustProcess

logger = logging.getLogger("tff_robust")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """How the driver runs a process (flags `--rounds`, `--clients_per_round`, ...)."""

  output_dir: str
  rounds: int = option(30, "rounds", "Number of federated rounds.", check=lambda v: v >= 1, allowed="must be ≥ 1")
  clients_per_round: int = option(0, "clients_per_round", "Clients sampled per round (0: use --client_fraction).",
                                  check=lambda v: v >= 0, allowed="must be ≥ 0")
  client_fraction: float = option(1.0, "client_fraction", "Fraction C of clients sampled per round.",
                                  check=lambda v: 0 < v <= 1, allowed="must be in (0, 1]")
  rounds_per_eval: int = option(10, "rounds_per_eval", "Evaluate on the test set every N rounds.",
                                check=lambda v: v >= 1, allowed="must be ≥ 1")
  rounds_per_checkpoint: int = option(10, "rounds_per_checkpoint", "Checkpoint every N rounds.",
                                      check=lambda v: v >= 1, allowed="must be ≥ 1")
  seed: int = seed_option()
  client_val_every: int = option(10, "client_val_every",
                                 "With val_accuracy weighting, every n-th client example is held out.",
                                 check=lambda v: v >= 2, allowed="must be ≥ 2")
  shuffle_buffer: int = 1000
  eval_batch_size: int = 256
  max_clients_in_memory: int = 1000
  log_every: int = 1
  client_dropout_rate: float = option(0.0, "client_dropout_rate",
                                      "Each sampled client fails independently with this probability.",
                                      check=lambda v: 0 <= v < 1, allowed="must be in [0, 1)")
  byzantine_fraction: float = option(0.0, "byzantine_fraction",
                                     "Fraction of each round's clients that send corrupted updates.",
                                     check=lambda v: 0 <= v < 1, allowed="must be in [0, 1)")
  divergence_factor: float = option(0.0, "divergence_factor",
                                    "Reject a round whose model loss (256 held-out examples) is non-finite or "
                                    "exceeds this factor × the last accepted one (0 = off).",
                                    check=lambda v: v == 0 or v > 1, allowed="must be 0 (off) or > 1")

  def __post_init__(self):
    options.validate(self)


def run_sync(coro: Coroutine) -> Any:
  """Runs a coroutine to completion, also inside a running event loop (Colab)."""
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(coro)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    return pool.submit(asyncio.run, coro).result()


def num_sampled(num_clients: int, clients_per_round: int, fraction: float) -> int:
  """Clients per round: an explicit count, else max(1, round(C·K))."""
  if clients_per_round > 0:
    return min(clients_per_round, num_clients)
  return max(1, min(num_clients, int(round(fraction * num_clients))))


def sample_clients(client_ids: Sequence[str], n: int, seed: int, round_num: int) -> list[str]:
  """A reproducible sample of ``n`` distinct clients for ``round_num``."""
  rng = np.random.default_rng([seed, round_num, 0x5A4D])
  idx = rng.choice(len(client_ids), size=n, replace=False)
  return [client_ids[i] for i in sorted(idx)]


def surviving_clients(cids: Sequence[str], rate: float, seed: int, round_num: int) -> list[str]:
  """The sampled clients that did not drop out (each fails with probability ``rate``)."""
  if rate <= 0:
    return list(cids)
  rng = np.random.default_rng([seed, round_num, 0xD50])
  return [c for c, u in zip(cids, rng.random(len(cids))) if u >= rate]


def _data_seed(seed: int, round_num: int, index: int) -> int:
  return int(np.random.default_rng([seed, round_num, index, 0xDA7A]).integers(2**31 - 1))


def split_validation(dataset: tf.data.Dataset, every: int) -> tuple[tf.data.Dataset, tf.data.Dataset]:
  """(train, val): every ``every``-th example is held out for validation."""
  indexed = dataset.enumerate()
  val = indexed.filter(lambda i, _: i % every == 0).map(lambda _, e: e)
  train = indexed.filter(lambda i, _: i % every != 0).map(lambda _, e: e)
  return train, val


class CheckpointMismatchError(ValueError):
  """The output directory holds a checkpoint of a differently configured process."""


class StoppedError(Exception):
  """`TrainingLoop.run` stopped at the end of a round because ``stop()`` said so; the
  round's checkpoint is saved, so running again resumes after it."""

  def __init__(self, round_num: int):
    super().__init__(f"stopped after round {round_num}")
    self.round_num = round_num


class ReleaseManagers:
  """Metrics to CSV and TensorBoard (`tff.program`) and to the log."""

  def __init__(self, output_dir: str):
    self.csv = tff.program.CSVFileReleaseManager(
        file_path=os.path.join(output_dir, "metrics.csv"), key_fieldname="round")
    self.tensorboard = tff.program.TensorBoardReleaseManager(
        summary_dir=os.path.join(output_dir, "tensorboard"))

  def release(self, metrics: dict[str, float], round_num: int) -> None:
    async def _release():
      await self.csv.release(metrics, key=round_num)
      await self.tensorboard.release(metrics, key=round_num)
    run_sync(_release())


def _to_float_dict(metrics) -> dict[str, float]:
  out = {}
  for key, value in (metrics.items() if hasattr(metrics, "items") else []):
    if hasattr(value, "items"):
      for sub, v in _to_float_dict(value).items():
        out[f"{key}/{sub}"] = v
    else:
      arr = np.asarray(value)
      if arr.ndim == 0:
        out[key] = float(arr)
      else:
        for i, v in enumerate(arr.reshape(-1)):
          out[f"{key}/{i}"] = float(v)
  return out


class TrainingLoop:
  """Drives ``process`` over ``task`` as ``config`` says; see `run`."""

  def __init__(self, process: RobustProcess, task: Task, config: LoopConfig, *,
               batch_size_eval: Optional[int] = None,
               initial_theta_fn: Optional[Callable[[str], list[np.ndarray]]] = None):
    self.process = process
    self.task = task
    self.config = config
    self.client_ids = sorted(task.train.client_ids)
    self.client_index = {cid: i for i, cid in enumerate(self.client_ids)}
    self.trainer = process.trainer
    os.makedirs(config.output_dir, exist_ok=True)
    self.releases = ReleaseManagers(config.output_dir)
    self.checkpoint_dir = os.path.join(config.output_dir, "checkpoints")
    self.checkpoints = tff.program.FileProgramStateManager(
        root_dir=self.checkpoint_dir, keep_total=3, keep_first=False)
    self.theta_store = None
    if self.trainer.theta_in:
      if initial_theta_fn is None:
        raise ValueError("persisted client state needs initial_theta_fn")
      self.theta_store = client_states.ClientStateStore(
          os.path.join(config.output_dir, "client_states"), initial_theta_fn,
          config.max_clients_in_memory)
    self._evaluate = evaluation.make_evaluator(task.model_fn, task.loss_fn, task.accuracy_fn)
    self._test = task.test.batch(config.eval_batch_size).cache()
    self._val = (task.validation.batch(config.eval_batch_size).cache()
                 if task.validation is not None else None)
    self._guard_loss: Optional[float] = None
    if config.divergence_factor > 0:
      self._guard_data = tf.data.Dataset.from_tensor_slices(  # same from (seed) on every restart
          evaluation.server_sample(task.train, task.validation, 256, config.seed)).batch(256).cache()
    self.history: list[dict[str, float]] = []

  # ---- inputs ------------------------------------------------------------------------
  def client_input(self, cid: str, round_num: int, index: int, byzantine: bool = False):
    data = self.task.train.create_tf_dataset_for_client(cid)
    val = None
    if self.trainer.has_val:
      data, val = split_validation(data, self.config.client_val_every)
    # The order comes from (seed, round, client) only. A fixed order per round (reshuffled
    # by the next round's seed): TF's reshuffling seed generator does not survive the
    # dataset's serialization to the TFF worker, which would make runs irreproducible.
    with seeding.global_seed(self.config.seed):
      data = data.shuffle(self.config.shuffle_buffer,
                          seed=_data_seed(self.config.seed, round_num, index),
                          reshuffle_each_iteration=False)
    seed = None
    if self.trainer.has_seed:  # the client's own seed for c ~ θ (FedEx), from (seed, round, id)
      seed = fedex_lib.client_seed(self.config.seed, round_num, self.client_index[cid])
    theta = self.theta_store.get(cid) if self.trainer.theta_in else None
    return self.trainer.input.pack(data, val=val, seed=seed, byzantine=byzantine, theta=theta)

  def _diverged(self, new_state, metrics: dict[str, float]) -> bool:
    """Divergence guard: the new model's loss on a fixed held-out sample is not finite,
    or exceeds ``divergence_factor`` × the last accepted model's."""
    if self.config.divergence_factor <= 0:
      return False
    loss = self._metrics_of(new_state, self._guard_data)["loss"]
    metrics["guard_loss"] = loss
    if not np.isfinite(loss) or (self._guard_loss is not None
                                 and loss > self.config.divergence_factor * self._guard_loss):
      return True
    self._guard_loss = loss
    return False

  def _metrics_of(self, state, dataset: tf.data.Dataset) -> dict[str, float]:
    weights = self.process.get_model_weights(state)
    return self._evaluate(weights.trainable, weights.non_trainable, dataset)

  def evaluate(self, state) -> dict[str, float]:
    """Test metrics (``test_*``) and, when the task holds out validation data, ``val_*``."""
    out = {f"test_{k}": v for k, v in self._metrics_of(state, self._test).items()}
    if self._val is not None:
      out.update({f"val_{k}": v for k, v in self._metrics_of(state, self._val).items()})
    return out

  # ---- checkpoints -------------------------------------------------------------------
  def _save(self, state, round_num: int) -> None:
    if self.theta_store is not None:
      self.theta_store.checkpoint(round_num)
    run_sync(self.checkpoints.save({"state": state, "round": np.int32(round_num)}, round_num))

  def _restore(self, initial_state):
    versions = run_sync(self.checkpoints.get_versions())
    if not versions:
      return initial_state, 0
    latest = max(versions)
    try:
      saved = run_sync(self.checkpoints.load(latest, {"state": initial_state, "round": np.int32(0)}))
    except (ValueError, TypeError) as e:
      raise CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} was written by a run with a different "
          f"configuration (its state does not fit this process: {str(e).splitlines()[0][:200]}); "
          "use another --experiment_name or --root_output_dir, or delete that directory") from None
    round_num = int(saved["round"])
    if self.theta_store is not None:
      self.theta_store.restore(round_num)
    logger.info("Resumed from the checkpoint of round %d.", round_num)
    return saved["state"], round_num

  # ---- the loop ----------------------------------------------------------------------
  def run(self, progress=None, stop: Optional[Callable[[], bool]] = None) -> dict[str, float]:
    """Runs (or resumes) training; returns the final metrics (test accuracy/loss).

    ``progress`` (e.g. `console.RunConsole`) gets ``start(resumed_round)`` and
    ``round(round_num, metrics)``. When ``stop()`` is true at the end of a round, the round
    is checkpointed and `StoppedError` raised.
    """
    cfg = self.config
    state, start = self._restore(self.process.initialize())
    if start > cfg.rounds:
      raise CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} is of round {start}, beyond --rounds={cfg.rounds}: "
          f"use --rounds ≥ {start} to resume or extend that run")
    if progress is not None:
      progress.start(start)
    if cfg.divergence_factor > 0:
      self._guard_loss = self._metrics_of(state, self._guard_data)["loss"]
    per_round = num_sampled(len(self.client_ids), cfg.clients_per_round, cfg.client_fraction)
    final: dict[str, float] = {}
    for round_num in range(start + 1, cfg.rounds + 1):
      t0 = time.perf_counter()
      sampled = sample_clients(self.client_ids, per_round, cfg.seed, round_num)
      cids = surviving_clients(sampled, cfg.client_dropout_rate, cfg.seed, round_num)
      if not cids:  # every sampled client dropped out: record the round, keep the model
        metrics = {"num_clients": 0.0, "dropped_clients": float(len(sampled)), "skipped_round": 1.0}
      else:
        byz = attacks.byzantine_mask(len(cids), cfg.byzantine_fraction, (cfg.seed, round_num))
        inputs = [self.client_input(cid, round_num, self.client_index[cid], bool(b))
                  for cid, b in zip(cids, byz)]
        if self.theta_store is not None:
          output, thetas = self.process.next_with_client_states(state, inputs)
          new_thetas = list(zip(cids, thetas))
        else:
          output, new_thetas = self.process.next(state, inputs), []
        metrics = _to_float_dict(output.metrics)
        metrics.update(dropped_clients=float(len(sampled) - len(cids)),
                       byzantine_clients=float(np.sum(byz)), skipped_round=0.0)
        if self._diverged(output.state, metrics):
          # Divergence guard: keep the previous model; the round counter and AH's policy move on.
          metrics["rejected_round"] = 1.0
          state = self.process.after_rejection(state, output.state)
        else:
          metrics["rejected_round"] = 0.0
          state = output.state
          for cid, theta in new_thetas:
            self.theta_store.put(cid, list(theta), round_num)
      metrics["round_seconds"] = time.perf_counter() - t0
      if round_num % cfg.rounds_per_eval == 0 or round_num == cfg.rounds:
        metrics.update(self.evaluate(state))
      self.releases.release(metrics, round_num)
      self.history.append({"round": round_num, **metrics})
      if round_num % cfg.log_every == 0 or round_num == cfg.rounds:
        logger.info("round %d/%d %s", round_num, cfg.rounds,
                    " ".join(f"{k}={v:.4g}" for k, v in metrics.items()
                             if k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy",
                                      "client_lr", "local_steps", "round_seconds")))
      saved = round_num % cfg.rounds_per_checkpoint == 0 or round_num == cfg.rounds
      if saved:
        self._save(state, round_num)
      if progress is not None:
        progress.round(round_num, metrics)
      if stop is not None and stop() and round_num < cfg.rounds:
        if not saved:
          self._save(state, round_num)
        self.state = state
        raise StoppedError(round_num)
      final = metrics
    self.state = state
    result = {k: v for k, v in final.items() if k.startswith(("test_", "val_"))}
    if not result:
      result = self.evaluate(state)
    with open(os.path.join(cfg.output_dir, "final_metrics.json"), "w") as f:
      json.dump(result, f, indent=2, sort_keys=True)
    return result


def total_train_examples(client_data, val_every: int = 0) -> int:
  """N = Σ_k n_k over all K clients, of the examples they train on (without every
  ``val_every``-th one when `split_validation` holds those out)."""
  total = 0
  for cid in client_data.client_ids:
    n = evaluation.num_examples(client_data.create_tf_dataset_for_client(cid))
    total += n - (-(-n // val_every) if val_every > 0 else 0)
  return total


def build_training_loop(task: Task, process_config, loop_config: LoopConfig, *,
                        rm_client_state: str = "reset", ah_val_examples: int = 500) -> TrainingLoop:
  """The process of ``process_config`` over ``task`` and its driver (what `main` runs).

  Call inside a TFF execution context (`tff_robust.runtime.tff_runtime`).
  """
  from tff_robust import client_work  # pylint: disable=g-import-not-at-top
  from tff_robust import process as process_lib  # pylint: disable=g-import-not-at-top
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  server_val = None
  if process_config.ah is not None and process_config.ah.loss_source == "server":
    server_val = evaluation.server_sample(task.train, task.validation, ah_val_examples,
                                          process_config.seed)
  total = None
  if process_config.aggregation_norm == "all":  # N of Algorithm 1 line 13
    total = total_train_examples(task.train, loop_config.client_val_every
                                 if process_config.needs_client_val else 0)
  process = process_lib.build_process(spec, process_config, rm_client_state=rm_client_state,
                                      server_val=server_val, total_examples=total)
  initial_theta = None
  if process.trainer.theta_in:
    theta0 = client_work.initial_theta(spec, process_config.seed)
    initial_theta = lambda cid: theta0  # noqa: E731
  return TrainingLoop(process, task, loop_config, initial_theta_fn=initial_theta)
