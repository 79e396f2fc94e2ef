"""Issue 50's sections of the results page (`tff_robust.experiments.page.robust`) on fabricated run
records in the runner's on-disk shape: the clip chosen on validation with its edge warning, mean ± SE,
ε, the paired differences against the mean with their verdicts, the missing-records text with its
command, and the same lines on every call. No run is started."""

import csv
import json
import os
import shlex

import pytest

from tff_robust import experiments as ex
from tff_robust.experiments.page import robust
from tff_robust.experiments.runs import REPO

HEADER = ["round", "dp_delta", "dp_epsilon", "round_seconds", "train_accuracy", "train_loss", "update_norm",
          "test_accuracy", "test_loss", "val_accuracy", "val_loss"]
DELTA = 0.07943282347242814  # 1/10^1.1, the runs' δ


def _write(run: ex.Run, test: float, val=None, eps="absent", commit="0123456789abcdef"):
  """A finished run's folder as the runner leaves it (accuracies as fractions; ``eps`` None: null)."""
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "experiment.json"), "w") as f:
    json.dump({"cell": run.cell.cell_id, "seed": run.seed, "flags": run.signature(),
               "command": shlex.join(run.command("python")), "commit": commit}, f)
  final = {"test_accuracy": test, "test_loss": 1.0}
  if val is not None:
    final.update(val_accuracy=val, val_loss=1.0)
  if eps != "absent":
    final.update(dp_epsilon=eps, dp_delta=DELTA)
  with open(os.path.join(run.output_dir, "final_metrics.json"), "w") as f:
    json.dump(final, f)
  with open(os.path.join(run.output_dir, "metrics.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(HEADER)
    w.writerow([30, DELTA, "inf" if eps is None else eps, 1.5, 0.9, 0.1, 0.02, test, 1.0, val or "", 1.0])
  with open(os.path.join(run.output_dir, "hparams.cfg"), "w") as f:
    f.write("\n".join(run.signature()) + "\n")
  with open(os.path.join(run.output_dir, "run.log"), "w") as f:
    f.write(f"\n$ {shlex.join(run.command('python'))}\n")


def _runs(name, root):
  return {(r.cell.row, r.cell.column, r.seed): r
          for r in ex.plan(ex.build_table(name), robust.SEEDS, robust.folder(str(root)))}


# Validation accuracy per (noise row, clip) over seeds 0-2; the rule picks the highest mean, ties to the
# smaller C: z0 -> C = 10 (the largest), z0.1 -> C = 0.3, z0.3 -> C = 0.3 (tied with C = 1: 62.5 each),
# z1.0 -> C = 0.1 (the smallest).
LOW, MID, HIGH, TOP = (0.5, 0.5, 0.5), (0.6, 0.62, 0.64), (0.7, 0.7, 0.73), (0.72, 0.72, 0.75)
VAL = {"z0": {"c0.1": LOW, "c0.3": LOW, "c1": MID, "c3": HIGH, "c10": TOP},
       "z0.1": {"c0.1": LOW, "c0.3": HIGH, "c1": MID, "c3": LOW, "c10": LOW},
       "z0.3": {"c0.1": LOW, "c0.3": (0.5, 0.625, 0.75), "c1": (0.625, 0.625, 0.625), "c3": LOW, "c10": LOW},
       "z1.0": {"c0.1": HIGH, "c0.3": MID, "c1": LOW, "c3": LOW, "c10": LOW}}
EPS = {"z0": None, "z0.1": 412.0, "z0.3": 27.3, "z1.0": 4.56}


def _dp_records(root, skip=()):
  for (row, col, seed), run in _runs(robust.DP, root).items():
    if (row, col, seed) in skip:
      continue
    test = (0.70, 0.72, 0.77)[seed] if (row, col) == ("z0.1", "c0.3") else 0.4 + 0.01 * seed
    _write(run, test, VAL[row][col][seed], EPS[row])


def test_the_clip_is_chosen_on_validation_with_its_test_accuracy_and_epsilon(tmp_path):
  _dp_records(tmp_path)
  lines = robust.dp_section(str(tmp_path))
  head = lines.index("| Noise z | clip chosen on validation | validation acc (%) | test acc (%) | ε |")
  assert lines[head + 2:head + 6] == [
      "| 0 (no noise) | C = 10 | 73.0 ± 1.0 | 41.0 ± 0.6 | ∞ (δ = 0.0794) |",
      "| 0.1 | C = 0.3 | 71.0 ± 1.0 | 73.0 ± 2.1 | 412 (δ = 0.0794) |",  # test (70, 72, 77): SE √13/√3
      "| 0.3 | C = 0.3 | 62.5 ± 7.2 | 41.0 ± 0.6 | 27.3 (δ = 0.0794) |",  # the tie goes to the smaller C
      "| 1.0 | C = 0.1 | 71.0 ± 1.0 | 41.0 ± 0.6 | 4.56 (δ = 0.0794) |"]
  text = "\n".join(lines)
  assert "**Edge of the grid**: at z = 0 (no noise) the chosen clip, C = 10, is the grid's largest" in text
  assert "**Edge of the grid**: at z = 1.0 the chosen clip, C = 0.1, is the grid's smallest" in text
  assert text.count("**Edge of the grid**") == 2
  assert "never on test" in text and not any(line.startswith("**Records") for line in lines)
  # The grids: every cell, the chosen ones marked, test and validation apart.
  assert "| 0.1 | 41.0 ± 0.6 | 73.0 ± 2.1 (chosen) | 41.0 ± 0.6 | 41.0 ± 0.6 | 41.0 ± 0.6 |" in lines
  assert "| 0.1 | 50.0 ± 0.0 | 71.0 ± 1.0 (chosen) | 62.0 ± 1.2 | 50.0 ± 0.0 | 50.0 ± 0.0 |" in lines
  assert "Records: `robust/robust_dp_*`, made at commit 0123456789 (60 runs)." in lines


def test_choose_clip_waits_for_every_seed_of_the_row(tmp_path):
  _dp_records(tmp_path, skip={("z0.1", "c1", 2)})
  records = robust.gather(robust.DP, str(tmp_path))
  assert [robust.choose_clip(records, r) for r in ("z0", "z0.1", "z0.3", "z1.0")] == ["c10", None, "c0.3", "c0.1"]
  lines = robust.dp_section(str(tmp_path))
  assert "| 0.1 | no choice yet (14 of 15 runs in) |  |  |  |" in lines
  assert "| 0.1 | 41.0 ± 0.6 | 73.0 ± 2.1 | 40.5 ± 0.5 (2/3) | 41.0 ± 0.6 | 41.0 ± 0.6 |" in lines
  status = next(line for line in lines if line.startswith("**Records incomplete**"))
  assert status.startswith("**Records incomplete**: 59 of 60 runs on record under `robust/`; not finished: "
                           "`robust_dp_z0.1_c1_s2`.")
  assert (f"`python -m tff_robust.experiments --table=robust_dp --seeds=3 "
          f"--root_output_dir={tmp_path}/robust`") in status


def test_a_record_made_with_other_flags_is_not_read(tmp_path):
  _dp_records(tmp_path)
  run = _runs(robust.DP, tmp_path)[("z0", "c3", 0)]
  path = os.path.join(run.output_dir, "experiment.json")
  with open(path) as f:
    record = json.load(f)
  record["flags"] = [a.replace("--dp_clip=3", "--dp_clip=5") for a in record["flags"]]
  with open(path, "w") as f:
    json.dump(record, f)
  lines = robust.dp_section(str(tmp_path))
  status = next(line for line in lines if line.startswith("**Records incomplete**"))
  assert "59 of 60 runs" in status
  assert ("Made with other flags than today's (not read; the runner refuses to reuse them, so remove them first): "
          "`robust_dp_z0_c3_s0`." in status)
  assert "| 0 (no noise) | no choice yet (14 of 15 runs in) |  |  |  |" in lines


@pytest.mark.parametrize("name, section, runs", [(robust.DP, robust.dp_section, 60),
                                                 (robust.BYZANTINE, robust.byzantine_section, 210)])
def test_without_records_the_section_says_so_and_gives_the_command(tmp_path, name, section, runs):
  lines = section(str(tmp_path))  # no ROOT/robust at all (the reduced page's ROOT)
  status = next(line for line in lines if line.startswith("**Records missing**"))
  assert f"none of this table's {runs} runs" in status
  assert (f"`python -m tff_robust.experiments --table={name} --seeds=3 --root_output_dir="
          f"{tmp_path}/robust`") in status
  assert not any(line.startswith("|") for line in lines)  # no table of placeholders
  assert "over seeds 0–2" in "\n".join(lines) and "{" not in "\n".join(lines)  # every field filled in
  want = f"python -m tff_robust.experiments --table={name} --seeds=3 --root_output_dir=docs/runs/robust"
  assert robust.command(name, os.path.join(REPO, "docs", "runs")) == want
  # The page's copy in another folder gives the same command (run from its docs folder's parent).
  copy = tmp_path / "elsewhere"
  assert f"`{want}`" in "\n".join(section(str(copy / "docs" / "runs"), str(copy)))


# Test accuracy (fractions) per (row, aggregator) over seeds 0-2; the others are left out (missing).
MEAN = (0.50, 0.60, 0.70)
BYZ = {("none", "mean"): (0.90, 0.91, 0.92), ("none", "median"): (0.89, 0.90, 0.92),
       ("sign_flip_1", "mean"): MEAN,
       ("sign_flip_1", "median"): (0.80, 0.85, 0.95),  # D = (30, 25, 25): +26.7 ± 1.7
       ("sign_flip_1", "krum"): (0.45, 0.54, 0.66),  # D = (-5, -6, -4): -5.0 ± 0.6
       ("sign_flip_1", "bulyan"): (0.51, 0.59, 0.705),  # D = (1, -1, 0.5): +0.2 ± 0.6
       ("sign_flip_2", "mean"): MEAN, ("sign_flip_2", "bulyan"): (0.60, 0.70, 0.80)}


def _byzantine_records(root):
  for (row, col, seed), run in _runs(robust.BYZANTINE, root).items():
    if (row, col) in BYZ:
      _write(run, BYZ[(row, col)][seed])


def test_the_aggregators_paired_differences_against_the_mean(tmp_path):
  _byzantine_records(tmp_path)
  lines = robust.byzantine_section(str(tmp_path))
  grid = [line for line in lines if line.startswith("| sign_flip | 1 of 10 |")]
  assert grid[0] == ("| sign_flip | 1 of 10 | 60.0 ± 5.8 | 86.7 ± 4.4 | missing | 55.0 ± 6.1 | missing | "
                     "60.2 ± 5.7 | missing |")
  assert grid[1] == ("| sign_flip | 1 of 10 | +26.7 ± 1.7: better | missing | -5.0 ± 0.6: worse | missing | "
                     "+0.2 ± 0.6: within noise | missing |")
  # Bulyan with 2 attackers runs beyond n ≥ 4f+3: marked in both tables.
  two = [line for line in lines if line.startswith("| sign_flip | 2 of 10 |")]
  assert two[0].endswith("| 70.0 ± 5.8 † | missing |") and two[1].endswith("| +10.0 ± 0.0: better † | missing |")
  assert "Bulyan: sign_flip 2 of 10, sign_flip 3 of 10, gaussian 2 of 10" in "\n".join(lines)
  none = [line for line in lines if line.startswith("| none | 0 of 10 |")]
  assert none[1].startswith("| none | 0 of 10 | -0.7 ± 0.3: worse | missing |")  # D = (-1, -1, 0)
  assert "Records: `robust/robust_byzantine_*`, made at commit 0123456789 (24 runs)." in lines
  status = next(line for line in lines if line.startswith("**Records incomplete**"))
  assert "24 of 210 runs" in status and "and 50 more cells" in status


def test_beyond_assumption_is_bulyan_with_two_or_three_attackers():
  table = ex.build_table(robust.BYZANTINE)
  assert sorted((c.row, c.column) for c in table.cells if robust.beyond_assumption(c)) == sorted(
      (f"{a}_{k}", "bulyan") for a in ("sign_flip", "gaussian", "scaled") for k in (2, 3))


def test_the_sections_are_the_same_on_every_call(tmp_path):
  _dp_records(tmp_path, skip={("z0.3", "c1", 1)})
  _byzantine_records(tmp_path)
  root = str(tmp_path)
  first = robust.dp_section(root) + robust.byzantine_section(root)
  assert first == robust.dp_section(root) + robust.byzantine_section(root)
