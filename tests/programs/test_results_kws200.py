"""Table 3's one-keyword cell at 200 rounds on the results page (`tff_robust.experiments.page.kws200`):
the rule's verdicts on constructed differences, and the section on fabricated run records (none,
some running, all in) with the rule quoted before any number."""

import csv
import json
import os

import pytest

from helpers.paths import ROOT
from helpers.fake_page import FakePage

from tff_robust.experiments.page import kws200



def _run(root, rel, accuracy, rounds=200, flags=()):
  """A run folder with test accuracy ``accuracy(t)`` (a fraction) at every 10th round up to ``rounds``."""
  folder = os.path.join(root, kws200.FOLDER, rel)
  os.makedirs(folder)
  with open(os.path.join(folder, "metrics.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["round", "train_loss", "test_accuracy"])
    for t in range(1, rounds + 1):
      w.writerow([t, 0.5, accuracy(t) if t % 10 == 0 else ""])
  with open(os.path.join(folder, "experiment.json"), "w") as f:
    json.dump({"flags": list(flags), "commit": "0123456789abcdef"}, f)


def _flat(level, rise=0.0):
  """Accuracy ``level`` (%) from round 180 on and ``level − rise`` before (as a fraction)."""
  return lambda t: (level if t >= 180 else level - rise) / 100


@pytest.mark.parametrize("d, verdict", [
    ({0: 25.0, 1: 20.0, 2: 31.0}, kws200.HELD),  # every seed at least +20
    ({0: 2.0, 1: -1.0, 2: 4.0}, kws200.REFUTED),  # mean +1.7, SE 1.5
    ({0: 5.0, 1: 5.0, 2: 5.0}, kws200.REFUTED),  # on both bounds
    ({0: 25.0, 1: 10.0, 2: 30.0}, kws200.INCONCLUSIVE),  # one seed under +20, mean above +5
    ({0: -10.0, 1: 20.0, 2: 0.0}, kws200.INCONCLUSIVE),  # mean +3.3 but SE 8.8 > 5
    ({0: 30.0, 1: 40.0}, kws200.INCONCLUSIVE),  # seed 2 missing
    ({0: 1.0, 1: 0.0}, kws200.INCONCLUSIVE),
])
def test_the_rule_on_constructed_differences(d, verdict):
  assert kws200.verdict_a(d) == verdict


def test_arm_b_holds_only_with_both_seeds_at_20():
  assert kws200.verdict_b({0: 24.0, 1: 20.0}) == kws200.HELD
  assert kws200.verdict_b({0: 24.0, 1: 19.9}) == "not held"
  assert kws200.verdict_b({0: 24.0}) == kws200.INCONCLUSIVE


def test_the_codes_numbers_are_the_committed_rules():
  with open(os.path.join(ROOT, "docs", "runs", kws200.RULE)) as f:
    rule = " ".join(f.read().split())
  for text in ("rounds 180, 190 and 200", "rounds 150, 160, 170", "D ≥ +20 points on every seed",
               "mean D ≤ +5 with SE ≤ 5", "more than 2 points", "seeds 0, 1, 2", "FA and FA+RM, seeds 0, 1"):
    assert text in rule, text
  assert (kws200.WINDOW, kws200.BEFORE) == ((180, 190, 200), (150, 160, 170))
  assert (kws200.HELD_D, kws200.REFUTED_MEAN, kws200.REFUTED_SE, kws200.RISING) == (20.0, 5.0, 5.0, 2.0)


def test_without_records_the_runs_are_pending_after_the_rule(tmp_path):
  page = FakePage(str(tmp_path / "docs"))
  kws200.section(page, str(tmp_path / "runs"))  # the rule from the committed copy
  text = "\n".join(page.lines)
  assert "> **Verdict (arm A, the headline).**" in text
  assert text.index("> **Verdict") < text.index("**Runs pending**")
  assert page.drawn == []


def test_the_section_judges_fabricated_records(tmp_path):
  root = str(tmp_path)
  os.makedirs(os.path.join(root, kws200.FOLDER))
  with open(os.path.join(root, kws200.RULE), "w") as f:
    f.write("# The rule's title\n\nA rule fixed before the runs.\n")
  a, b = kws200.CELL, os.path.join("kws_failing", kws200.CELL)
  fa_flags = ("--client_lr=0.05", "--local_steps=2")
  for s, (fa, rm) in enumerate(((30.0, 55.0), (32.0, 60.0), (34.0, 58.0))):
    _run(root, f"{a}_fa_s{s}", _flat(fa), flags=fa_flags)
    _run(root, f"{a}_fa_rm_s{s}", _flat(rm, rise=3.0 if s == 1 else 1.0), flags=fa_flags + ("--rm_weight=0.0001",))
  _run(root, f"{b}_fa_s0", _flat(10.0))
  _run(root, f"{b}_fa_rm_s0", _flat(36.0))
  _run(root, f"{b}_fa_s1", _flat(10.0))
  _run(root, f"{b}_fa_rm_s1", _flat(30.0), rounds=137)  # still running
  _run(root, kws200.CEILING, _flat(88.0))
  page = FakePage(str(tmp_path / "docs"))
  kws200.section(page, root)
  text = "\n".join(page.lines)
  assert text.index("> A rule fixed before the runs.") < text.index("| arm |")
  assert '"The rule\'s title"' in text
  rows = [line for line in page.lines if line.startswith("| A ") or line.startswith("| B ")]
  assert rows == ["| A | 0 | 30.0 (+0.0) | 55.0 (+1.0) | +25.0 |",
                  "| A | 1 | 32.0 (+0.0) | 60.0 (+3.0, still rising) | +28.0 |",
                  "| A | 2 | 34.0 (+0.0) | 58.0 (+1.0) | +24.0 |",
                  "| B | 0 | 10.0 (+0.0) | 36.0 (+0.0) | +26.0 |",
                  "| B | 1 | 10.0 (+0.0) | running: round 137 | not yet |"]
  assert "**Arm A (the headline): held** — D = +25.7 ± 1.2 (SE); 3 of 3 seeds in." in page.lines
  assert "**Arm B (the rescue where FA fails): inconclusive** — D = +26.0; 1 of 2 seeds in." in page.lines
  assert "Level-off check: still rising — arm A FA+RM seed 1." in page.lines
  assert any(line.startswith("The ceiling, FA on iid clients (seed 0): 88.0 (+0.0)") for line in page.lines)
  assert any("arm A FA: lr 0.05 × 2 steps; arm A FA+RM: lr 0.05 × 2 steps, RM 0.0001" in line
             and "commit 0123456789" in line for line in page.lines)
  assert len(page.drawn) == 1 and os.path.getsize(page.drawn[0]) > 1000
