"""Seed 000 Table 3's discriminating experiment: does representation matching change one-keyword
clients on the Speech-Commands-sized espeak corpus, and does it reach accuracy?

Arms (one keyword per client, C = 1.0, the seed-000 KWS flagfiles: 20 steps of batch 64, ER;
`--seed` s; `ARMS` holds each arm's flags):
  fa                       FA at the flagfile's client lr 0.05 (fa_lr0.003 .. fa_lr0.2: other rates)
  rm_authors               FA+RM, the authors' layers and loss: eq. 1's sum x 1e-4
  rm_authors_w1e-3, _w1e-2 the same at 1e-3 and 1e-2 (the weight's validation grid)
  rm_authors_w1e-3_lr0.01  1e-3 at client lr 0.01 (FA's rate chosen on validation)
  rm_reversed              FA+RM with the earlier layers (per-unit weight 0.3, logits top term)
  ah_kept, ah_start_fa_point   FA+AH from the flagfiles' start (0.01 x 20) or from FA's chosen point
  rm_theta1e-2             FA+RM at FA's chosen point (0.05 x 2) with θ's Adam lr 1e-2
  rm_top_none              FA+RM at that point without the top matching term (FA+RM+AH's form)
  fa_lr<r>[_steps<k>], rm_authors_w<c>_lr<r>[_steps<k>]   grid points: FA at client lr r (and k
                           local steps); FA+RM (authors') at weight c, lr r (and k steps)

`validation_choice` is the rule that picks FA's rate and local steps, then RM's weight there
(FA = weight 0), and AH's start among the `ah_*` arms, on the validation speakers only: first
written over rounds 8-12 of seed 0, now over Table 3's last evaluations (`HORIZON`) and seeds 0-1.
A third reading chooses RM's weight at the schedule where FA fails (`FAILING_FA`: lr 0.1 x 20
steps, the averaged model at chance), where the seed's rescue is a claim at all.

Each run is `python -m tff_robust.main` (the flags below); `--run=ARM,ARM` runs the missing
seeds of those arms one after another. The summary reads every `ARM_sS/metrics.csv` under
`--root`: per arm and round the means over seeds of test / validation accuracy and loss, client
drift, update norm, the clients' cross-entropy and eq. 1's terms; each arm's seed-paired
difference to FA ± its standard error at the last round both evaluated; and a PNG of the curves.

    uv run python -m tff_robust.experiments.studies.kws_rm_check --root=docs/runs/kws_rm_check --corpus=/tmp/kws_big \\
        --seeds=2 --rounds=12 --run=fa,rm_authors_w1e-3
    # the same on the corpus built with --effects=moderate (docs/runs/kws_moderate/notes.md):
    uv run python -m tff_robust.experiments.studies.kws_rm_check --root=docs/runs/kws_moderate \\
        --corpus=/tmp/kws_mod --png=docs/kws_moderate.png --seeds=1 --run=fa_lr0.01,rm_authors_w1e-4_lr0.01
    # a figure of some arms only (the summary still reads every arm):
    uv run python -m tff_robust.experiments.studies.kws_rm_check --root=docs/runs/kws_moderate --seeds=3 \\
        --png=/tmp/kws_rescue.png --png_arms=fa_lr0.1,rm_authors_w1e-3_lr0.1
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from tff_robust.common.paired import kept_unless_beaten, paired_difference
from tff_robust.experiments.kws_study import FAILING_FA, HORIZON, draw, read, window_mean

BASE = ("--flagfile=flags/rmah_common.cfg", "--flagfile=flags/rmah_kws.cfg",
        "--flagfile=flags/rmah_fa.cfg", "--partition=one_class", "--client_fraction=1.0",
        "--rounds_per_eval=2", "--rounds_per_checkpoint=1")
RM = ("--flagfile=flags/rmah_fa_rm.cfg", "--rm_layers=authors", "--rm_normalize=sum")
AH = ("--flagfile=flags/rmah_fa_ah.cfg", "--flagfile=flags/rmah_kws_ah.cfg")
# arm: (label, flags, the FA arm it is paired with: the same client lr)
ARMS = {
    "fa": ("FA (lr 0.05)", ("--client_lr=0.05",), None),  # rmah_kws.cfg's rate when it was run
    "fa_lr0.01": ("FA (lr 0.01)", ("--client_lr=0.01",), "fa"),
    "fa_lr0.2": ("FA (lr 0.2)", ("--client_lr=0.2",), "fa"),
    "fa_lr0.003": ("FA (lr 0.003)", ("--client_lr=0.003",), "fa"),
    "rm_authors": ("FA+RM, authors' layers, 1e-4", RM + ("--rm_weight=1e-4",), "fa"),
    "rm_authors_w1e-3": ("FA+RM, authors' layers, 1e-3", RM + ("--rm_weight=1e-3",), "fa"),
    "rm_authors_w1e-2": ("FA+RM, authors' layers, 1e-2", RM + ("--rm_weight=1e-2",), "fa"),
    "rm_authors_w1e-3_lr0.01": ("FA+RM, authors' layers, 1e-3, lr 0.01",
                                RM + ("--rm_weight=1e-3", "--client_lr=0.01"), "fa_lr0.01"),
    "rm_reversed": ("FA+RM, reversed layers (unit, 0.3)",
                    ("--flagfile=flags/rmah_fa_rm.cfg", "--rm_layers=reversed",
                     "--rm_normalize=unit", "--rm_weight=0.3"), "fa"),
    # Matching layers fitted faster at FA's 2-step point: θ's Adam lr 1e-2 (rmah_fa_rm.cfg: 1e-3).
    "rm_theta1e-2": ("FA+RM, authors' layers, 1e-4, lr 0.05, 2 steps, θ lr 1e-2",
                     RM + ("--rm_weight=1e-4", "--client_lr=0.05", "--local_steps=2", "--rm_theta_lr=1e-2"),
                     "fa_lr0.05_steps2"),
    # The top matching term (f_{M-1}: a_{M-1} rebuilt from the logits) left out, as in FA+RM+AH, at the
    # table's FA+RM point: the per-task check of the top term's source (rmah_fa_rm.cfg keeps the logits).
    "rm_top_none": ("FA+RM, authors' layers, 1e-4, lr 0.05, 2 steps, no top term",
                    RM + ("--rm_weight=1e-4", "--client_lr=0.05", "--local_steps=2", "--rm_top_source=none"),
                    "fa_lr0.05_steps2"),
    # AH's start (the table's FA+AH cell: flagfiles' start lr 0.01 x 20 steps, steps grid 5..40)
    # against a start at FA's point chosen on validation, on a steps grid that holds it.
    "ah_kept": ("FA+AH, start lr 0.01 x 20 steps (flagfiles)", AH, "fa_lr0.05_steps2"),
    "ah_start_fa_point": ("FA+AH, start lr 0.05 x 2 steps, steps grid 1..20",
                          AH + ("--ah_init_lr=0.05", "--ah_init_steps=2", "--ah_steps_grid=1,2,5,10,20",
                                "--client_lr=0.05", "--local_steps=2"), "fa_lr0.05_steps2"),
}


def arm_spec(arm: str) -> tuple[str, tuple[str, ...], str | None]:
  """(label, flags, paired FA arm) of ``arm``: a named arm of ARMS, or a grid point
  ``fa_lr<r>[_steps<k>]`` / ``rm_authors_w<c>_lr<r>[_steps<k>]`` (FA at client lr r and k local
  steps, the flagfile's 20 without the suffix; FA+RM, the authors' layers and eq. 1's sum at
  weight c), paired with FA at the same lr and steps."""
  if arm in ARMS:
    return ARMS[arm]
  m = re.fullmatch(r"(fa|rm_authors_w([0-9.e-]+))_lr([0-9.]+)(_steps([0-9]+))?", arm)
  if not m:
    raise ValueError(f"unknown arm {arm!r}: one of {', '.join(ARMS)}, fa_lr<r>[_steps<k>], "
                     "rm_authors_w<c>_lr<r>[_steps<k>]")
  weight, lr, suffix, steps = m.group(2), m.group(3), m.group(4) or "", m.group(5)
  fa = "fa" if float(lr) == 0.05 and not suffix else f"fa_lr{lr}{suffix}"
  flags = (f"--client_lr={lr}",) + ((f"--local_steps={steps}",) if steps else ())
  where = f"lr {lr}" + (f", {steps} step{'' if steps == '1' else 's'}" if steps else "")
  if weight is None:
    return f"FA ({where})", flags, None if fa == "fa" else "fa"
  return f"FA+RM, authors' layers, {weight}, {where}", RM + (f"--rm_weight={weight}",) + flags, fa


TOP_TERM_AT = "rm_authors_w1e-4"  # the rm_top_* arms are set against the authors' weight (the table's FA+RM)

COLUMNS = (("test_accuracy", "test acc", 100), ("test_loss", "test loss", 1),
           ("val_accuracy", "val acc", 100), ("client_drift", "drift", 1),
           ("update_norm", "update", 1), ("train_loss", "client CE", 1), ("rm_loss", "eq. 1", 1))


def command(arm: str, seed: int, rounds: int, root: str, corpus: str) -> list[str]:
  return [sys.executable, "-m", "tff_robust.main", *BASE, *arm_spec(arm)[1], f"--seed={seed}",
          f"--rounds={rounds}", f"--data_dir={corpus}", f"--root_output_dir={root}",
          f"--experiment_name={arm}_s{seed}"]


def arms_in(root: str) -> list[str]:
  """The named arms, then every grid arm with a run folder ``<arm>_s<seed>`` under ``root``."""
  names = list(ARMS)
  for d in sorted(os.listdir(root)) if os.path.isdir(root) else ():
    m = re.fullmatch(r"(.+)_s\d+", d)
    if m and m.group(1) not in names:
      try:
        arm_spec(m.group(1))
        names.append(m.group(1))
      except ValueError:
        pass
  return names


def summary(root: str, seeds: int) -> tuple[str, dict]:
  """The per-round tables and the paired differences (markdown), and the runs read."""
  runs: dict[str, dict[int, list]] = {}
  for arm in arms_in(root):
    found = {s: read(os.path.join(root, f"{arm}_s{s}")) for s in range(seeds)
             if os.path.isfile(os.path.join(root, f"{arm}_s{s}", "metrics.csv"))}
    if found:
      runs[arm] = found
  lines = []
  for arm, by_seed in runs.items():
    rs = list(by_seed.values())
    n = max(len(r) for r in rs)
    lines += [f"### {arm_spec(arm)[0]} (seeds {', '.join(map(str, by_seed))}; rounds run: "
              f"{', '.join(str(len(r)) for r in rs)})", "",
              "| round | " + " | ".join(c[1] for c in COLUMNS) + " | eq. 1 terms j = 0.. |",
              "| --- " * (len(COLUMNS) + 2) + "|"]
    for t in range(n):
      at = [r[t] for r in rs if len(r) > t]
      cells = []
      for key, _, scale in COLUMNS:
        vals = [row[key] * scale for row in at if key in row]
        cells.append(f"{sum(vals) / len(vals):.3g}" if vals else "")
      terms = sorted((k for k in at[0] if k.startswith("rm_loss_")), key=lambda k: int(k[8:]))
      cells.append(" / ".join(f"{sum(row[k] for row in at) / len(at):.3g}" for k in terms))
      lines.append(f"| {t + 1} | " + " | ".join(cells) + " |")
    lines.append("")
  lines += ["### Seed-paired differences to FA at the same client lr", "",
            "At the last round evaluated by every seed both arms ran to; mean ± standard error of "
            "the paired differences (± nan: one seed).", ""]
  for arm, by_seed in runs.items():
    base = arm_spec(arm)[2]
    if base is None or base not in runs:
      continue
    common = [s for s in by_seed if s in runs[base]]
    pairs = [(by_seed[s], runs[base][s]) for s in common]
    reach = min(min(len(a), len(b)) for a, b in pairs)
    evals = [t for t in range(reach) if all("test_accuracy" in a[t] and "test_accuracy" in b[t]
                                            for a, b in pairs)]
    if not evals:
      continue
    last, tail = evals[-1], evals[-3:]
    cells, tails = [], []
    for key, name, scale in COLUMNS[:4]:
      m, se = paired_difference([a[last][key] * scale for a, _ in pairs], [b[last][key] * scale for _, b in pairs])
      cells.append(f"{name} {m:+.3g} ± {se:.2g}")
      if key.endswith("accuracy"):  # accuracy near chance swings between evaluations: also the mean
        mean = lambda r: sum(r[t][key] * scale for t in tail) / len(tail)  # noqa: E731
        m, se = paired_difference([mean(a) for a, _ in pairs], [mean(b) for _, b in pairs])
        tails.append(f"{name} {m:+.3g} ± {se:.2g}")
    lines.append(f"- {arm_spec(arm)[0]} − {arm_spec(base)[0]}, seeds {', '.join(map(str, common))}: at round "
                 f"{last + 1} " + "; ".join(cells) + f"; mean of rounds "
                 f"{', '.join(str(t + 1) for t in tail)}: " + "; ".join(tails))
  lines.append("")
  return "\n".join(lines), {arm: list(by_seed) for arm, by_seed in runs.items()}


def validation_choice(root: str, rounds: tuple[int, ...] = (8, 10, 12), seeds: tuple[int, ...] = (0,),
                      rm_at: str | None = None) -> str:
  """The rule that chooses FA's client lr and local steps, then RM's weight (markdown): an arm's
  score on a seed is its validation accuracy averaged over the evaluations of ``rounds`` (one
  evaluation near chance swings by several points). Four choices, each the best mean score over
  the seeds of ``seeds`` that all its candidates ran (an arm needs ``seeds[0]`` to take part):
  FA's (lr, steps) point among the FA arms; RM's weight among the RM arms at that point, FA
  (weight 0) included; AH's start among the ``ah_*`` arms; RM's top term among the ``rm_top_*``
  arms and the authors' weight at their point (its top term from the logits, kept unless another
  source beats it by more than one standard error of the paired difference, rmah_fa_rm.cfg's rule).
  ``rm_at`` (an FA arm) chooses RM's weight at that schedule instead of FA's chosen point."""
  per_seed: dict[str, dict[int, float]] = {}
  for arm in arms_in(root):
    for s in seeds:
      run_dir = os.path.join(root, f"{arm}_s{s}")
      if not os.path.isfile(os.path.join(run_dir, "metrics.csv")):
        continue
      score = window_mean(read(run_dir), "val_accuracy", rounds)
      if score is not None:
        per_seed.setdefault(arm, {})[s] = score
  per_seed = {a: v for a, v in per_seed.items() if seeds[0] in v}

  def choose(group: list[str]) -> tuple[str | None, tuple[int, ...]]:
    common = tuple(s for s in seeds if group and all(s in per_seed[a] for a in group))
    mean = lambda a: sum(per_seed[a][s] for s in common) / len(common)  # noqa: E731
    return max(group, key=mean, default=None), common

  best_fa, fa_seeds = choose([a for a in per_seed if a == "fa" or a.startswith("fa_")])
  at = rm_at or best_fa
  best_rm, rm_seeds = choose([a for a in per_seed if a == at
                              or (a.startswith("rm_authors") and arm_spec(a)[2] == at)])
  best_ah, ah_seeds = choose([a for a in per_seed if a.startswith("ah_")])
  tops = [a for a in per_seed if a.startswith("rm_top_")]
  logits = {TOP_TERM_AT + arm_spec(a)[2][len("fa"):] for a in tops}  # fa_lr<r>_steps<k> -> the same point
  best_top, top_seeds = choose(tops + [a for a in per_seed if a in logits])
  in_force = [a for a in per_seed if a in logits]
  if in_force:  # rmah_fa_rm.cfg's rule for the top term: the logits stay unless beaten by one SE
    best_top = kept_unless_beaten({a: [per_seed[a][s] for s in top_seeds] for a in in_force + tops},
                                  in_force[:1] + tops)
  on = lambda c: ", ".join(map(str, c)) or "none"  # noqa: E731
  where = f" at {arm_spec(at)[0]}" if rm_at else ""
  lines = [f"### Validation rule (mean validation accuracy of rounds {on(rounds)}; FA's point chosen on "
           f"seeds {on(fa_seeds)}, RM's weight{where} on {on(rm_seeds)}, AH's start on {on(ah_seeds)}, RM's top "
           f"term on {on(top_seeds)})", "",
           "| arm | val acc % | |", "| --- | --- | --- |"]
  for arm, v in sorted(per_seed.items(), key=lambda kv: (not kv[0].startswith("fa"), -kv[1][seeds[0]])):
    marks = [m for m, chosen in (("FA's rate and steps", arm == best_fa), ("RM's weight (FA = 0)", arm == best_rm),
                                 ("AH's start", arm == best_ah), ("RM's top term", arm == best_top)) if chosen]
    score = f"{sum(v.values()) / len(v):.2f}" + (f" ({', '.join(f's{s} {x:.1f}' for s, x in v.items())})"
                                                if len(v) > 1 else "")
    lines.append(f"| {arm_spec(arm)[0]} | {score} | {'; '.join(marks)} |")
  return "\n".join(lines + [""])


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--root", default="docs/runs/kws_rm_check")
  p.add_argument("--corpus", default=None, help="the espeak corpus folder (built by tasks.espeak_corpus)")
  p.add_argument("--seeds", type=int, default=2)
  p.add_argument("--rounds", type=int, default=12)
  p.add_argument("--run", default="", help="comma-separated arms whose missing seeds to run first")
  p.add_argument("--png", default="docs/kws_rm_check.png")
  p.add_argument("--png_arms", default="", help="comma-separated arms the figure draws (default: every arm run)")
  a = p.parse_args()
  drawn = list(filter(None, a.png_arms.split(",")))
  for arm in drawn:
    try:
      arm_spec(arm)
    except ValueError as e:
      p.error(f"--png_arms: {e}")
  for arm in filter(None, a.run.split(",")):
    try:
      arm_spec(arm)
    except ValueError as e:
      p.error(f"--run: {e}")
    if not a.corpus:
      p.error("--run needs --corpus=DIR (the espeak corpus folder)")
    for s in range(a.seeds):
      if not os.path.exists(os.path.join(a.root, f"{arm}_s{s}", "final_metrics.json")):
        subprocess.run(command(arm, s, a.rounds, a.root, a.corpus), check=True)
  text, runs = summary(a.root, a.seeds)
  # The rule as first written (rounds 8-12, seed 0), then at Table 3's horizon over two seeds: the
  # first window ended before RM's lead did (docs/runs/kws_moderate/notes.md).
  # Third: RM's weight where FA's training fails (lr 0.1 x 20 steps: the averaged model at chance).
  text = "\n".join((validation_choice(a.root), validation_choice(a.root, HORIZON, (0, 1)),
                    validation_choice(a.root, (8, 10, 12), (0, 1), rm_at=FAILING_FA), text))
  with open(os.path.join(a.root, "summary.md"), "w") as f:
    f.write(text + "\n")
  print(text)
  missing = [arm for arm in drawn if arm not in runs]
  if missing:
    p.error(f"--png_arms: {', '.join(missing)} not run under {a.root}; run: {', '.join(runs)}")
  drawn_runs = {arm: runs[arm] for arm in drawn} if drawn else runs
  print(draw(a.png, a.root, drawn_runs, lambda arm: arm_spec(arm)[0]))


if __name__ == "__main__":
  main()
