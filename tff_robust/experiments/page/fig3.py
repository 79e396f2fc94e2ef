"""The results page's verdict on seed 000's Fig. 3: what μ of FA+RM+AH's P(h|ψ) did over the
runs of Table 1, against the seed's reading (on MNIST, REINFORCE pushes the learning rate down
for non-iid clients and up for iid ones, and keeps the local steps high).

Each run's μ_lr and μ_steps are read from its metrics.csv (``ah_lr_mu``, ``ah_steps_mu``) at the
first and the last round. Both live on log grids, so a change is log2(end / start), one per seed,
judged by the page's rule (`verdicts`): "down" reads −log2(end / start) > 0, "up"
log2(end / start) > 0, and "kept high" log2(end / start) > −1 (μ_steps ends above half its start).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


from tff_robust import experiments as ex
from tff_robust import plot
from tff_robust.experiments.page.verdicts import Judged, grouped, judge

COLUMNS = {"lr": "ah_lr_mu", "steps": "ah_steps_mu"}
STEPS_MARGIN = -1.0  # "kept high": log2(end / start) > -1
HEADER = ["clients", "seeds", "rounds", "μ_lr per seed (first → last round)",
          "the seed's μ_lr: log2(last / first) ± SE", "μ_steps per seed",
          "the seed's μ_steps: log2(last / first) ± SE"]


def start_end(run_dir: str) -> dict[str, tuple[int, float, int, float]]:
  """dim -> (first round, μ there, last round, μ there) of one run."""
  m = plot.read_metrics(run_dir)
  out = {}
  for dim, col in COLUMNS.items():
    points = [(int(r), v) for r, v in zip(m["round"], m[col]) if v == v]
    (r0, v0), (r1, v1) = points[0], points[-1]
    out[dim] = (r0, v0, r1, v1)
  return out


def _claims(iid: bool, changes: dict[str, dict[int, float]]) -> dict[str, Judged]:
  """The seed's two readings of one row, judged on the per-seed log2 changes."""
  zeros = {s: 0.0 for s in changes["lr"]}
  lr = judge(changes["lr"], zeros) if iid else judge(zeros, changes["lr"])  # up; down
  steps = judge(changes["steps"], zeros, STEPS_MARGIN)
  return {"lr": lr, "steps": steps}


def _cell(claim: str, j: Judged, sign: float) -> str:
  """``down: log2 change -0.96 ± 0.51: did not hold`` (``sign``: -1 where the claim reads the
  change negated)."""
  se = f" ± {j.se:.2f}" if j.n > 1 else ""
  return f"{claim}: log2 change {sign * j.mean:+.2f}{se}: {j.verdict}"


def fig3_verdicts(runs: Sequence[ex.Run], rows: Sequence[tuple[str, str]]) -> tuple[list[list[str]], str] | None:
  """The body of the Fig. 3 table (under `HEADER`) and the verdict sentence; None without a
  finished FA+RM+AH run. ``rows``: (row key, label) of Table 1."""
  body, verdicts = [], {"lr": {}, "steps": {}}
  for key, label in rows:
    done = sorted((r for r in runs if r.cell.row == key and r.cell.column == "fa_rm_ah"
                   and r.status() == ex.DONE), key=lambda r: r.seed)
    if not done:
      continue
    ends = {r.seed: start_end(r.output_dir) for r in done}
    changes = {dim: {s: math.log2(e[dim][3] / e[dim][1]) for s, e in ends.items()} for dim in COLUMNS}
    iid = not key.endswith("noniid")
    judged = _claims(iid, changes)
    first, last = ends[done[0].seed]["lr"][0], ends[done[0].seed]["lr"][2]
    cells = {dim: ", ".join(f"{e[dim][1]:.3g} → {e[dim][3]:.3g}" for e in ends.values()) for dim in COLUMNS}
    body.append([label, ", ".join(str(s) for s in ends), f"{first} → {last}", cells["lr"],
                 _cell("up" if iid else "down", judged["lr"], 1.0 if iid else -1.0), cells["steps"],
                 _cell("kept high (> −1)", judged["steps"], 1.0)])
    verdicts["lr"][label] = judged["lr"].verdict
    verdicts["steps"][label] = judged["steps"].verdict
  if not body:
    return None
  return body, (f"The seed's learning-rate reading (down on non-iid clients, up on iid ones): "
                f"{grouped(verdicts['lr'])}. Its steps reading (kept high): {grouped(verdicts['steps'])}.")

