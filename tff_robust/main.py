"""`python -m tff_robust.main`: federated training of one configuration (flags below).

    python -m tff_robust.main --task=mnist --rounds=30 --root_output_dir=/tmp/tff_robust

Outputs go to ROOT/NAME (NAME: --experiment_name, else derived from the flags). Running the
same command again resumes from the last checkpoint; a directory made with other flags is
never resumed. SIGINT/SIGTERM stop at the end of the round in progress, with a checkpoint.
"""

from __future__ import annotations

import os
import sys

from tff_robust.common import console, interrupts

if __name__ == "__main__":  # not when a test imports it (`run_argv`); the package does it too
  interrupts.exit_quietly_on_signals()  # Ctrl-C during the imports below: one line, no traceback
  console.quiet_native_logs(sys.argv)

import dataclasses  # noqa: E402
import time  # noqa: E402

from absl import flags  # noqa: E402

from tff_robust import cli  # noqa: E402
from tff_robust.common import run_lock  # noqa: E402
from tff_robust.flags import definitions  # noqa: E402
from tff_robust.flags import presets  # noqa: E402
from tff_robust.flags import record  # noqa: E402

definitions.define_flags()
FLAGS = flags.FLAGS


def _parse() -> tuple[definitions.RunConfig, list[str]]:
  """The run's configs (the task's paper setting filling the flags not given, `presets`) with its
  output directory bound to its configuration (`record.bind`), and notes for the header."""
  setting = presets.apply(cli.parsed_argv())
  config = definitions.parse()
  names = record.configuration_names(definitions.__name__)
  out, notes = record.bind(config.loop.output_dir, names, chosen=FLAGS.experiment_name is not None)
  return (dataclasses.replace(config, loop=dataclasses.replace(config.loop, output_dir=out)),
          presets.header_lines(setting) + notes)


def main(argv: list[str]) -> None:
  t0 = time.monotonic()
  cli.start(argv, FLAGS.verbosity)
  (config, notes), task = cli.parse_and_load(_parse, lambda c: c[0])

  # Heavy imports only after the flags are known to be good.
  from tff_robust.simulation import loop as loop_lib  # pylint: disable=g-import-not-at-top
  from tff_robust.simulation import selection  # pylint: disable=g-import-not-at-top
  from tff_robust.simulation import privacy_accounting  # pylint: disable=g-import-not-at-top
  from tff_robust.algorithms.methods import registry  # pylint: disable=g-import-not-at-top
  from tff_robust.runtime.context import WorkerDiedError, tff_runtime  # pylint: disable=g-import-not-at-top

  num_clients = len(task.train.client_ids)
  try:  # the aggregator's assumption on f byzantine clients of n per round, before any tracing
    config = dataclasses.replace(config, process=loop_lib.resolve_robust(config.process, config.loop,
                                                                        num_clients))
  except ValueError as e:
    cli.fail(cli.with_origin(str(e)))
  out = config.loop.output_dir
  interrupts.note_for_run(out)
  try:  # every refusal before anything is written (a refused command leaves the directory as it was)
    run_lock.check_free(out)
    loop_lib.check_resumable(out, config.loop.rounds)
  except run_lock.RunDirBusyError as e:
    cli.fail(str(e), run_lock.EXIT_BUSY)
  except loop_lib.CheckpointMismatchError as e:
    cli.fail(str(e))
  try:  # DP: its cohort and δ from the task and the sampling, and what the task needs, before tracing
    config = dataclasses.replace(config, process=privacy_accounting.resolve(config.process, config.loop, task))
  except ValueError as e:
    cli.fail(cli.with_origin(str(e)))
  ledger = privacy_accounting.ledger(config.process.dp, config.loop.client_dropout_rate)

  begun = False

  def write_records(resumed_round: int) -> None:  # once the checkpoint is restored and accepted
    nonlocal begun
    del resumed_round
    record.write_record(out)
    record.write_data_manifest(out, task.data_manifest)
    begun = True

  def note() -> str:  # what a stop forced during training says (`hard_stop`)
    where = f"during round {progress.last_round + 1}, before it ended" if begun else "during start-up"
    return f"{where}; {interrupts.resume_phrase(out)}"
  per_round = selection.num_sampled(num_clients, config.loop.clients_per_round,
                                   config.loop.client_fraction)
  progress = console.RunConsole(
      console.header(task=task.name, task_info=task.info, num_clients=num_clients,
                     per_round=per_round, process=config.process, loop=config.loop,
                     method=registry.describe(config.process),
                     workers=config.workers,
                     notes=notes + privacy_accounting.header_lines(config.process.dp, ledger)),
      rounds=config.loop.rounds,
      earlier_rounds=int(max((r for r, _ in console.read_metric(out, "round")), default=0)))
  interrupts.set_note(note)
  with tff_runtime(addresses=config.workers), cli.StopRequest() as stop:
    try:
      training = loop_lib.build_training_loop(task, config.process, config.loop)
      result = training.run(progress=progress, stop=stop, on_start=write_records)
    except loop_lib.CheckpointMismatchError as e:
      progress.close()
      cli.fail(str(e))
    except loop_lib.StoppedError as e:
      progress.close()
      cli.end(f"stopped after round {e.round_num}/{config.loop.rounds} ({stop.name}); its checkpoint is "
              f"in {os.path.join(out, 'checkpoints')}: run the same command to resume at round "
              f"{e.round_num + 1}.", 128 + stop.signum)
    except run_lock.RunDirBusyError as e:  # another process took it since check_free
      progress.close()
      cli.fail(str(e), run_lock.EXIT_BUSY)
    except WorkerDiedError as e:  # killed or out of memory: not a bug of the program
      progress.close()
      cli.end(f"error: {e} Run the same command to resume from the last checkpoint.", 1)
    except KeyboardInterrupt:
      progress.close()
      cli.end(f"interrupted during round {progress.last_round + 1}; {interrupts.resume_phrase(out)}.",
              130)
    progress.close()
  interrupts.set_note(lambda: f"after training (round {config.loop.rounds} is saved)")
  for line in console.summary(output_dir=out, final=result, last_round=config.loop.rounds,
                              wall_seconds=time.monotonic() - t0,
                              rounds_this_session=progress.last_round - progress.first_round,
                              plots=[("AH", "ah.png")] if config.process.ah is not None else ()):
    print(line, flush=True)


def run() -> None:
  cli.run(main, __doc__, [definitions.__name__])


def run_argv(argv: list[str]) -> int:
  """The program on ``argv`` (``argv[0]`` the program's name) in this process: its exit status."""
  return cli.run_argv(main, argv, __doc__, [definitions.__name__], "tff_robust.main")


if __name__ == "__main__":
  run()
