"""Runs re-made at a later commit against their committed records
(`tff_robust.experiments.page.commit_check`): what counts as training alike, and the page's line."""

import csv
import os

from tff_robust.experiments.page import commit_check

COLUMNS = ("round", "train_loss", "update_norm", "round_seconds", "test_accuracy", "val_loss")


def _metrics(run_dir, rows):
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, "metrics.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, COLUMNS)
    w.writeheader()
    w.writerows(dict(zip(COLUMNS, r)) for r in rows)


COMMITTED = [(1, "1.8242790699005127", "0.21", "27.7", "", ""),
             (2, "1.1645622253417969", "0.08", "24.7", "", ""),
             (3, "0.9", "0.05", "25.0", "0.3", "2.1")]


def test_training_columns_are_compared_as_written_and_wall_time_and_evaluations_are_not(tmp_path):
  study = tmp_path / "horizon200"
  _metrics(study / "fa_s0", COMMITTED)
  _metrics(study / "fa_s1", COMMITTED)
  check = study / commit_check.FOLDER
  # Same training values; another wall time, and the short run evaluated at its last round.
  _metrics(check / "fa_s0", [(1, "1.8242790699005127", "0.21", "30.1", "", ""),
                             (2, "1.1645622253417969", "0.08", "31.0", "0.12", "2.29")])
  # The loss differs in its last written digit at round 2.
  _metrics(check / "fa_s1", [(1, "1.8242790699005127", "0.21", "27.7", "", ""),
                             (2, "1.1645622253417968", "0.08", "24.7", "", "")])
  _metrics(check / "unknown_s0", [(1, "9", "9", "9", "", "")])
  committed = {"fa_s0": ("FA seed 0", str(study / "fa_s0")), "fa_s1": ("FA seed 1", str(study / "fa_s1"))}
  found = commit_check.checks(str(study), committed)
  assert found == [commit_check.Check("FA seed 0", 2, ()), commit_check.Check("FA seed 1", 2, ("train_loss",))]
  line = commit_check.sentence(found, "runs/x/README.md")
  assert line.startswith("Made again at one later commit, rounds 1–2 of FA seed 0, FA seed 1 ([commit_check]"
                         "(runs/x/README.md)) differ from their committed records: FA seed 1 in train_loss")
  assert commit_check.sentence(found[:1], "l").endswith(
      "equal their committed records in every training column (wall time and evaluations not compared).")


def test_a_round_the_record_lacks_and_no_check_at_all(tmp_path):
  study = tmp_path / "study"
  _metrics(study / "fa_s0", COMMITTED[:1])
  _metrics(study / commit_check.FOLDER / "fa_s0", COMMITTED[:2])
  found = commit_check.checks(str(study), {"fa_s0": ("FA seed 0", str(study / "fa_s0"))})
  assert found[0].differing == ("round 2 missing",)
  assert commit_check.checks(str(tmp_path / "none"), {}) == []
  assert commit_check.sentence([], "l") == ""
