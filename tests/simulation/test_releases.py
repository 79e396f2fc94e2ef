"""A resumed run's outputs hold each round once: the TensorBoard events of rounds an earlier
start got past its last checkpoint are dropped (metrics.csv replaces them by key)."""

import collections
import glob
import os

import tensorflow as tf

from tff_robust.simulation import releases


def _steps(log_dir: str) -> collections.Counter:
  """(tag, step) -> how many summaries hold it, over every event file."""
  seen = collections.Counter()
  for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        seen[(value.tag, event.step)] += 1
  return seen


def test_resume_drops_the_replayed_rounds_events(tmp_path):
  out = str(tmp_path)
  first = tf.summary.create_file_writer(os.path.join(out, "tensorboard"))  # an earlier start
  with first.as_default():
    for step in (1, 2, 3):
      tf.summary.scalar("train_loss", 1.0 / step, step=step)
  first.close()
  assert _steps(os.path.join(out, "tensorboard"))[("train_loss", 3)] == 1

  again = releases.RunReleases(out)  # restarted from the checkpoint of round 2
  again.resume_at(2)
  again.release({"train_loss": 0.3}, 3, 3)
  tf.summary.flush()
  del again
  steps = _steps(os.path.join(out, "tensorboard"))
  assert sorted(steps) == [("train_loss", 1), ("train_loss", 2), ("train_loss", 3)]
  assert set(steps.values()) == {1}, steps


def test_a_file_cut_short_keeps_what_can_be_read(tmp_path):
  path = str(tmp_path / "events.out.tfevents.1.host")
  with tf.io.TFRecordWriter(path) as writer:
    for step in (1, 2):
      event = tf.compat.v1.Event(step=step)
      event.summary.value.add(tag="x", simple_value=float(step))
      writer.write(event.SerializeToString())
  with open(path, "ab") as f:
    f.write(b"\x10\x00\x00")  # a record half-written when the run was killed
  releases.drop_events_after(path, 1)
  assert sorted(_steps(str(tmp_path))) == [("x", 1)]
