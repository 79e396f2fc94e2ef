"""Interleaved timing for the benches: warm-up rounds discarded, wall and CPU seconds per round,
medians with their interquartile range, and per-round paired ratios.

Wall time moves with whatever else the machine runs; the CPU seconds a round costs (this
process's and its TFF worker's, read from ``/proc``) move much less, so the benches print both.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

_TICK = os.sysconf("SC_CLK_TCK")


class Times(NamedTuple):
  """Per-round seconds of one step: wall clock and CPU (driver + its workers)."""

  wall: list[float]
  cpu: list[float]


def cpu_seconds(pids: Sequence[int] = (), this_process: bool = True) -> float:
  """CPU seconds (user + system) of this process and of the processes ``pids`` (TFF workers)."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  total = usage.ru_utime + usage.ru_stime if this_process else 0.0
  for pid in pids:
    try:
      with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
      total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    except OSError:
      pass
  return total


def interleaved(steps: dict[str, Callable[[], object]], rounds: int, warmup: int,
                pids: Sequence[int] = ()) -> dict[str, Times]:
  """Seconds per round of each step, rounds interleaved (round r of every step, then r + 1) so
  that the machine's drift falls on every step alike; the first ``warmup`` rounds of each
  (tracing, worker start-up, caches) are run the same way and discarded."""
  times = {name: Times([], []) for name in steps}
  for r in range(warmup + rounds):
    for name, step in steps.items():
      c0, t0 = cpu_seconds(pids), time.perf_counter()
      step()
      t1, c1 = time.perf_counter(), cpu_seconds(pids)
      if r >= warmup:
        times[name].wall.append(t1 - t0)
        times[name].cpu.append(c1 - c0)
  return times


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
  """(first quartile, median, third quartile)."""
  if len(values) < 2:
    v = values[0] if values else float("nan")
    return v, v, v
  q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
  return q1, q2, q3


def paired_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
  """Round-by-round ratios of two interleaved steps (round r of one over round r of the other)."""
  return [a / b for a, b in zip(num, den)]


def fmt_quartiles(values: Sequence[float], digits: int = 3) -> str:
  """``median [q1, q3]``."""
  q1, q2, q3 = quartiles(values)
  return f"{q2:.{digits}f} [{q1:.{digits}f}, {q3:.{digits}f}]"


def summary(times: Times) -> dict:
  """Median and quartiles of wall seconds, and the mean CPU seconds per round."""
  q1, q2, q3 = quartiles(times.wall)
  return {"median": q2, "q1": q1, "q3": q3, "iqr": q3 - q1,
          "cpu_mean": statistics.fmean(times.cpu) if times.cpu else float("nan")}
