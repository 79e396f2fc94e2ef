"""A pytest plugin that records each test's CPU seconds: its worker's and every descendant's.

    PYTHONPATH=. uv run pytest -p bench.test_cpu --cpu_out=DIR ...; uv run python -m bench.test_cpu DIR

(The PYTHONPATH puts ``bench`` where the pytest workers import it; `test_packaging`'s check that
an editable install adds no top-level ``tasks`` or ``flags`` then fails, as it should.)

A test's figure is the CPU the pytest process and all its descendants (a TFF `worker_binary`, the
programs a test starts) used from its setup to its teardown, so a module fixture's cost lands on
the first test that uses it. The wall time of a loaded machine says little; CPU seconds much more.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, float]]:
  """pid -> (parent pid, CPU seconds: utime + stime + cutime + cstime) of every process."""
  stats = {}
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open(f"/proc/{name}/stat", encoding="utf-8") as f:
          fields = f.read().rsplit(")", 1)[1].split()
      except OSError:
        continue
      stats[int(name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / _TICK)
  return stats


def _cpu_seconds() -> float:
  """User + system CPU of this process and its live descendants, with their waited-for children
  (a process that ended and was waited for is in its parent's cutime/cstime)."""
  stats = _stats()
  children: dict[int, list[int]] = collections.defaultdict(list)
  for pid, (ppid, _) in stats.items():
    children[ppid].append(pid)
  total, todo = 0.0, [os.getpid()]
  while todo:
    pid = todo.pop()
    total += stats.get(pid, (0, 0.0))[1]
    todo += children[pid]
  return total


def pytest_addoption(parser) -> None:
  parser.addoption("--cpu_out", default=None, help="folder for the per-test CPU records")


_start: dict[str, tuple[float, float]] = {}


def pytest_runtest_setup(item) -> None:
  _start[item.nodeid] = (_cpu_seconds(), time.monotonic())


def pytest_runtest_logfinish(nodeid, location) -> None:  # pylint: disable=unused-argument
  out = _out_dir()
  if out is None or nodeid not in _start:
    return
  cpu0, wall0 = _start.pop(nodeid)
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  with open(os.path.join(out, f"cpu_{worker}.jsonl"), "a", encoding="utf-8") as f:
    f.write(json.dumps({"test": nodeid, "cpu": _cpu_seconds() - cpu0,
                        "wall": time.monotonic() - wall0}) + "\n")


_config = None


def pytest_configure(config) -> None:
  global _config
  _config = config


def _out_dir() -> str | None:
  out = _config.getoption("--cpu_out") if _config is not None else None
  if out:
    os.makedirs(out, exist_ok=True)
  return out


def main(folder: str) -> None:
  """Prints the tests and files by CPU seconds, most first."""
  rows = []
  for name in os.listdir(folder):
    if name.startswith("cpu_") and name.endswith(".jsonl"):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        rows += [json.loads(line) for line in f]
  by_file = collections.Counter()
  for r in rows:
    by_file[r["test"].split("::")[0]] += r["cpu"]
  print(f"{len(rows)} tests, {sum(r['cpu'] for r in rows):.0f} CPU-s")
  print("\nfiles:")
  for f, c in by_file.most_common(40):
    print(f"{c:8.1f}  {f}")
  print("\ntests:")
  for r in sorted(rows, key=lambda r: -r["cpu"])[:80]:
    print(f"{r['cpu']:8.1f} {r['wall']:8.1f}  {r['test']}")


if __name__ == "__main__":
  main(sys.argv[1])
