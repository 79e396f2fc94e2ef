"""Studies the runner plans run by run, where a table's grid (cells x seeds 0..n-1 in one folder,
one set of overrides) cannot say them: each is a function of (root, ``--data_dir``) that returns
its runs of `tff_robust.main` as `runs.Run`s, and ``python -m tff_robust.experiments --table=NAME
--data_dir=DIR --root_output_dir=ROOT`` runs them as it runs a table's (a finished run is skipped,
an unfinished one resumes, one made with other flags is a conflict; `--dry_run`, `--parallel`).
The study fixes its seeds, rounds and flags itself; the results page reads the same plan.

* ``rmah_kws200``: Table 3's one-keyword cell (row c1.0_noniid) at 200 rounds, the runs of the rule
  committed before them (docs/runs/horizon200/kws_rule.md), `kws200_runs`:

  - arm A, the schedule chosen for FA on validation (the cell's flagfiles): FA and FA+RM, seeds
    0-2, in ``ROOT/``;
  - arm B, the schedule where FA fails: the same cells with ``--client_lr=0.1 --local_steps=20``
    (FA+RM also ``--rm_weight=0.001``), seeds 0, 1, in ``ROOT/kws_failing/``;
  - the ceiling, FA on iid clients (row c1.0_iid), seed 0, in ``ROOT/``.

  Each run's command is ``rmah_table3``'s for its cell with ``--rounds=200 --data_dir=DIR`` and the
  arm's flags after them, as ``--table=rmah_table3 --rounds=200 --extra_flags=...`` gives it, so a
  run made either way is the same run (same folder name, same recorded flags).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Optional

from tff_robust.experiments.runs import Overrides, Run
from tff_robust.experiments.tables import rmah_cell

KWS200 = "rmah_kws200"
KWS200_ROUNDS = 200
KWS200_ROW = "c1.0_noniid"
KWS200_METHODS = ("fa", "fa_rm")
_FAILING = ("--client_lr=0.1", "--local_steps=20")  # FA's schedule where it fails (docs/runs/kws_moderate)
# arm -> (folder under the study's root, seeds, method -> the flags after the cell's and the overrides).
KWS200_ARMS: Mapping[str, tuple[str, tuple[int, ...], Mapping[str, tuple[str, ...]]]] = {
    "A": ("", (0, 1, 2), {"fa": (), "fa_rm": ()}),
    "B": ("kws_failing", (0, 1), {"fa": _FAILING, "fa_rm": _FAILING + ("--rm_weight=0.001",)}),
}
CEILING = "ceiling"  # the arm key of FA on iid clients
KWS200_CEILING = ("c1.0_iid", "fa", 0)  # (row, method, seed)

Key = tuple[str, str, int]  # (arm, method key, seed)


def kws200_runs(root: str, data_dir: Optional[str]) -> dict[Key, Run]:
  """The rule's runs, (arm, method key, seed) -> `Run` (the ceiling's arm: `CEILING`), in the order
  they start: arm A, the ceiling, arm B. ``root``: the study's folder; ``data_dir``: the corpus."""
  if not data_dir:
    raise ValueError(f"--table={KWS200} needs --data_dir: the espeak keyword corpus its rule names "
                     "(built by `python -m tff_robust.tasks.espeak_corpus DIR --effects=moderate`).")
  root = os.path.abspath(os.path.expanduser(root))
  out: dict[Key, Run] = {}
  for arm, (folder, seeds, extra) in KWS200_ARMS.items():
    where = os.path.join(root, folder) if folder else root
    for method in KWS200_METHODS:
      over = Overrides(rounds=KWS200_ROUNDS, data_dir=data_dir, extra_flags=extra[method])
      for s in seeds:
        out[(arm, method, s)] = Run(rmah_cell("kws", KWS200_ROW, method), s, where, over)
    if arm == "A":  # the headline, then the ceiling, then arm B
      row, method, seed = KWS200_CEILING
      out[(CEILING, method, seed)] = Run(rmah_cell("kws", row, method), seed, root,
                                         Overrides(rounds=KWS200_ROUNDS, data_dir=data_dir))
  return out


# name -> (root, --data_dir) -> the study's runs, in the order they start.
PLANNED: dict[str, Callable[[str, Optional[str]], list[Run]]] = {
    KWS200: lambda root, data_dir: list(kws200_runs(root, data_dir).values()),
}
