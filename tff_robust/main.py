"""`python -m tff_robust.main`: wires flags → task → process → loop. Nothing else lives here."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from flags import definitions  # noqa: E402
from tff_robust import cli  # noqa: E402

definitions.define_flags()
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  cli.start(argv)
  config, task = cli.parse_and_load(definitions.parse, lambda c: c)

  # Heavy imports only after the flags are known to be good.
  from tff_robust import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime import tff_runtime  # pylint: disable=g-import-not-at-top

  out = config.loop.output_dir
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "hparams.cfg"), "w") as f:
    f.write(FLAGS.flags_into_string())
  print(f"task {task.name}: {len(task.train.client_ids)} clients; outputs in {out}", flush=True)
  with tff_runtime(addresses=config.workers):
    training = loop_lib.build_training_loop(task, config.process, config.loop,
                                            rm_client_state=config.rm_client_state,
                                            ah_val_examples=config.ah_val_examples)
    try:
      result = training.run()
    except loop_lib.CheckpointMismatchError as e:
      cli.fail(str(e))
  print("final " + json.dumps(result, sort_keys=True), flush=True)


def run() -> None:
  app.run(main)


if __name__ == "__main__":
  run()
