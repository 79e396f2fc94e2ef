"""Per-client state kept by the driver (θ^i of Algorithm 1, seed 000), in memory and on disk.

θ^i never leaves its client in the update and is never aggregated; in
simulation the driver holds it between the rounds that client is sampled in.
At most ``max_in_memory`` clients are held in memory (least recently used are
spilled to disk). Every state written to disk carries the round it was made
in, so a run resumed from the checkpoint of round R reads, for each client,
the newest state from a round ≤ R — exactly what it had at that checkpoint.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Callable
from typing import Optional

import numpy as np

_FILE = re.compile(r"^(?P<cid>.+)\.r(?P<round>\d+)\.npz$")


def _safe(client_id: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]", "_", client_id)


class ClientStateStore:
  """``get(cid)`` / ``put(cid, state, round)`` with bounded memory and round-tagged files."""

  def __init__(self, directory: str, init_fn: Callable[[str], list[np.ndarray]],
               max_in_memory: int = 1000):
    self.directory = directory
    self._init_fn = init_fn
    self._max = max_in_memory
    self._cache: collections.OrderedDict[str, tuple[list[np.ndarray], int]] = collections.OrderedDict()
    self._dirty: set[str] = set()
    self._limit_round: Optional[int] = None
    os.makedirs(directory, exist_ok=True)

  def _versions(self, cid: str) -> list[tuple[int, str]]:
    prefix = _safe(cid) + ".r"
    out = []
    for name in os.listdir(self.directory):
      m = _FILE.match(name)
      if name.startswith(prefix) and m and m.group("cid") == _safe(cid):
        out.append((int(m.group("round")), os.path.join(self.directory, name)))
    return sorted(out)

  def _write(self, cid: str, state: list[np.ndarray], round_num: int) -> None:
    path = os.path.join(self.directory, f"{_safe(cid)}.r{round_num}.npz")
    tmp = path + ".tmp.npz"
    np.savez(tmp, *state)
    os.replace(tmp, path)

  def get(self, cid: str) -> list[np.ndarray]:
    """The client's state: cached, else newest on disk (≤ the resumed round), else fresh."""
    if cid in self._cache:
      self._cache.move_to_end(cid)
      return self._cache[cid][0]
    versions = [(r, p) for r, p in self._versions(cid)
                if self._limit_round is None or r <= self._limit_round]
    if versions:
      with np.load(versions[-1][1]) as f:
        state = [f[f"arr_{i}"] for i in range(len(f.files))]
      round_num = versions[-1][0]
    else:
      state, round_num = [np.asarray(v) for v in self._init_fn(cid)], -1
    self._insert(cid, state, round_num, dirty=False)
    return state

  def put(self, cid: str, state: list[np.ndarray], round_num: int) -> None:
    self._insert(cid, [np.asarray(v) for v in state], round_num, dirty=True)

  def _insert(self, cid, state, round_num, dirty):
    self._cache[cid] = (state, round_num)
    self._cache.move_to_end(cid)
    if dirty:
      self._dirty.add(cid)
    while len(self._cache) > self._max:
      old, (old_state, old_round) = self._cache.popitem(last=False)
      if old in self._dirty:
        self._write(old, old_state, old_round)
        self._dirty.discard(old)

  def checkpoint(self, round_num: int) -> None:
    """Writes every changed state and drops versions no resume can need."""
    for cid in sorted(self._dirty):
      state, r = self._cache[cid]
      self._write(cid, state, r)
    self._dirty.clear()
    self._limit_round = None
    by_client: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for name in os.listdir(self.directory):
      m = _FILE.match(name)
      if m:
        by_client[m.group("cid")].append((int(m.group("round")), os.path.join(self.directory, name)))
    for versions in by_client.values():
      older = sorted(v for v in versions if v[0] <= round_num)
      for _, path in older[:-1]:
        os.remove(path)

  def restore(self, round_num: int) -> None:
    """Forgets memory and reads states as they were at the checkpoint of ``round_num``."""
    self._cache.clear()
    self._dirty.clear()
    self._limit_round = round_num
    for name in os.listdir(self.directory):
      m = _FILE.match(name)
      if m and int(m.group("round")) > round_num:
        os.remove(os.path.join(self.directory, name))
