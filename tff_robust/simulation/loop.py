"""The training loop: each round, the clients `selection` draws get their inputs from
`client_data`, the process trains them, the `guard`s may reject the result, and the round's
metrics go out through `releases`; `checkpoints` saves the state (and the state the client
components keep per client) so a run resumes where it stopped.

Everything random is derived from (seed, round): the clients sampled, each
client's data order and the process' own per-round seeds. A run resumed from a
checkpoint therefore continues exactly as the uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms import evaluation, process_for_task, robust_statistics
from tff_robust.algorithms.config import ProcessConfig
from tff_robust.algorithms.process import RobustProcess
from tff_robust.common import hard_stop, interrupts, options, run_lock, strict_json
from tff_robust.common.options import option, seed_option
from tff_robust.common.round_rows import accepted_update_norms
from tff_robust.simulation import client_states
from tff_robust.simulation import privacy_accounting
from tff_robust.simulation.checkpoints import CheckpointMismatchError, RunCheckpoints
from tff_robust.simulation.client_data import ClientFeed
from tff_robust.simulation.client_metrics import ClientMetricsWriter
from tff_robust.simulation.guard import DivergenceGuard, UpdateNormGuard
from tff_robust.simulation.releases import RunReleases, to_float_dict
from tff_robust.simulation.selection import ClientSelection, num_sampled
from tff_robust.tasks.base import Task

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
  update_norm_guard: float = option(0.0, "update_norm_guard",
                                    "Reject a round whose aggregated update norm ‖Δ_t‖ is non-finite or exceeds "
                                    "this factor × the median of the last --update_norm_guard_window accepted "
                                    "rounds' norms (0 = off).",
                                    check=lambda v: v == 0 or v > 1, allowed="must be 0 (off) or > 1")
  update_norm_guard_window: int = option(5, "update_norm_guard_window",
                                         "Accepted rounds whose median ‖Δ‖ --update_norm_guard compares with.",
                                         check=lambda v: v >= 1, allowed="must be ≥ 1")
  client_metrics: bool = option(False, "client_metrics",
                                "Write clients.csv: per round, each client's examples, local loss and "
                                "accuracy, update norm and the weight the aggregator gave it.")

  def __post_init__(self):
    options.validate(self)


def check_resumable(output_dir: str, rounds: int) -> None:
  """Raises `CheckpointMismatchError` when ``output_dir`` holds a checkpoint beyond ``rounds``
  (a later model would be reported as this run's); cheap, before anything is built or written."""
  _check_rounds(os.path.join(output_dir, "checkpoints"), interrupts.checkpoint_round(output_dir), rounds)


def _check_rounds(directory: str, start: int, rounds: int) -> None:
  if start > rounds:
    raise CheckpointMismatchError(
        f"the checkpoint in {directory} is of round {start}, beyond --rounds={rounds}: "
        f"use --rounds ≥ {start} to resume or extend that run")


class StoppedError(Exception):
  """`TrainingLoop.run` stopped at the end of a round because ``stop()`` said so; the
  round's checkpoint is saved, so running again resumes after it."""

  def __init__(self, round_num: int):
    super().__init__(f"stopped after round {round_num}")
    self.round_num = round_num


class TrainingLoop:
  """Drives ``process`` over ``task`` as ``config`` says; see `run`."""

  def __init__(self, process: RobustProcess, task: Task, config: LoopConfig, *,
               initial_state_fn: Optional[Callable[[str], client_states.State]] = None,
               privacy: Optional[privacy_accounting.PrivacyLedger] = None):
    """``initial_state_fn(cid)``: a client's state before its first round (default: the client
    components' declared initial values, the same for every client). ``privacy``: with DP, the
    ledger whose ε (``dp_epsilon``, ``dp_delta``) each round's metrics and the final ones carry."""
    self.process = process
    self.task = task
    self.config = config
    self.client_ids = sorted(task.train.client_ids)
    os.makedirs(config.output_dir, exist_ok=True)
    state_store = None
    if process.trainer.stateful:
      if initial_state_fn is None:
        state0 = process.trainer.initial_state()
        initial_state_fn = lambda cid: state0  # noqa: E731
      state_store = client_states.ClientStateStore(
          os.path.join(config.output_dir, "client_states"), initial_state_fn,
          config.max_clients_in_memory)
    self.state_store = state_store
    self.selection = ClientSelection(
        self.client_ids, num_sampled(len(self.client_ids), config.clients_per_round, config.client_fraction),
        config.seed, config.client_dropout_rate, config.byzantine_fraction)
    self.client_input = ClientFeed(task.train, self.client_ids, process.trainer.input, config.seed,
                                   config.shuffle_buffer, config.client_val_every, state_store)
    self.checkpoints = RunCheckpoints(config.output_dir, state_store)
    self.releases = RunReleases(config.output_dir, config.log_every)
    self.client_metrics = None
    if config.client_metrics:
      if process.next_with_client_reports is None:
        raise ValueError("--client_metrics needs a process built with client_reports=True "
                         "(build_training_loop builds it so)")
      self.client_metrics = ClientMetricsWriter(config.output_dir)
    self._evaluate = evaluation.make_evaluator(task.model_fn, task.loss_fn, task.accuracy_fn)
    self._test = task.test.batch(config.eval_batch_size).cache()
    self._val = (task.validation.batch(config.eval_batch_size).cache()
                 if task.validation is not None else None)
    self.guard = None
    if config.divergence_factor > 0:
      guard_data = tf.data.Dataset.from_tensor_slices(  # the same (from seed) on every restart
          evaluation.server_sample(task.train, task.validation, 256, config.seed)).batch(256).cache()
      self.guard = DivergenceGuard(config.divergence_factor,
                                   lambda state: self._metrics_of(state, guard_data)["loss"])
    self.norm_guard = (UpdateNormGuard(config.update_norm_guard, config.update_norm_guard_window)
                       if config.update_norm_guard > 0 else None)
    self.privacy = privacy
    self.state = None
    self.round_num = 0  # the round of ``state``

  @property
  def history(self) -> list[dict[str, float]]:
    """``{"round": t, **metrics}`` of every round this loop ran, in order."""
    return self.releases.history

  def _metrics_of(self, state, dataset: tf.data.Dataset) -> dict[str, float]:
    weights = self.process.get_model_weights(state)
    return self._evaluate(weights.trainable, weights.non_trainable, dataset)

  def evaluate(self, state) -> dict[str, float]:
    """Test metrics (``test_*``) and, when the task holds out validation data, ``val_*``."""
    out = {f"test_{k}": v for k, v in self._metrics_of(state, self._test).items()}
    if self._val is not None:
      out.update({f"val_{k}": v for k, v in self._metrics_of(state, self._val).items()})
    return out

  def _round(self, state, round_num: int) -> tuple[object, dict[str, float]]:
    """One round: the clients train, the guard accepts or rejects; the next state and metrics."""
    clients = self.selection(round_num)
    if not clients.training:  # every sampled client dropped out: record the round, keep the model
      return state, {"num_clients": 0.0, "dropped_clients": float(len(clients.sampled)),
                     "skipped_round": 1.0}
    inputs = [self.client_input(cid, round_num, bool(b))
              for cid, b in zip(clients.training, clients.byzantine)]
    if self.client_metrics is not None:
      reported = self.process.next_with_client_reports(state, inputs)
      output, states = reported.output, reported.states or []
      with hard_stop.writing():
        self.client_metrics.write(round_num, clients.training, clients.byzantine, reported.rows,
                                  reported.shares)
    elif self.state_store is not None:
      output, states = self.process.next_with_client_states(state, inputs)
    else:
      output, states = self.process.next(state, inputs), []
    metrics = to_float_dict(output.metrics)
    metrics.update(dropped_clients=float(len(clients.sampled) - len(clients.training)),
                   byzantine_clients=float(np.sum(clients.byzantine)), skipped_round=0.0)
    rejected = self.norm_guard is not None and self.norm_guard.rejects(metrics)
    if not rejected and self.guard is not None:  # the loss guard costs an evaluation: only if needed
      rejected = self.guard.rejects(output.state, metrics)
    if rejected:
      # Keep the previous model; the round counter and AH's policy move on.
      metrics["rejected_round"] = 1.0
      return self.process.after_rejection(state, output.state), metrics
    metrics["rejected_round"] = 0.0
    with hard_stop.writing():  # a client's state may spill to disk
      for cid, client_state in zip(clients.training, states):
        self.state_store.put(cid, client_state, round_num)
    return output.state, metrics

  def run(self, progress=None, stop: Optional[Callable[[], bool]] = None,
          rounds: Optional[int] = None, on_start: Optional[Callable[[int], None]] = None) -> dict[str, float]:
    """Runs (or resumes) training to round ``rounds`` (default: the config's); returns the
    final metrics (test accuracy/loss) and keeps the last state in ``self.state``.

    ``on_start(resumed_round)`` runs once the checkpoint is restored and accepted, before this
    call writes anything (a refused run leaves its directory as it was). ``progress`` (e.g.
    `console.RunConsole`) gets ``start(resumed_round)`` and ``round(round_num, metrics)``. When
    ``stop()`` is true at the end of a round, the round is checkpointed and `StoppedError`
    raised. The run directory is held for the call (`run_lock.hold`): a second process on it
    raises `run_lock.RunDirBusyError`. Every write is a `hard_stop.writing` block, so a forced
    stop never leaves half a record.
    """
    with run_lock.hold(self.config.output_dir):
      return self._run(progress, stop, rounds, on_start)

  def _run(self, progress, stop, rounds, on_start) -> dict[str, float]:
    cfg = self.config
    rounds = cfg.rounds if rounds is None else rounds
    state, start = self.checkpoints.restore(self.process.initialize())
    _check_rounds(self.checkpoints.directory, start, rounds)
    with hard_stop.writing():
      if on_start is not None:
        on_start(start)
      self.releases.resume_at(start)
      if self.client_metrics is not None:
        self.client_metrics.resume_at(start)
    if progress is not None:
      progress.start(start)
    if self.guard is not None:
      self.guard.start(state)
    if self.norm_guard is not None:  # the window from the rounds before a resume
      self.norm_guard.start(accepted_update_norms(self.releases.recorded(start)))
    final: dict[str, float] = {}
    for round_num in range(start + 1, rounds + 1):
      t0 = time.perf_counter()
      state, metrics = self._round(state, round_num)
      metrics["round_seconds"] = time.perf_counter() - t0
      if self.privacy is not None:
        metrics.update(self.privacy.metrics(round_num))
      if round_num % cfg.rounds_per_eval == 0 or round_num == rounds:
        metrics.update(self.evaluate(state))
      saved = round_num % cfg.rounds_per_checkpoint == 0 or round_num == rounds
      with hard_stop.writing():
        self.releases.release(metrics, round_num, rounds)
        if saved:
          self.checkpoints.save(state, round_num)
      if progress is not None:
        progress.round(round_num, metrics)
      if stop is not None and stop() and round_num < rounds:
        if not saved:
          with hard_stop.writing():
            self.checkpoints.save(state, round_num)
        self.state, self.round_num = state, round_num
        raise StoppedError(round_num)
      final = metrics
    self.state, self.round_num = state, rounds
    result = {k: v for k, v in final.items() if k.startswith(("test_", "val_"))}
    if not result:
      result = self.evaluate(state)
    if self.privacy is not None:
      result.update(self.privacy.metrics(rounds))
    with hard_stop.writing():
      strict_json.write(os.path.join(cfg.output_dir, "final_metrics.json"), result, indent=2, sort_keys=True)
    return result


def build_training_loop(task: Task, process_config: ProcessConfig, loop_config: LoopConfig) -> TrainingLoop:
  """The process of ``process_config`` over ``task`` (`process_for_task.build_process_for_task`)
  and its driver: what `main` runs.

  Call inside a TFF execution context (`tff_robust.runtime.context.tff_runtime`). The aggregator's
  f is resolved and checked first (`resolve_robust`); with DP, its cohort and δ are resolved and
  the loop records ε (`privacy_accounting`).
  """
  process_config = resolve_robust(process_config, loop_config, len(task.train.client_ids))
  process_config = privacy_accounting.resolve(process_config, loop_config, task)
  built = process_for_task.build_process_for_task(task, process_config,
                                                  client_val_every=loop_config.client_val_every,
                                                  client_reports=loop_config.client_metrics)
  return TrainingLoop(built.process, task, loop_config,
                      privacy=privacy_accounting.ledger(process_config.dp, loop_config.client_dropout_rate))


def resolve_robust(process_config: ProcessConfig, loop_config: LoopConfig, num_clients: int) -> ProcessConfig:
  """``process_config`` with the f of a rule that reads it (Krum, Multi-Krum, Bulyan) resolved
  (`robust_statistics.resolve_f`, n = the clients per round); raises ValueError naming the flag
  when the aggregator's assumption fails. Idempotent; call it before anything is traced."""
  rob = process_config.robust
  n = num_sampled(num_clients, loop_config.clients_per_round, loop_config.client_fraction)
  f = robust_statistics.resolve_f(rob.aggregator, rob.byzantine_f, n, loop_config.byzantine_fraction,
                                  trim_fraction=rob.trim_fraction, multi_krum_select=rob.multi_krum_select)
  if rob.byzantine_f is None and rob.aggregator not in robust_statistics.USES_F:
    return process_config
  return dataclasses.replace(process_config, robust=dataclasses.replace(rob, byzantine_f=f))
