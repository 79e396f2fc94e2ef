"""The TFF workers this process started, for a program run in the test's process (`in_process`):
its `tff_runtime` starts `worker_binary` as a child of the pytest process, so the worker it might
leave behind is a live child here, not an orphan (`procs.orphan_workers`) nor a process with a
subprocess test's environment marker (`procs.workers_with`)."""

from __future__ import annotations

import os


def live_child_workers() -> set[int]:
  """Live `worker_binary` children of this process (a zombie has ended: not counted)."""
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
