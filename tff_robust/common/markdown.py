"""Markdown tables: the one writer behind the experiment tables, the tuning studies' tables and
the results page."""

from __future__ import annotations

from collections.abc import Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
  """The lines of a Markdown table: the header, the separator, one line per row."""
  return (["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
          + ["| " + " | ".join(row) + " |" for row in rows])
