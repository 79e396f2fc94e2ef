"""The saved server state's container, in one place: ``OrderedDict(core=..., agg=...)``.

``core`` holds the model w_t, the server optimizer's state, the round counter and each server
component's entry under its key (``ah``, ``fedex``, ``scaffold``, ...); ``agg`` the aggregator's
state. Checkpoints store exactly this structure, so its keys never change; every reader of the
state goes through these functions (a component's own entry through `entry`).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

CORE, AGG = "core", "agg"
MODEL, OPT, ROUND = "model", "opt", "round"


def make(core, agg) -> collections.OrderedDict:
  """The full state from its two parts."""
  return collections.OrderedDict([(CORE, core), (AGG, agg)])


def core(state: Mapping[str, Any]) -> Mapping[str, Any]:
  return state[CORE]


def agg(state: Mapping[str, Any]) -> Any:
  return state[AGG]


def round_number(state: Mapping[str, Any]) -> int:
  """t: how many rounds the state has taken (rejected rounds count)."""
  return int(core(state)[ROUND])


def entry(state: Mapping[str, Any], key: str) -> Any:
  """A server component's entry of the full state, or None when the process has no such component."""
  try:
    return core(state)[key]
  except (KeyError, AttributeError, ValueError):
    return None


def replace_core(state: Mapping[str, Any], **entries) -> collections.OrderedDict:
  """The full state with some of ``core``'s entries replaced."""
  new = collections.OrderedDict(core(state).items())
  new.update(entries)
  return make(new, agg(state))
