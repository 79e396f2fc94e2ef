"""Per-client state kept by the driver, in memory and on disk: what the process' client
components keep (`client.StateSpec`, by component key: RM's θ^i of Algorithm 1, seed 000;
SCAFFOLD's c_i).

A client's state never leaves it in the update and is never aggregated; in
simulation the driver holds it between the rounds that client is sampled in.
At most ``max_in_memory`` clients are held in memory (least recently used are
spilled to disk). Every state written to disk carries the round it was made
in, so a run resumed from the checkpoint of round R reads, for each client,
the newest state from a round ≤ R — exactly what it had at that checkpoint. Memory and files grow
with the clients sampled so far, never with the clients of the task: a client is read, made or
written only when it trains, and the store lists its directory once (then keeps that index). A
file holds leaf i of component ``key`` as the
array ``key.i``; a file of the layout before client components (``arr_0, arr_1, ...``, RM's θ^i
only) is read as the state of `LEGACY_KEY`.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Callable, Mapping
from typing import Optional

import numpy as np

_FILE = re.compile(r"^(?P<cid>.+)\.r(?P<round>\d+)\.npz$")
LEGACY_KEY = "rm"  # whose state a file of arrays arr_0, arr_1, ... holds (θ^i, before components)
State = Mapping[str, list[np.ndarray]]  # leaves by component key


def _safe(client_id: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]", "_", client_id)


class ClientStateStore:
  """``get(cid)`` / ``put(cid, state, round)`` with bounded memory and round-tagged files."""

  def __init__(self, directory: str, init_fn: Callable[[str], State],
               max_in_memory: int = 1000):
    self.directory = directory
    self._init_fn = init_fn
    self._max = max_in_memory
    self._cache: collections.OrderedDict[str, tuple[State, int]] = collections.OrderedDict()
    self._dirty: set[str] = set()
    self._limit_round: Optional[int] = None
    os.makedirs(directory, exist_ok=True)
    self._files = self._list()  # file name of a client (`_safe`) -> {round: path}

  def _list(self) -> dict[str, dict[int, str]]:
    files: dict[str, dict[int, str]] = collections.defaultdict(dict)
    for name in os.listdir(self.directory):
      m = _FILE.match(name)
      if m:
        files[m.group("cid")][int(m.group("round"))] = os.path.join(self.directory, name)
    return files

  def _versions(self, cid: str) -> list[tuple[int, str]]:
    return sorted(self._files.get(_safe(cid), {}).items())

  def _write(self, cid: str, state: State, round_num: int) -> None:
    path = os.path.join(self.directory, f"{_safe(cid)}.r{round_num}.npz")
    tmp = path + ".tmp.npz"
    np.savez(tmp, **{f"{key}.{i}": v for key, leaves in state.items() for i, v in enumerate(leaves)})
    os.replace(tmp, path)
    self._files[_safe(cid)][round_num] = path

  def _remove(self, name: str, round_num: int) -> None:
    os.remove(self._files[name].pop(round_num))

  @staticmethod
  def _read(path: str) -> State:
    """A file's state by component key (the layout before components: `LEGACY_KEY`'s leaves)."""
    with np.load(path) as f:
      names = list(f.files)
      if all(re.fullmatch(r"arr_\d+", n) for n in names):
        return collections.OrderedDict([(LEGACY_KEY, [f[f"arr_{i}"] for i in range(len(names))])])
      leaves: dict[str, dict[int, np.ndarray]] = {}
      for name in names:
        key, _, i = name.rpartition(".")
        leaves.setdefault(key, {})[int(i)] = f[name]
    return collections.OrderedDict((key, [v[i] for i in range(len(v))]) for key, v in leaves.items())

  def get(self, cid: str) -> State:
    """The client's state: cached, else newest on disk (≤ the resumed round), else fresh."""
    if cid in self._cache:
      self._cache.move_to_end(cid)
      return self._cache[cid][0]
    versions = [(r, p) for r, p in self._versions(cid)
                if self._limit_round is None or r <= self._limit_round]
    if versions:
      state, round_num = self._read(versions[-1][1]), versions[-1][0]
    else:
      state, round_num = _arrays(self._init_fn(cid)), -1
    self._insert(cid, state, round_num, dirty=False)
    return state

  def put(self, cid: str, state: State, round_num: int) -> None:
    self._insert(cid, _arrays(state), round_num, dirty=True)

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
    for name, versions in self._files.items():
      for r in sorted(r for r in versions if r <= round_num)[:-1]:
        self._remove(name, r)

  def restore(self, round_num: int) -> None:
    """Forgets memory and reads states as they were at the checkpoint of ``round_num``."""
    self._cache.clear()
    self._dirty.clear()
    self._limit_round = round_num
    self._files = self._list()
    for name, versions in self._files.items():
      for r in [r for r in versions if r > round_num]:
        self._remove(name, r)


def _arrays(state: State) -> State:
  return collections.OrderedDict((key, [np.asarray(v) for v in leaves]) for key, leaves in state.items())
