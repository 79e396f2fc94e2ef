"""docs/flags.md is what `python -m tff_robust.flags.reference` renders, and it lists exactly the
project's flags that `python -m tff_robust.main --helpfull` shows (no tracing: flags only); and
importing any module of the package leaves the signals alone.

All three come from one new interpreter (each start imports TensorFlow and TFF, 7-8 CPU-s): it
prints main's ``--helpfull`` (`main.run_argv`: the command's text, but for the four help flags
`app.run` adds to absl's own section) while only main's flags are defined, then `reference.main()`,
which defines tune's too, then imports every module of the package. Not this process: every pytest
worker has defined tune's flags in the same module (`helpers.flag_parse`), and both texts list a
module's flags; and it has imported the package already. The programs' start-up and exit are other
tests' (test_cli's extended default run for main). The signals' check lived in
tests/common/test_interrupts.py with an interpreter of its own (8.5 CPU-s, load 20): here it shares
this one."""

import functools
import os
import re
import subprocess
import sys

from helpers.paths import ROOT

PAGE = os.path.join(ROOT, "docs", "flags.md")
BETWEEN = "----- the reference -----"
IMPORTS = "----- every module imported -----"
# The interpreter starts from Python's own handlers whatever it inherited (a signal ignored in the
# pytest worker stays ignored across exec); only what runs below can change them: main's --helpfull,
# the reference (neither may: they are not a command's start), and importing every module.
LIBRARY = f"""
import importlib, pkgutil, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from tff_robust import main
code = main.run_argv(["main", "--helpfull"])
print({BETWEEN!r}, flush=True)
from tff_robust.flags import reference
reference.main()
print({IMPORTS!r}, flush=True)
import tff_robust
from tff_robust.common import hard_stop
names = sorted(m.name for m in pkgutil.walk_packages(tff_robust.__path__, "tff_robust."))
for name in names:
  importlib.import_module(name)
handlers = [signal.getsignal(s) is signal.default_int_handler if s == signal.SIGINT else
            signal.getsignal(s) == signal.SIG_DFL for s in (signal.SIGINT, signal.SIGTERM)]
print(len(names), hard_stop._watchdog is None, all(handlers), signal.set_wakeup_fd(-1))
sys.exit(code)
"""


@functools.lru_cache(maxsize=None)
def _library_interpreter() -> tuple[str, str, str]:
  """``main --helpfull``'s stdout, the reference's, and the line after every import, from one new
  interpreter."""
  proc = subprocess.run([sys.executable, "-c", LIBRARY], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  helpfull, rest = proc.stdout.split(BETWEEN + "\n")
  reference, imported = rest.split(IMPORTS + "\n")
  return helpfull, reference, imported


def _helpfull_and_reference() -> tuple[str, str]:
  """``main --helpfull``'s stdout and the reference's."""
  return _library_interpreter()[:2]


def _page() -> str:
  with open(PAGE, encoding="utf-8") as f:
    return f.read()


def helpfull_project_flags() -> set[str]:
  """The flags `--helpfull` lists under the project's module (`tff_robust.flags.definitions`)."""
  sections = re.split(r"^(\S+):\n", _helpfull_and_reference()[0], flags=re.M)
  bodies = [body for header, body in zip(sections[1::2], sections[2::2]) if header.endswith("definitions")]
  assert len(bodies) == 1, [h for h in sections[1::2]]
  return set(re.findall(r"^  --(?:\[no\])?([a-z0-9_]+):", bodies[0], flags=re.M))


def test_committed_page_is_the_generated_reference():
  assert _page() == _helpfull_and_reference()[1], (
      "docs/flags.md is stale: uv run python -m tff_robust.flags.reference > docs/flags.md")


def test_page_lists_the_flags_helpfull_shows():
  main_part = _page().split("## `python -m tff_robust.tune`", 1)[0]
  documented = set(re.findall(r"^\| `--([a-z0-9_]+)` \|", main_part, flags=re.M))
  defined = helpfull_project_flags()
  assert len(defined) > 50
  assert documented == defined, (sorted(defined - documented), sorted(documented - defined))


def test_importing_any_module_leaves_the_signals_alone():
  """Only a command (``python -m``, the package's ``__init__``) takes over SIGINT/SIGTERM and starts
  `hard_stop`'s watcher; a module imported by a notebook or a test must not, or a later signal to
  that process (a test's SIGTERM to itself) ends it `GRACE_SECONDS` later from the watcher."""
  out = _library_interpreter()[2].split()
  assert int(out[0]) > 100 and out[1:] == ["True", "True", "-1"], out
