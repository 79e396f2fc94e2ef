"""The results page's account of the tuned baselines: each Table 1 cell's own overlay
(``flags/rmah_mnist_<row>_<fa|fa_wd>.cfg``, written by `studies.baselines` from its validation
rule) as a table, with the study that chose it."""

from __future__ import annotations

from tff_robust import experiments as ex

STUDY = "runs/baselines_mnist/table.md"  # relative to docs/
DECAY_WORDS = {("expdecay", "50"): "lr ×0.5, steps ×0.75 every 50 rounds",
               ("expdecay", "20"): "lr ×0.5, steps ×0.75 every 20 rounds"}


def describe(flags: dict[str, str]) -> str:
  """``lr 0.1, 50 steps, <decay>[, μ 0.005]`` from an overlay's flag values."""
  schedule = flags.get("client_lr_schedule", "expdecay")
  decay = "constant" if schedule == "constant" else DECAY_WORDS.get(
      (schedule, flags.get("client_lr_decay_every", "50")), schedule)
  steps = flags.get("local_steps", "?")
  text = f"lr {flags.get('client_lr', '?')}, {steps} step{'' if steps == '1' else 's'}, {decay}"
  return text + (f", μ {flags['wd_mu']}" if "wd_mu" in flags else "")


def tuned_lines(task: str = "mnist") -> list[str]:
  """A paragraph and a table (row x FA / FA+WD); [] when no cell of ``task`` has an overlay."""
  body = []
  for key, c, dist, _ in ex.RMAH_ROWS:
    found = {m: ex.overlay_values(task, key, m) for m in ("fa", "fa_wd")}
    if any(found.values()):
      body.append(f"| {c} | {dist} | " + " | ".join(describe(v) if v else "flagfile's" for v in found.values()) + " |")
  if not body:
    return []
  return ["**Baselines tuned per cell.** FA's and FA+WD's schedules were chosen for each cell on "
          "validation data (10 % of each client's digits held out, seed 0, 60 rounds; the mean "
          "validation accuracy at rounds 50–60): FA's client lr × local steps on a grid extended past "
          "any edge choice, then its decay, then FedProx's μ on FA's schedule "
          f"([the study and its rule]({STUDY}), `python -m tff_robust.experiments.studies.baselines`). "
          "FA+RM runs FA's schedule (so FA+RM − FA is RM's effect alone). FA+AH and FA+RM+AH keep AH's "
          "start at the flagfiles' FA point (lr 0.1, 50 steps): from the tuned point (lr 0.3, 1 step, "
          "on a grid widened to hold it) FA+AH's validation accuracy fell by 8 and 28 points on the "
          "one-class rows; the grid widened to lr 1 and 1 step, or eq. 7's step η_H at 0.01 or 0.2, "
          "did not beat the setting in force either ([the checks](runs/ah_start/notes.md)).", "",
          "| C | Data Distribution | FA | FA+WD |", "| --- | --- | --- | --- |", *body, ""]
