"""`python -m tff_robust.main`: wires flags → task → process → loop. Nothing else lives here."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

import tasks  # noqa: E402
from flags import definitions  # noqa: E402
from tasks.base import DataMissingError  # noqa: E402

definitions.define_flags()
FLAGS = flags.FLAGS


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])} (flags are written --name=value)")
  from tff_robust.runtime import disown_default_context  # pylint: disable=g-import-not-at-top
  disown_default_context()
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
  logging.getLogger("tff_robust").setLevel(logging.INFO)
  try:
    config = definitions.parse()
    task = tasks.load_task(config.task, config.task_options)
    if config.process.uses_rm:
      from tff_robust import matching  # pylint: disable=g-import-not-at-top
      matching.check_supported(task.model_fn())
  except (ValueError, DataMissingError) as e:
    _fail(str(e))

  # Heavy imports only after the flags are known to be good.
  from tff_robust import client_work  # pylint: disable=g-import-not-at-top
  from tff_robust import evaluation  # pylint: disable=g-import-not-at-top
  from tff_robust import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust import process as process_lib  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime import tff_runtime  # pylint: disable=g-import-not-at-top

  out = config.loop.output_dir
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "hparams.cfg"), "w") as f:
    f.write(FLAGS.flags_into_string())
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  print(f"task {task.name}: {len(task.train.client_ids)} clients; outputs in {out}", flush=True)
  server_val = None
  if config.process.ah is not None and config.process.ah.loss_source == "server":
    source = task.validation if task.validation is not None else task.train.create_tf_dataset_from_all_clients()
    server_val = evaluation.sample_examples(source, config.ah_val_examples, config.process.seed)
  with tff_runtime(addresses=config.workers):
    process = process_lib.build_process(
        spec, config.process, rm_client_state=config.rm_client_state, server_val=server_val)
    initial_theta = None
    if process.trainer.theta_in:
      theta0 = client_work.initial_theta(spec, config.process.seed)
      initial_theta = lambda cid: theta0  # noqa: E731
    training = loop_lib.TrainingLoop(process, task, config.loop, initial_theta_fn=initial_theta)
    try:
      result = training.run()
    except loop_lib.CheckpointMismatchError as e:
      _fail(str(e))
  print("final " + json.dumps(result, sort_keys=True), flush=True)


def run() -> None:
  app.run(main)


if __name__ == "__main__":
  run()
