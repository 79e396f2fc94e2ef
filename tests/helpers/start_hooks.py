"""Seeing into a command's start-up from a test, without timing: a ``sitecustomize`` module (put on
the child's PYTHONPATH by `environment`) that acts when the child first imports a given module.

``touch``: creates a file then (the test waits for it before it starts its own clock, so a delay
counts from the moment the project's code runs, whatever the machine's load). ``sigint``: the
child sends itself SIGINT then, as a Ctrl-C landing at exactly that point of its start-up would.
``grace``: sets the command's stop grace (`hard_stop.set_grace`, PATH holding the seconds) when
Python looks for the command's module: the package has started the watcher by then
(`tff_robust.__init__`), and nothing after it sets the grace of `main` or `tune`. After a signal a
command has `hard_stop.GRACE_SECONDS` (7 s) of wall time to end in its own way before its watcher
ends it with a line of its own; on a loaded machine the round and its checkpoint can outlast that,
and the program would then answer with the watcher's line, not the one the test checks.
Python's own start-up before any module of the project is no command's to answer.
"""

from __future__ import annotations

import os

SITECUSTOMIZE = '''
import os, signal, sys

class _AtImport:
  def __init__(self, module, action, path):
    self.module, self.action, self.path = module, action, path

  def find_spec(self, name, path=None, target=None):
    if name == self.module:
      sys.meta_path.remove(self)
      if self.action == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
      elif self.action == "grace":
        from tff_robust.common import hard_stop
        hard_stop.set_grace(float(self.path))
      else:
        open(self.path, "w").close()
    return None

_spec = os.environ.get("TFF_ROBUST_TEST_AT_IMPORT")
if _spec:
  _module, _action, _path = _spec.split(":", 2)
  sys.meta_path.insert(0, _AtImport(_module, _action, _path))
'''


def environment(directory: str, module: str, action: str, path: str = "") -> dict[str, str]:
  """Environment entries that make a child run ``action`` (``touch`` PATH, ``sigint``, or ``grace``
  of PATH seconds) when it first imports ``module``; writes the hook into ``directory``."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
    f.write(SITECUSTOMIZE)
  pythonpath = os.environ.get("PYTHONPATH", "")
  return {"PYTHONPATH": directory + (os.pathsep + pythonpath if pythonpath else ""),
          "TFF_ROBUST_TEST_AT_IMPORT": f"{module}:{action}:{path}"}
