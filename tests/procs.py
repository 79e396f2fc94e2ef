"""Finding processes our tests started, for asserting that none outlives its run."""

from __future__ import annotations

import os


def workers_with(marker: str) -> list[int]:
  """Live worker_binary processes whose environment holds ``marker`` (started by our runs)."""
  found = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/comm") as f:
        if not f.read().startswith("worker_binar"):
          continue
      with open(f"/proc/{pid}/environ", "rb") as f:
        if marker.encode() in f.read():
          found.append(int(pid))
    except OSError:
      continue
  return found
