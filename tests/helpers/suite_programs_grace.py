"""A longer stop grace for a command a test signals, without changing the command.

After a SIGINT or SIGTERM a command has `hard_stop.GRACE_SECONDS` (7 s) of wall time to end in
its own way (finish the round in progress, save its checkpoint, say where it stopped) before its
watcher ends it with a line of its own. On a loaded machine the round and its checkpoint can
outlast 7 s of wall time; the program then answers with the watcher's line, not the one the test
checks. `environment` puts a ``sitecustomize`` module on the child's PYTHONPATH that sets the grace
(`hard_stop.set_grace`) when Python looks for the command's module: the package has started the
watcher by then (`tff_robust.__init__`), and nothing after it sets the grace of `main` or `tune`.
What the test checks is unchanged; only how long the machine may take to get there.
"""

from __future__ import annotations

import os

SITECUSTOMIZE = '''
import os, sys

class _Grace:
  def __init__(self, module, seconds):
    self.module, self.seconds = module, seconds

  def find_spec(self, name, path=None, target=None):
    if name == self.module:
      sys.meta_path.remove(self)
      from tff_robust.common import hard_stop
      hard_stop.set_grace(self.seconds)
    return None

_spec = os.environ.get("TFF_ROBUST_TEST_GRACE")
if _spec:
  _module, _seconds = _spec.rsplit(":", 1)
  sys.meta_path.insert(0, _Grace(_module, float(_seconds)))
'''


def environment(directory: str, module: str, seconds: float) -> dict[str, str]:
  """Environment entries giving ``python -m module`` ``seconds`` of grace after a signal; writes
  the hook into ``directory``."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
    f.write(SITECUSTOMIZE)
  pythonpath = os.environ.get("PYTHONPATH", "")
  return {"PYTHONPATH": directory + (os.pathsep + pythonpath if pythonpath else ""),
          "TFF_ROBUST_TEST_GRACE": f"{module}:{seconds:g}"}
