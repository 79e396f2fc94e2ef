"""Finding processes our tests started, for asserting that none outlives its run."""

from __future__ import annotations

import os
import subprocess


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


def orphan_workers() -> set[int]:
  """Orphaned TFF workers (their parent is gone): what a run must never leave behind."""
  out = subprocess.run(["ps", "-eo", "pid=,ppid=,comm="], capture_output=True, text=True).stdout
  rows = [line.split() for line in out.splitlines()]
  return {int(r[0]) for r in rows if len(r) >= 3 and r[1] == "1" and "worker_binar" in r[2]}


def live_child_workers() -> set[int]:
  """Live `worker_binary` children of this process (a zombie has ended: not counted). For a program
  run in the test's process (`in_process`): its runtime starts the worker as a child of pytest, so a
  worker it leaves behind is a live child here, neither an orphan nor marked by a subprocess's
  environment."""
  me, found = os.getpid(), set()
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        head, rest = f.read().rsplit(")", 1)
    except OSError:
      continue
    comm, (state, ppid) = head.split("(", 1)[1], rest.split()[:2]
    if comm.startswith("worker_binar") and int(ppid) == me and state != "Z":
      found.add(int(pid))
  return found
