"""A run's checkpoints: the process state and its round through TFF's
`tff.program.FileProgramStateManager` (the last three kept), and the clients' state
(`client_states.ClientStateStore`) at the same round, so a resumed run continues exactly."""

from __future__ import annotations

import logging
import os
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_robust.simulation import client_states
from tff_robust.simulation.program_io import run_sync

logger = logging.getLogger("tff_robust")


class CheckpointMismatchError(ValueError):
  """The output directory holds a checkpoint of a differently configured process."""


class RunCheckpoints:
  """Saves and restores ``{"state", "round"}`` in ``output_dir/checkpoints``."""

  def __init__(self, output_dir: str, state_store: Optional[client_states.ClientStateStore] = None):
    self.directory = os.path.join(output_dir, "checkpoints")
    self.manager = tff.program.FileProgramStateManager(root_dir=self.directory, keep_total=3,
                                                       keep_first=False)
    self.state_store = state_store

  def save(self, state, round_num: int) -> None:
    if self.state_store is not None:
      self.state_store.checkpoint(round_num)
    run_sync(self.manager.save({"state": state, "round": np.int32(round_num)}, round_num))

  def restore(self, initial_state) -> tuple[object, int]:
    """The latest checkpoint's (state, round), or (``initial_state``, 0) if there is none.

    Raises:
      CheckpointMismatchError: the checkpoint's structure does not fit ``initial_state``.
    """
    versions = run_sync(self.manager.get_versions())
    if not versions:
      return initial_state, 0
    latest = max(versions)
    try:
      saved = run_sync(self.manager.load(latest, {"state": initial_state, "round": np.int32(0)}))
    except (ValueError, TypeError) as e:
      raise CheckpointMismatchError(
          f"the checkpoint in {self.directory} was written by a run with a different "
          f"configuration (its state does not fit this process: {str(e).splitlines()[0][:200]}); "
          "use another --experiment_name or --root_output_dir, or delete that directory") from None
    round_num = int(saved["round"])
    if self.state_store is not None:
      self.state_store.restore(round_num)
    logger.debug("Resumed from the checkpoint of round %d.", round_num)  # the console says so
    return saved["state"], round_num
