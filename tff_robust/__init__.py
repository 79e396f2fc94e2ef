"""Robust federated learning on TensorFlow Federated (README.md).

Every command is ``python -m tff_robust.<command>``, and Python imports this package first, while
it locates the command (``sys.argv[0]`` is then ``"-m"``). Before any other module of the project
runs, a command therefore gets: Ctrl-C and SIGTERM ending it with one line and no traceback from
the start (`common.interrupts`, also inside long native calls: `common.hard_stop`); TensorFlow's
native start-up logs silenced unless ``--verbosity`` ≥ 1 (`common.console.quiet_native_logs`);
and TFF's import-time execution context dropped at exit, whose worker manager would otherwise
print an ignored exception while the interpreter shuts down. Importing the package as a library
(a notebook, the tests) does none of this.
"""

import sys as _sys


def _drop_tff_context() -> None:
  if "tensorflow_federated" in _sys.modules:
    from tff_robust.runtime.context import disown_default_context  # pylint: disable=g-import-not-at-top
    disown_default_context()


def _start_command() -> None:
  import atexit  # pylint: disable=g-import-not-at-top
  from tff_robust.common import interrupts  # pylint: disable=g-import-not-at-top
  interrupts.exit_quietly_on_signals()
  from tff_robust.common import console  # pylint: disable=g-import-not-at-top
  console.quiet_native_logs(_sys.argv)
  atexit.register(_drop_tff_context)


if _sys.argv[:1] == ["-m"]:
  _start_command()
