"""`python -m tff_robust.tune`: a tuning study of global hyper-parameters (RS, SHA, FedEx).

    python -m tff_robust.tune --task=mnist --rounds=27 --tune_methods=rs,sha,rs_fedex,sha_fedex

Takes every flag of `tff_robust.main` (the run each arm starts from) plus the study's
(``--tune_*``, ``--rs_*``, ``--sha_*``). Writes ROOT/NAME/study.db (Optuna), one directory
per arm, table.md / table.csv and hparams.cfg. Running the same command again resumes:
finished arms and rungs are not trained again; a study directory made with other flags is
never resumed. Nothing but wiring lives here (`tff_robust.tuning.study`, `tff_robust.tuning.arms`).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from tff_robust.common import console, interrupts

interrupts.exit_quietly_on_signals()  # Ctrl-C during the imports below: one line, no traceback
console.quiet_native_logs(sys.argv)

from absl import flags  # noqa: E402

from tff_robust import cli  # noqa: E402
from tff_robust.flags import definitions  # noqa: E402
from tff_robust.flags import record  # noqa: E402

definitions.define_tune_flags()
FLAGS = flags.FLAGS


def _parse() -> tuple[definitions.TuneConfig, list[str]]:
  """The study's configs with its directory bound to its configuration (`record.bind`;
  ``--rounds`` sets the study's budgets, so it is part of it)."""
  config = definitions.parse_tune()
  names = record.configuration_names(definitions.__name__, extending=())
  out, notes = record.bind(config.study.study_dir, names, chosen=FLAGS.experiment_name is not None)
  return dataclasses.replace(config, study=dataclasses.replace(config.study, study_dir=out)), notes


def main(argv: list[str]) -> None:
  cli.start(argv, FLAGS.verbosity, project_info=True)
  (config, notes), task = cli.parse_and_load(_parse, lambda c: c[0].run)

  from tff_robust.tuning import arms  # pylint: disable=g-import-not-at-top
  from tff_robust.simulation import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust.tuning import study  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime.context import tff_runtime  # pylint: disable=g-import-not-at-top

  record.write_record(config.study.study_dir)
  interrupts.set_note(lambda: "during start-up; the same command resumes the study (finished arms and "
                              "rungs are kept in study.db)")
  print("\n".join([f"study in {config.study.study_dir}", *notes, study.describe(config.study)]),
        flush=True)
  kept = "finished arms and rungs are kept in study.db"
  with tff_runtime(addresses=config.run.workers), cli.StopRequest() as stop:
    runner = None
    try:
      runner = arms.FederatedArmRunner(
          task, config.run.process, config.run.loop, fedex=config.fedex,
          test_every=config.test_every, refine=config.refine, show=True, stop=stop)
      study.run_study(config.study, runner)
    except loop_lib.CheckpointMismatchError as e:
      cli.fail(str(e))
    except loop_lib.StoppedError as e:
      arm, rounds = runner.current
      print(f"stopped after round {e.round_num}/{rounds} of {study.LABELS[arm.method]} arm {arm.number} "
            f"({stop.name}); its checkpoint is in {os.path.join(arm.directory, 'checkpoints')}: run the "
            f"same command to resume that arm at round {e.round_num + 1} ({kept}).", file=sys.stderr, flush=True)
      sys.exit(128 + stop.signum)
    except KeyboardInterrupt:
      where = "before the first arm trained; the same command starts the study"
      if runner is not None and runner.current is not None:
        arm, _ = runner.current
        where = f"in {study.LABELS[arm.method]} arm {arm.number}; {interrupts.resume_phrase(arm.directory)}"
      print(f"interrupted {where} ({kept}).", file=sys.stderr, flush=True)
      sys.exit(130)
  interrupts.set_note(lambda: "after the study (its table is written)")
  with open(os.path.join(config.study.study_dir, "table.md")) as f:
    print(f.read(), flush=True)


def run() -> None:
  cli.run(main, __doc__, [definitions.__name__])


if __name__ == "__main__":
  run()
