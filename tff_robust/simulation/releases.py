"""Where a round's metrics go: ``metrics.csv`` and TensorBoard through `tff.program`'s release
managers (grouped, keyed by round), an in-memory history, and one line of the log."""

from __future__ import annotations

import csv
import glob
import logging
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.simulation.program_io import run_sync

logger = logging.getLogger("tff_robust")

# The metrics of the log's line per round.
LOGGED = ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "client_lr", "local_steps",
          "round_seconds")


def to_float_dict(metrics) -> dict[str, float]:
  """A process' (nested) metrics as flat ``name -> float``: ``a/b`` for nested keys and
  ``name/i`` for the elements of a non-scalar."""
  out = {}
  for key, value in (metrics.items() if hasattr(metrics, "items") else []):
    if hasattr(value, "items"):
      for sub, v in to_float_dict(value).items():
        out[f"{key}/{sub}"] = v
    else:
      arr = np.asarray(value)
      if arr.ndim == 0:
        out[key] = float(arr)
      else:
        for i, v in enumerate(arr.reshape(-1)):
          out[f"{key}/{i}"] = float(v)
  return out


class RunReleases:
  """Releases each round's metrics to CSV, TensorBoard and memory (`history`).

  The files are opened at the first release, not before: a run refused after its loop was built
  (a checkpoint that does not fit) leaves its directory as it was."""

  def __init__(self, output_dir: str, log_every: int = 1):
    self.memory = tff.program.MemoryReleaseManager()
    self.output_dir = output_dir
    self._manager = None
    self._board = None
    self.tensorboard = os.path.join(output_dir, "tensorboard")
    self.log_every = log_every

  @property
  def manager(self) -> tff.program.GroupingReleaseManager:
    """CSV, TensorBoard (whose writer creates an event file at once) and memory, made on first use."""
    if self._manager is None:
      self._board = tff.program.TensorBoardReleaseManager(summary_dir=self.tensorboard)
      self._manager = tff.program.GroupingReleaseManager([
          tff.program.CSVFileReleaseManager(file_path=os.path.join(self.output_dir, "metrics.csv"),
                                            key_fieldname="round"),
          self._board, self.memory])
    return self._manager

  def resume_at(self, round_num: int) -> None:
    """A run resumes after its checkpoint of ``round_num``: the TensorBoard events of later rounds
    (an earlier start got past that checkpoint before it stopped) are dropped, so each round is
    one step. metrics.csv needs nothing: its rows are keyed by round and replaced."""
    for path in glob.glob(os.path.join(self.tensorboard, "events.out.tfevents.*")):
      drop_events_after(path, round_num)

  def recorded(self, round_num: int) -> list[dict[str, float]]:
    """The rows of metrics.csv up to ``round_num`` (a resumed run's earlier rounds), in round
    order, each value a float (empty cells left out); empty without the file."""
    path = os.path.join(self.output_dir, "metrics.csv")
    if not os.path.exists(path):
      return []
    with open(path, newline="") as f:
      rows = [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(f)]
    return sorted((r for r in rows if r.get("round", 0) <= round_num), key=lambda r: r["round"])

  def release(self, metrics: dict[str, float], round_num: int, rounds: int) -> None:
    run_sync(self.manager.release(metrics, key=round_num))
    # TFF's TensorBoard manager leaves its writer's queue to TF (flushed every 2 min): a run that
    # ends without its teardown (stopped, killed) would lose rounds its checkpoints hold.
    self._board._summary_writer.flush()  # pylint: disable=protected-access
    if round_num % self.log_every == 0 or round_num == rounds:  # the console prints the round
      logger.debug("round %d/%d %s", round_num, rounds,
                  " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k in LOGGED))

  @property
  def history(self) -> list[dict[str, float]]:
    """``{"round": t, **metrics}`` of every round released by this object, in order."""
    return [{"round": t, **m} for t, m in sorted(self.memory.values().items())]


def drop_events_after(path: str, step: int) -> None:
  """Rewrites the TensorBoard event file ``path`` without its summaries of steps > ``step``
  (untouched when it has none; a file cut short by a kill keeps what could be read)."""
  events = []
  try:
    for record in tf.data.TFRecordDataset(path):
      events.append(tf.compat.v1.Event.FromString(record.numpy()))
  except tf.errors.DataLossError:  # the last record was being written when the run was killed
    pass
  kept = [e for e in events if not (e.HasField("summary") and e.step > step)]
  if len(kept) == len(events):
    return
  tmp = path + ".tmp"
  with tf.io.TFRecordWriter(tmp) as writer:
    for e in kept:
      writer.write(e.SerializeToString())
  os.replace(tmp, path)
