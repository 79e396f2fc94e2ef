"""`python -m tff_robust.tune`: a tuning study of global hyper-parameters (seed 002).

    python -m tff_robust.tune --task=mnist --rounds=27 --tune_methods=rs,sha,rs_fedex,sha_fedex

Takes every flag of `tff_robust.main` (the run each arm starts from) plus the study's
(``--tune_*``, ``--rs_*``, ``--sha_*``). Writes ROOT/NAME/study.db (Optuna), one directory
per arm, and table.md / table.csv. Running the same command again resumes: finished
arms and rungs are not trained again. Nothing but wiring lives here (`tff_robust.study`,
`tff_robust.arms`).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from flags import definitions  # noqa: E402
from tff_robust import cli  # noqa: E402

definitions.define_tune_flags()
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  cli.start(argv)
  config, task = cli.parse_and_load(definitions.parse_tune, lambda c: c.run)

  from tff_robust import arms  # pylint: disable=g-import-not-at-top
  from tff_robust import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust import study  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime import tff_runtime  # pylint: disable=g-import-not-at-top

  print(f"study in {config.study.study_dir}\n{study.describe(config.study)}", flush=True)
  with tff_runtime(addresses=config.run.workers):
    runner = arms.FederatedArmRunner(
        task, config.run.process, config.run.loop, fedex=config.fedex,
        rm_client_state=config.run.rm_client_state, ah_val_examples=config.run.ah_val_examples,
        test_every=config.test_every, refine=config.refine)
    try:
      study.run_study(config.study, runner)
    except loop_lib.CheckpointMismatchError as e:
      cli.fail(str(e))
  with open(os.path.join(config.study.study_dir, "table.md")) as f:
    print(f.read(), flush=True)


def run() -> None:
  app.run(main)


if __name__ == "__main__":
  run()
