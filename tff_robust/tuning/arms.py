"""The arms of a tuning study as real federated training (`study.ArmRunner`).

An arm is the run's process with its own global hyper-parameters (server lr,
momentum, lr decay) and, for the ``*_fedex`` methods, FedEx inside. Each arm is
its own `TrainingLoop` with checkpoints in the arm's directory, so SHA continues
a promoted arm from its last rung and a restarted study resumes an unfinished arm.

Every client's data is split once by position (`federated_eval.ClientSplits`):
its test part T_i and validation part V_i are never trained on by any arm; the
arms train on the rest. A FedEx arm holds out its own validation examples of
that rest for θ's update (`client_data.split_validation`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Optional

from tff_robust.algorithms import server_opt
from tff_robust.algorithms.config import ProcessConfig
from tff_robust.algorithms.methods.fedex import FedExConfig, FedExServer
from tff_robust.common import console, interrupts
from tff_robust.simulation.loop import LoopConfig, StoppedError, TrainingLoop, build_training_loop
from tff_robust.tasks.base import Task
from tff_robust.tuning import federated_eval
from tff_robust.tuning import study
from tff_robust.tuning.study import Arm


def arm_process_config(base: ProcessConfig, params: dict, fedex: Optional[FedExConfig]) -> ProcessConfig:
  """``base`` with an arm's global hyper-parameters and FedEx on or off.

  ``server_momentum`` is FedAvgM's momentum (``sgd`` becomes ``sgdm``) or, for the
  adaptive optimizers, their first-moment β1.
  """
  server = base.server
  if "server_lr" in params:
    server = dataclasses.replace(server, lr=float(params["server_lr"]))
  if "server_lr_decay" in params:
    server = dataclasses.replace(server, lr_decay=float(params["server_lr_decay"]))
  if "server_momentum" in params:
    m = float(params["server_momentum"])
    if server.opt in server_opt.ADAPTIVE_OPTIMIZERS:
      server = dataclasses.replace(server, beta1=m)
    else:
      server = dataclasses.replace(server, opt="sgdm", momentum=m)
  return dataclasses.replace(base, server=server, fedex=fedex)  # each replace validates


def arm_fedex(fedex: Optional[FedExConfig], params: dict, fedex_arm: bool) -> Optional[FedExConfig]:
  """FedEx as an arm runs it.

  With a client configuration drawn by the arm (``--tune_local``, seed 002's wrapper): a FedEx
  arm centres its k configurations on it; a baseline arm trains with it alone (FedEx with
  k = 1, θ = [1]: FedAvg with that configuration). Without one: FedEx around the run's client
  flags for a FedEx arm, none for a baseline arm.
  """
  local = study.local_config(params)
  if not local:
    return fedex if fedex_arm else None
  if fedex is None:
    raise ValueError("an arm drew client hyper-parameters but the study has no FedEx search space")
  options = fedex.options if fedex_arm else dataclasses.replace(fedex.options, k=1)
  return dataclasses.replace(fedex, options=options, center=local)


def describe_arm(arm: Arm, rounds: int) -> str:
  """``arm      RS 2 to round 9: server_lr 1.18, ...`` (the header of an arm's round lines)."""
  params = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in arm.params.items())
  return f"arm      {study.LABELS[arm.method]} {arm.number} to round {rounds}: {params}"


KEPT = "finished arms and rungs are kept in study.db"


def stopped_line(arm: Arm, rounds: int, round_num: int, signal_name: str) -> str:
  """What `tune` prints when a stop ended ``arm`` (to be trained to ``rounds``) at ``round_num``:
  where its checkpoint is, or, when it had not trained a round yet, that it starts at round 1."""
  name = f"{study.LABELS[arm.method]} arm {arm.number}"
  if round_num == 0:
    return (f"stopped before {name} trained ({signal_name}): the same command starts that arm at round 1 "
            f"({KEPT}).")
  return (f"stopped after round {round_num}/{rounds} of {name} ({signal_name}); its checkpoint is in "
          f"{os.path.join(arm.directory, 'checkpoints')}: run the same command to resume that arm at round "
          f"{round_num + 1} ({KEPT}).")


class FederatedArmRunner:
  """Trains arms with `TrainingLoop` and scores them on the clients' own data (seed 002).

  With ``console`` each arm's training prints its header and a line per round (as `main`'s);
  ``stop`` is `TrainingLoop.run`'s: a stopped arm raises `loop.StoppedError` after saving its
  round. ``current`` is the arm being trained (what a stop message names).
  """

  def __init__(self, task: Task, base: ProcessConfig, loop: LoopConfig, *,
               fedex: Optional[FedExConfig], test_every: int = 5, refine: str = "most_likely",
               show: bool = False, stop: Optional[Callable[[], bool]] = None):
    federated_eval.refine_theta([1.0], refine)  # validates ``refine``
    self.splits = federated_eval.ClientSplits(task.train, test_every, loop.client_val_every)
    self.task = dataclasses.replace(task, train=self.splits.training_data())
    self.client_ids = sorted(task.train.client_ids)
    self.base, self.loop, self.fedex = base, loop, fedex
    self.refine = refine
    self._loops: dict[tuple[str, int], TrainingLoop] = {}
    self._evaluator: Optional[federated_eval.FederatedEvaluator] = None
    self.show, self.stop = show, stop
    self.current: Optional[tuple[Arm, int]] = None

  def config_of(self, arm: Arm) -> ProcessConfig:
    return arm_process_config(self.base, arm.params, arm_fedex(self.fedex, arm.params, arm.fedex))

  def _run(self, arm: Arm, rounds: int) -> TrainingLoop:
    """Trains (or resumes) the arm to ``rounds`` rounds; the same process serves every rung."""
    key = (arm.method, arm.number)
    if self.stop is not None and self.stop():  # asked to stop between two arms (or rungs)
      self.current = (arm, rounds)
      raise StoppedError(interrupts.checkpoint_round(arm.directory))
    if key not in self._loops:
      loop_config = dataclasses.replace(self.loop, output_dir=arm.directory, rounds=rounds)
      self._loops[key] = build_training_loop(self.task, self.config_of(arm), loop_config)
    training = self._loops[key]
    if training.state is not None and training.round_num == rounds:  # trained to it just now
      return training
    self.current = (arm, rounds)
    progress = console.RunConsole([describe_arm(arm, rounds)], rounds) if self.show else None
    try:
      training.run(rounds=rounds, progress=progress, stop=self.stop)
    finally:
      if progress is not None:
        progress.close()
    return training

  def _pooled(self, training: TrainingLoop, part: str) -> dict[str, float]:
    """The global model's pooled metrics over every client's ``val`` or ``test`` part."""
    if self._evaluator is None:
      self._evaluator = federated_eval.FederatedEvaluator(training.process.trainer.spec)
    parts = self.splits.val if part == "val" else self.splits.test
    weights = training.process.get_model_weights(training.state)
    return self._evaluator.pooled(weights, [parts(cid) for cid in self.client_ids])

  def train(self, arm: Arm, rounds: int) -> float:
    """Federated validation loss L_V of the arm's global model after ``rounds`` rounds."""
    return self._pooled(self._run(arm, rounds), "val")["loss"]

  def evaluate(self, arm: Arm, rounds: int) -> dict[str, float]:
    """"global" and "refine" loss/accuracy on the pooled client test data."""
    training = self._run(arm, rounds)
    out = {f"global_{k}": v for k, v in self._pooled(training, "test").items() if k != "examples"}
    trainer = training.process.trainer
    theta = FedExServer.theta(training.state)  # None without FedEx
    refiner = federated_eval.Refiner(trainer)
    ccfg = self.config_of(arm).client
    weights = training.process.get_model_weights(training.state)
    refined = refiner(weights, ccfg.lr, ccfg.local_steps, self.splits, self.client_ids,
                      fedex_theta=theta, how=self.refine, seed=self.loop.seed)
    out.update({f"refine_{k}": v for k, v in refined.items() if k != "examples"})
    return out

  def release(self, arm: Arm) -> None:
    self._loops.pop((arm.method, arm.number), None)
