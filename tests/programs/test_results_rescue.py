"""The page's check of the seed's rescue where FA fails (`tff_robust.experiments.page.rescue`) on
constructed study runs: FA+RM − FA per window of evaluations, paired by seed, and its figure."""

import csv
import os

from tff_robust.experiments.page import rescue

from helpers.fake_page import FakePage


def _study_run(root, name, val, test):
  """A run of the keyword study with evaluations at rounds 8-12 and 26-30 (``val``, ``test``: per round)."""
  folder = os.path.join(root, rescue.STUDY, name)
  os.makedirs(folder)
  with open(os.path.join(folder, "metrics.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["round", "client_drift", "update_norm", "train_loss", "val_accuracy", "test_accuracy"])
    for t in range(1, 31):
      evaluated = t in (8, 10, 12, 26, 28, 30)
      w.writerow([t, 0.5, 0.1, 0.3, val(t) if evaluated else "", test(t) if evaluated else ""])



def test_rm_is_set_against_fa_at_the_failing_schedule_seed_by_seed(tmp_path):
  root = str(tmp_path)
  for s in (0, 1):
    _study_run(root, f"fa_lr0.1_s{s}", lambda t: 0.10, lambda t: 0.10)
    # FA+RM 0.2 / 0.3 (seed 0 / 1) on validation at rounds 8-12, then 0.4 / 0.4; test 0.01 above.
    early, late = (0.2, 0.3)[s], 0.4
    _study_run(root, f"rm_authors_w1e-3_lr0.1_s{s}", lambda t, e=early: e if t <= 12 else late,
               lambda t, e=early: (e if t <= 12 else late) + 0.01)
  os.makedirs(os.path.join(root, rescue.STUDY, "rm_authors_w1e-2_lr0.1_s0"))  # stopped at round 2
  with open(os.path.join(root, rescue.STUDY, "rm_authors_w1e-2_lr0.1_s0", "metrics.csv"), "w") as f:
    f.write("round,train_loss,val_accuracy,test_accuracy\n1,0,,\n2,0,0.1,0.1\n")
  _study_run(root, "fa_lr0.05_steps2_s0", lambda t: 0.3, lambda t: 0.3)  # another schedule: not read
  _study_run(root, "rm_authors_w1e-3_lr0.05_steps2_s0", lambda t: 0.9, lambda t: 0.9)
  page = FakePage(str(tmp_path / "docs"))
  rescue.section(page, root)
  rows = [line for line in page.lines if line.startswith("| FA+RM")]
  assert rows == [
      "| FA+RM, authors' layers, 1e-3 | 0, 1 | 8–12 | 10.0 | 25.0 | +15.0 ± 5.0: held "
      "| 10.0 | 26.0 | +16.0 ± 5.0: held |",
      "| FA+RM, authors' layers, 1e-3 | 0, 1 | 26–30 | 10.0 | 40.0 | +30.0 ± 0.0: held "
      "| 10.0 | 41.0 | +31.0 ± 0.0: held |"]
  assert "stopped before a window's evaluations (see the notes): FA+RM, authors' layers, 1e-2 (2 rounds)." \
      in " ".join(page.lines)
  assert len(page.drawn) == 1 and os.path.isfile(page.drawn[0])


def test_the_figure_draws_the_seeds_that_ran_longest(tmp_path):
  root = str(tmp_path)
  for s in (0, 1):
    _study_run(root, f"fa_lr0.1_s{s}", lambda t: 0.10, lambda t: 0.10)
    _study_run(root, f"rm_authors_w1e-3_lr0.1_s{s}", lambda t: 0.2, lambda t: 0.2)
  folder = os.path.join(root, rescue.STUDY, "fa_lr0.1_s2")  # a third seed stopped at round 12
  os.makedirs(folder)
  with open(os.path.join(folder, "metrics.csv"), "w") as f:
    f.write("round,val_accuracy,test_accuracy\n" + "".join(f"{t},0.1,0.1\n" for t in range(1, 13)))
  page = FakePage(str(tmp_path / "docs"))
  captions = []
  page.figure = lambda name, draw, caption: captions.append(caption)
  rescue.section(page, root)
  assert "FA: seeds 0, 1 (30 rounds); FA+RM, authors' layers, 1e-3: seeds 0, 1 (30 rounds)" in captions[0]


def test_nothing_is_written_without_fa_at_that_schedule(tmp_path):
  _study_run(str(tmp_path), "rm_authors_w1e-3_lr0.1_s0", lambda t: 0.2, lambda t: 0.2)
  page = FakePage(str(tmp_path / "docs"))
  rescue.section(page, str(tmp_path))
  assert page.lines == [] and page.drawn == []
