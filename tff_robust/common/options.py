"""One source for every option: the config dataclasses' fields carry default, flag, help and check.

A field declared with `option` is both a dataclass default and a command-line flag:
`flags/definitions.py` defines the flag from the field (name, default, help, choices) and
maps its value back onto the dataclass, and the dataclass checks itself on construction
(`validate`, from ``__post_init__``). So ``ProcessConfig()`` in a notebook is the process that
``python -m tff_robust.main`` builds with no flags, and a bad value fails the same way in both:
``--flag=value is not valid: what is allowed.``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Optional

# How a flag is defined when the default does not say it (a default of None).
KINDS = ("bool", "int", "float", "str", "list")


@dataclasses.dataclass(frozen=True)
class Flag:
  """The command-line side of a field: its flag name, help text and what it accepts.

  ``check`` is a predicate on the field's value, ``allowed`` the text naming the valid values
  in the error; ``choices`` (an enum flag) is checked without a predicate. ``kind`` is the
  flag's type when the default (None) does not tell it.
  """

  name: str
  help: str
  check: Optional[Callable[[Any], bool]] = None
  allowed: str = ""
  choices: Optional[tuple[str, ...]] = None
  kind: Optional[str] = None


def option(default: Any, flag: str, help: str, *, check: Optional[Callable[[Any], bool]] = None,
           allowed: str = "", choices: Optional[tuple[str, ...]] = None,
           kind: Optional[str] = None) -> Any:
  """A dataclass field whose default, flag and validity are declared once, here."""
  if kind is not None and kind not in KINDS:
    raise ValueError(f"option {flag!r}: kind={kind!r} is not one of {KINDS}")
  if default is None and kind is None:
    raise ValueError(f"option {flag!r}: a default of None needs kind=")
  meta = Flag(flag, help, check, allowed, tuple(choices) if choices is not None else None, kind)
  return dataclasses.field(default=default, metadata={"flag": meta})


def seed_option() -> Any:
  """The ``--seed`` field that several configs share (one flag, one default)."""
  return option(0, "seed", "Seed of initial weights, client sampling, data order, policies.")


def flag_fields(cls: type) -> Iterator[tuple[dataclasses.Field, Flag]]:
  """The fields of dataclass ``cls`` that are flags, in declaration order."""
  for field in dataclasses.fields(cls):
    meta = field.metadata.get("flag")
    if meta is not None:
      yield field, meta


def fail(flag: str, value: Any, allowed: str) -> None:
  """Raises the project's one error for a bad option: ``--flag=value is not valid: allowed.``"""
  if isinstance(value, (tuple, list)):
    value = ",".join(str(v) for v in value)
  raise ValueError(f"--{flag}={value!r} is not valid: {allowed}.")


def check(cond: bool, flag: str, value: Any, allowed: str) -> None:
  """`fail` unless ``cond``."""
  if not cond:
    fail(flag, value, allowed)


def validate(obj: Any) -> None:
  """Checks every flag field of dataclass instance ``obj`` against its declared choices/check."""
  for field, meta in flag_fields(type(obj)):
    value = getattr(obj, field.name)
    if meta.choices is not None:
      check(value in meta.choices, meta.name, value, "choose one of " + ", ".join(meta.choices))
    if meta.check is not None:
      try:
        ok = bool(meta.check(value))
      except TypeError:
        ok = False
      check(ok, meta.name, value, meta.allowed)
