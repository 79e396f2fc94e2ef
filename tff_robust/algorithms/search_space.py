"""The flag syntax of a hyper-parameter's search space, shared by FedEx and tuning studies.

``none`` (not tuned), ``low:high`` / ``low:high:log`` (a `Range`) or ``v1,v2,...``
(allowed values). Which values are allowed is the caller's business (`within`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union


@dataclasses.dataclass(frozen=True)
class Range:
  """A continuous (or, for integer hyper-parameters, integer) interval.

  Attributes:
    low: smallest value.
    high: largest value (>= low).
    log: perturb and sample uniformly in log space (needs low > 0).
  """

  low: float
  high: float
  log: bool = False


# A hyper-parameter's allowed values: a tuple of values, a Range, or None (not tuned).
Spec = Optional[Union[Range, tuple]]
# (lowest, lowest allowed?, highest, highest allowed?, description for messages)
Limits = tuple[float, bool, float, bool, str]


def within(limits: Limits, value: float) -> bool:
  """Whether ``value`` is finite and inside ``limits``."""
  lo, lo_incl, hi, hi_incl, _ = limits
  if not math.isfinite(value):
    return False
  if value < lo or (value == lo and not lo_incl):
    return False
  return not (value > hi or (value == hi and not hi_incl))


def parse_spec(flag: str, text: str) -> Spec:
  """Parses ``none``, ``low:high``, ``low:high:log`` or ``v1,v2,...`` (syntax only)."""
  text = text.strip()
  if text.lower() in ("", "none"):
    return None
  try:
    if ":" in text:
      parts = text.split(":")
      if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("log", "lin")):
        raise ValueError
      return Range(float(parts[0]), float(parts[1]), log=len(parts) == 3 and parts[2] == "log")
    return tuple(float(v) for v in text.split(","))
  except ValueError:
    raise ValueError(f"{flag}={text!r} is not understood; choices: none, low:high, low:high:log, "
                     "v1,v2,...") from None
