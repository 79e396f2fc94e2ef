"""Which data a run's ``--data_dir`` names, by the fingerprint the data states rather than its place
on disk: the runner (`runs.Run.conflict`) takes a run made on another folder as the same run when
the data at the folder asked for now states the fingerprint the run recorded (its ``data.json``,
`flags.record.DATA_MANIFEST`, written by main from the data source's manifest).

A folder states its fingerprint in its manifest, ``MANIFEST`` (written by `tasks.espeak_corpus`);
a corpus not kept with the checkout (the results page's ``docs/runs/kws_corpus``) may state it in a
record beside it, ``<folder>.json``, so that a clone without the corpus reads its runs' records as
the machine that made them did. Data that states no fingerprint is named by its path alone."""

from __future__ import annotations

import json
import os
from typing import Optional

from tff_robust.flags import record as flag_record

MANIFEST = "corpus.json"  # `tasks.speech_commands.MANIFEST` (that module imports TensorFlow)


def _fingerprint(path: str) -> Optional[str]:
  """The ``fingerprint`` of the JSON object in ``path``; None when it has none or cannot be read."""
  try:
    with open(path) as f:
      value = json.load(f)
  except (OSError, ValueError):
    return None
  found = value.get("fingerprint") if isinstance(value, dict) else None
  return str(found) if found else None


def in_manifest(folder: str) -> Optional[str]:
  """The fingerprint ``folder``'s own manifest states, or None (no manifest, or none in it)."""
  return _fingerprint(os.path.join(folder, MANIFEST))


def stated(folder: str) -> Optional[str]:
  """The fingerprint the data in ``folder`` states: its manifest's when the folder holds one, else
  the record beside it (``<folder>.json``); None: neither states one."""
  folder = os.path.abspath(os.path.expanduser(folder))
  if os.path.isfile(os.path.join(folder, MANIFEST)):
    return in_manifest(folder)
  return _fingerprint(folder + ".json")


def recorded(run_dir: str) -> Optional[str]:
  """The fingerprint of the data the run in ``run_dir`` trained on (its ``data.json``), or None."""
  return _fingerprint(os.path.join(run_dir, flag_record.DATA_MANIFEST))


def same_data(run_dir: str, folder: str) -> bool:
  """Whether the run in ``run_dir`` trained on the data ``folder`` holds: both state a fingerprint,
  and it is the same."""
  then = recorded(run_dir)
  return then is not None and then == stated(folder)
