"""``clients.csv``: with ``--client_metrics``, one row per round per client that trained in it
(the round's sampled clients less those that dropped out), from
`RobustProcess.next_with_client_reports`.

Columns (`COLUMNS`): ``round``, ``client_id``, ``byzantine`` (1: it sent an attack this round),
``examples`` (n_k), ``local_loss`` and ``local_accuracy`` (its own, over its local steps; empty
when it trained on nothing), ``update_norm`` (‖Δ‖₂ of what it sent), ``aggregation_weight`` (the
weight it sent: n_k, 1 or an accuracy as ``--weighting`` says; 0 when its update is not finite),
``weight_given`` (its share of the aggregate: w_k / Σ w for the mean and clipping, the rule's
share for the others, e.g. 1 for Krum's choice and 0 for the rest, the fraction of coordinates
it supplied for the median; `robust_statistics`; the shares of a round sum to 1, or to 0 when
nothing was aggregated) and ``nonfinite`` (1: its own update was not finite and was dropped).

A resumed run first drops the rows after its checkpoint's round, so every round has its rows once.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from typing import Optional

import numpy as np

FILE = "clients.csv"
COLUMNS = ("round", "client_id", "byzantine", "examples", "local_loss", "local_accuracy",
           "update_norm", "aggregation_weight", "weight_given", "nonfinite")


def weight_given(weights: Sequence[float], shares: Optional[np.ndarray]) -> list[float]:
  """The aggregator's ``shares`` when it measured one per client, else w_k / Σ w (0 when Σ w = 0)."""
  if shares is not None:
    if len(shares) != len(weights):
      return [math.nan] * len(weights)  # cannot be told apart client by client
    return [float(s) for s in shares]
  total = float(sum(weights))
  return [float(w) / total if total > 0 else 0.0 for w in weights]


def _text(value) -> str:
  if isinstance(value, str):
    return value
  v = float(value)
  if math.isnan(v):
    return ""
  return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


class ClientMetricsWriter:
  """Appends each round's client rows to ``OUTPUT_DIR/clients.csv``."""

  def __init__(self, output_dir: str):
    self.path = os.path.join(output_dir, FILE)

  def resume_at(self, round_num: int) -> None:
    """Keeps the rows of rounds ≤ ``round_num`` (the checkpoint a run resumes from)."""
    if not os.path.exists(self.path):
      return
    with open(self.path, newline="") as f:
      rows = [r for r in csv.DictReader(f) if int(float(r["round"])) <= round_num]
    tmp = self.path + ".tmp"
    with open(tmp, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
      writer.writeheader()
      writer.writerows(rows)
    os.replace(tmp, self.path)

  def write(self, round_num: int, client_ids: Sequence[str], byzantine: Sequence[bool],
            rows: Sequence, shares: Optional[np.ndarray]) -> None:
    """The round's rows: ``rows`` (`client_reports.ClientRound.rows`) and ``shares`` in the order
    of ``client_ids``."""
    if len(rows) != len(client_ids):
      raise ValueError(f"round {round_num}: {len(rows)} client reports for {len(client_ids)} clients")
    given = weight_given([float(r["aggregation_weight"]) for r in rows], shares)
    new = not os.path.exists(self.path)
    with open(self.path, "a", newline="") as f:
      writer = csv.writer(f)
      if new:
        writer.writerow(COLUMNS)
      for cid, byz, row, share in zip(client_ids, byzantine, rows, given):
        values = dict(row, round=round_num, client_id=str(cid), byzantine=int(bool(byz)),
                      weight_given=share)
        writer.writerow([_text(values[c]) for c in COLUMNS])
