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

if __name__ == "__main__":  # not when a test imports it (`run_argv`); the package does it too
  interrupts.exit_quietly_on_signals()  # Ctrl-C during the imports below: one line, no traceback
  console.quiet_native_logs(sys.argv)

from absl import flags  # noqa: E402

from tff_robust import cli  # noqa: E402
from tff_robust.common import run_lock  # noqa: E402
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
  study_dir = config.study.study_dir
  try:  # one process per study, refused before anything is written (as main's run directory)
    with run_lock.hold(study_dir):
      _run_study(config, notes, task)
  except run_lock.RunDirBusyError as e:
    cli.fail(str(e), run_lock.EXIT_BUSY)
  interrupts.set_note(lambda: "after the study (its table is written)")
  with open(os.path.join(study_dir, "table.md")) as f:
    print(f.read(), flush=True)


def _run_study(config: definitions.TuneConfig, notes: list[str], task) -> None:
  """Trains the study's arms (held: `run_lock`) and writes its table; exits on a stop."""
  from tff_robust.tuning import arms  # pylint: disable=g-import-not-at-top
  from tff_robust.simulation import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust.tuning import study  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime.context import tff_runtime  # pylint: disable=g-import-not-at-top

  record.write_record(config.study.study_dir)
  kept = arms.KEPT
  interrupts.set_note(lambda: f"during start-up; the same command resumes the study ({kept})")
  print("\n".join([f"study in {config.study.study_dir}", *notes, study.describe(config.study)]),
        flush=True)
  with tff_runtime(addresses=config.run.workers), cli.StopRequest() as stop:
    runner = None

    def where() -> str:  # the arm in training, and where the same command resumes it
      if runner is None or runner.current is None:
        return "before the first arm trained; the same command starts the study"
      arm, _ = runner.current
      return f"in {study.LABELS[arm.method]} arm {arm.number}; {interrupts.resume_phrase(arm.directory)}"

    interrupts.set_note(lambda: f"{where()} ({kept})")
    try:
      runner = arms.FederatedArmRunner(
          task, config.run.process, config.run.loop, fedex=config.fedex,
          test_every=config.test_every, refine=config.refine, show=True, stop=stop)
      study.run_study(config.study, runner)
    except loop_lib.CheckpointMismatchError as e:
      cli.fail(str(e))
    except loop_lib.StoppedError as e:
      arm, rounds = runner.current
      cli.end(arms.stopped_line(arm, rounds, e.round_num, stop.name), 128 + stop.signum)
    except KeyboardInterrupt:
      cli.end(f"interrupted {where()} ({kept}).", 130)


def run() -> None:
  cli.run(main, __doc__, [definitions.__name__])


def run_argv(argv: list[str]) -> int:
  """The program on ``argv`` (``argv[0]`` the program's name) in this process: its exit status."""
  return cli.run_argv(main, argv, __doc__, [definitions.__name__], "tff_robust.tune")


if __name__ == "__main__":
  run()
