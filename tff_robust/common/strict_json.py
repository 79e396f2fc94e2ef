"""JSON files as RFC 8259 defines them: every file the project writes holds no ``NaN`` or
``Infinity`` (which Python's `json` writes by default and strict readers reject).

A non-finite number (a diverged run's loss) is written as ``null``; `number` reads it back as
NaN. Files are written whole: to a temporary sibling, then renamed over the target, so a
reader (or a run stopped mid-write) never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional


def finite(value: Any) -> Any:
  """``value`` with every non-finite float (also inside dicts, lists and tuples) as None;
  numpy scalars become Python numbers."""
  if isinstance(value, dict):
    return {k: finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite(v) for v in value]
  if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
    value = value.item()  # a numpy scalar or 0-d array
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


def dumps(value: Any, **kwargs) -> str:
  """`json.dumps` of `finite` ``value``; raises ValueError rather than write a non-finite number."""
  return json.dumps(finite(value), allow_nan=False, **kwargs)


def write(path: str, value: Any, *, indent: Optional[int] = 1, sort_keys: bool = False,
          newline: bool = False) -> None:
  """Writes ``value`` to ``path`` as strict JSON, atomically (a temporary file renamed)."""
  text = dumps(value, indent=indent, sort_keys=sort_keys) + ("\n" if newline else "")
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with open(tmp, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def number(value: Any) -> float:
  """A number read from strict JSON: ``null`` (a non-finite value when written) is NaN."""
  return math.nan if value is None else float(value)
