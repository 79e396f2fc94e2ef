"""A program's command line run in the test's own process (`tff_robust.main.run_argv`,
`tff_robust.tune.run_argv`, `tff_robust.experiments.__main__.main`): its exit status, stdout and
stderr as a subprocess would give them, without the 6-7 CPU seconds of a new process importing TensorFlow and TFF. For what exits before
training (refusals: exit 2 or 75 with one line); the process boundary itself (absl's start-up,
the exit, a quiet stderr) stays tested by a few subprocess tests of each program."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import logging

from absl import logging as absl_logging


@dataclasses.dataclass(frozen=True)
class Ran:
  returncode: int
  stdout: str
  stderr: str


@contextlib.contextmanager
def _logging_kept():
  """The programs set library log levels and `tune` adds a stdout handler (`console.configure_logging`):
  put them back, so nothing leaks into the next test."""
  loggers = [logging.getLogger(n) for n in ("tensorflow", "tff_robust")]
  saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
  verbosity = absl_logging.get_verbosity()
  try:
    yield
  finally:
    for lg, level, handlers, propagate in saved:
      lg.setLevel(level)
      lg.handlers[:] = handlers
      lg.propagate = propagate
    absl_logging.set_verbosity(verbosity)


def _exit_status(program_main, args: list[str]) -> int:
  """An argparse program's ``main(args)``: its returned status, or argparse's exit (2 with usage)."""
  try:
    return program_main(args)
  except SystemExit as e:
    return e.code if isinstance(e.code, int) else int(e.code is not None)


# `python -m` names whose command line lives in another module (argparse's ``main(argv) -> int``).
_COMMAND_LINE = {"tff_robust.experiments": "tff_robust.experiments.__main__",
                 "tff_robust.experiments.page": "tff_robust.experiments.page.results",
                 "tff_robust.tasks.espeak_corpus": "tff_robust.tasks.espeak_corpus_cli"}


def run(module: str, *args: str) -> Ran:
  """``python -m module *args``, in this process: ``tff_robust.main`` or ``tff_robust.tune``
  (absl flags, `run_argv`), ``tff_robust.experiments``, its results page, the corpus builder or
  ``tff_robust.plot`` (argparse, ``main``)."""
  program = importlib.import_module(_COMMAND_LINE.get(module, module))
  out, err = io.StringIO(), io.StringIO()
  with _logging_kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    if hasattr(program, "run_argv"):
      code = program.run_argv([module, *args])
    else:
      code = _exit_status(program.main, list(args))
  return Ran(code, out.getvalue(), err.getvalue())
