"""A stand-in for the results page's `Page` that the section tests hand to a section: it keeps the
lines written and calls each figure's draw function with the figure's path under ``docs``."""

from __future__ import annotations

import os


class FakePage:
  stamp, command = "today", "cmd"

  def __init__(self, docs: str):
    self.docs, self.lines, self.drawn = docs, [], []

  def figure(self, name, draw, caption):  # pylint: disable=unused-argument
    self.drawn.append(draw(os.path.join(self.docs, name)))
