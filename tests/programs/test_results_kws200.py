"""Table 3's one-keyword cell at 200 rounds on the results page (`tff_robust.experiments.page.kws200`):
the rule's verdicts on constructed differences, and the section on run records made here in the
runner's format through its plan of the rule (none; some running, unfinished or made with other
flags; all in; the committed ones) with the rule quoted before any number."""

import csv
import json
import os
import shlex
import shutil

import pytest

from helpers.paths import ROOT
from helpers.fake_page import FakePage

from tff_robust.common import run_lock
from tff_robust.experiments import __main__ as runner
from tff_robust.experiments.page import kws200

COMMIT = "0123456789abcdef"


def _corpus(root):
  return os.path.join(root, "kws_corpus")


def _run(root, key, accuracy, rounds=200, flags=None):
  """Run ``key`` = (arm, method, seed) of the plan as the runner and `tff_robust.main` leave it:
  experiment.json with the plan's flags (or ``flags``), test accuracy ``accuracy(t)`` (a fraction)
  at every 10th round up to ``rounds``, final_metrics.json once at round 200."""
  run = kws200.runs(root, _corpus(root))[key]
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "metrics.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["round", "client_lr", "local_steps", "train_loss", "train_accuracy", "test_accuracy"])
    for t in range(1, rounds + 1):
      w.writerow([t, 0.01, 20, 0.5, 0.5 + t / 1000, accuracy(t) if t % 10 == 0 else ""])
  with open(os.path.join(run.output_dir, "experiment.json"), "w") as f:
    json.dump({"cell": run.cell.cell_id, "seed": run.seed, "flags": list(flags or run.signature()),
               "command": shlex.join(run.command("python")), "commit": COMMIT}, f)
  if rounds == 200:
    with open(os.path.join(run.output_dir, "final_metrics.json"), "w") as f:
      json.dump({"test_accuracy": accuracy(200), "test_loss": 1.0}, f)
  return run


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
  assert page.lines[page.lines.index("```sh") + 1] == (
      "python -m tff_robust.experiments --table=rmah_kws200 --data_dir=runs/kws_corpus "
      "--root_output_dir=runs/horizon200")  # run from the docs folder's parent, the page's checkout
  assert page.drawn == []


def test_the_command_makes_exactly_the_runs_the_section_reads(tmp_path):
  """Run from the page's checkout, the command plans the runs `kws200.runs` reads, flag for flag."""
  checkout = tmp_path / "copy"
  root = str(checkout / "docs" / "runs")
  command = kws200.command(root, _corpus(root), str(checkout))
  assert command == ("python -m tff_robust.experiments --table=rmah_kws200 --data_dir=docs/runs/kws_corpus "
                     "--root_output_dir=docs/runs/horizon200")
  args = runner.parse_args(shlex.split(command)[3:])
  made = runner.PLANNED[args.table](str(checkout / args.root_output_dir), str(checkout / args.data_dir))
  assert [r.flags() for r in made] == [r.flags() for r in kws200.runs(root, _corpus(root)).values()]


def _section(root):
  page = FakePage(os.path.join(root, "docs"))
  kws200.section(page, root)  # the corpus: ROOT/kws_corpus, as the page's
  return page


def _rows(page):
  return [line for line in page.lines if line.startswith("| A ") or line.startswith("| B ")]


def _make(root):
  """Every run of the plan, arm B's FA+RM seed 1 stopped at round 137."""
  os.makedirs(os.path.join(root, kws200.FOLDER))
  with open(os.path.join(root, kws200.RULE), "w") as f:
    f.write("# The rule's title\n\nA rule fixed before the runs.\n")
  for s, (fa, rm) in enumerate(((30.0, 55.0), (32.0, 60.0), (34.0, 58.0))):
    _run(root, ("A", "fa", s), _flat(fa))
    _run(root, ("A", "fa_rm", s), _flat(rm, rise=3.0 if s == 1 else 1.0))
  _run(root, ("B", "fa", 0), _flat(10.0))
  _run(root, ("B", "fa_rm", 0), _flat(36.0))
  _run(root, ("B", "fa", 1), _flat(10.0))
  _run(root, ("B", "fa_rm", 1), _flat(30.0), rounds=137)  # stopped
  _run(root, ("ceiling", "fa", 0), _flat(88.0))


def test_the_section_judges_records_found_through_the_plan(tmp_path):
  root = str(tmp_path)
  _make(root)
  page = _section(root)
  text = "\n".join(page.lines)
  assert text.index("> A rule fixed before the runs.") < text.index("| arm |")
  assert '"The rule\'s title"' in text
  assert _rows(page) == ["| A | 0 | 30.0 (+0.0) | 55.0 (+1.0) | +25.0 |",
                         "| A | 1 | 32.0 (+0.0) | 60.0 (+3.0, still rising) | +28.0 |",
                         "| A | 2 | 34.0 (+0.0) | 58.0 (+1.0) | +24.0 |",
                         "| B | 0 | 10.0 (+0.0) | 36.0 (+0.0) | +26.0 |",
                         "| B | 1 | 10.0 (+0.0) | unfinished: round 137 | not yet |"]
  assert "**Arm A (the headline): held** — D = +25.7 ± 1.2 (SE); 3 of 3 seeds in." in page.lines
  assert "**Arm B (the rescue where FA fails): inconclusive** — D = +26.0; 1 of 2 seeds in." in page.lines
  assert "Level-off check: still rising — arm A FA+RM seed 1." in page.lines
  ceiling = [line for line in page.lines if line.startswith("The ceiling, FA on iid clients")]
  assert ceiling == ["The ceiling, FA on iid clients (seed 0, the iid row's flagfile schedule: lr 0.01 × 20 steps at "
                     "round 1, not tuned): 88.0 (+0.0) (the paper's iid FA: 93.0 ± 0.2). Its test accuracy peaked at "
                     "88.0 % at round 10; its clients' training accuracy was 70.0 % at round 200. Arm A's FA (32.0 %, mean over its "
                     "3 seeds) is 56.0 points below it: one keyword per client costs FA 56.0 points here against "
                     "64.6 in the paper, so D ≥ +20 would put FA+RM 36.0 points below FA on iid clients."]
  assert any("arm A FA: lr 0.05 × 2 steps; arm A FA+RM: lr 0.05 × 2 steps, RM 0.0001; arm B FA: lr 0.1 × 20 "
             "steps; arm B FA+RM: lr 0.1 × 20 steps, RM 0.001" in line and "commit 0123456789" in line
             for line in page.lines)
  assert not any(line.startswith("Made with other flags") for line in page.lines)
  assert not any(line.startswith("**Why this differs") for line in page.lines)  # held: nothing to explain
  assert page.lines[page.lines.index("```sh") + 1] == kws200.command(root, _corpus(root), root)  # one not done
  assert len(page.drawn) == 1 and os.path.getsize(page.drawn[0]) > 1000
  os.remove(os.path.join(root, kws200.FOLDER, "kws_failing", f"{kws200.CELL}_fa_rm_s1", "metrics.csv"))
  assert "```sh" in _section(root).lines  # not on record
  shutil.rmtree(kws200.runs(root, _corpus(root))[("B", "fa_rm", 1)].output_dir)
  _run(root, ("B", "fa_rm", 1), _flat(30.0))
  page = _section(root)
  assert "```sh" not in page.lines and "| B | 1 | 10.0 (+0.0) | 30.0 (+0.0) | +20.0 |" in page.lines
  assert "**Arm B (the rescue where FA fails): held** — D = +23.0 ± 3.0 (SE); 2 of 2 seeds in." in page.lines


def test_a_run_another_process_holds_is_running_and_its_numbers_wait(tmp_path):
  """A run at round 200 in metrics.csv whose process still holds it (before final_metrics.json) is
  running, not read; one started and not yet at its first round is running too."""
  root = str(tmp_path)
  _make(root)
  b1 = kws200.runs(root, _corpus(root))[("B", "fa_rm", 1)]
  with run_lock.hold(b1.output_dir):
    assert _rows(_section(root))[-1] == "| B | 1 | 10.0 (+0.0) | running: round 137 | not yet |"
  a2 = kws200.runs(root, _corpus(root))[("A", "fa_rm", 2)]
  os.remove(a2.done_path)  # the last round written, the run not ended
  with run_lock.hold(a2.output_dir):
    page = _section(root)
  assert _rows(page)[2] == "| A | 2 | 34.0 (+0.0) | running: round 200 | not yet |"
  assert "**Arm A (the headline): inconclusive** — D = +26.5 ± 1.5 (SE); 2 of 3 seeds in." in page.lines
  fresh = str(tmp_path / "fresh")
  started = kws200.runs(fresh, _corpus(fresh))[("A", "fa", 0)]
  with run_lock.hold(started.output_dir):
    assert _rows(_section(fresh))[0] == "| A | 0 | running: round 0 | not on record | not yet |"


def test_a_record_made_with_other_flags_is_named_and_not_read(tmp_path):
  """Arm B's FA seed 0 made on arm A's schedule (without ``--client_lr=0.1 --local_steps=20``): the
  runner refuses it, and so does the page: not in the table's numbers or the verdict, named with the
  runner's reason."""
  root = str(tmp_path)
  _make(root)
  b0 = kws200.runs(root, _corpus(root))[("B", "fa", 0)]
  a0 = kws200.runs(root, _corpus(root))[("A", "fa", 0)]
  flags = [f if not f.startswith("--experiment_name=") else f"--experiment_name={b0.experiment_name}"
           for f in a0.signature()]
  with open(os.path.join(b0.output_dir, "experiment.json")) as f:
    record = json.load(f)
  with open(os.path.join(b0.output_dir, "experiment.json"), "w") as f:
    json.dump({**record, "flags": flags}, f)
  assert b0.status() == "conflict"
  page = _section(root)
  assert _rows(page)[3] == "| B | 0 | made with other flags | 36.0 (+0.0) | not yet |"
  assert "**Arm B (the rescue where FA fails): inconclusive** — no seed in; 0 of 2 seeds in." in page.lines
  i = page.lines.index("Made with other flags than the runner's plan of the rule (not read; the runner refuses "
                       "to reuse them):")
  assert page.lines[i + 2] == ("- arm B FA seed 0: `horizon200/kws_failing/rmah_kws_c1.0_noniid_fa_s0` was made "
                               "with other flags (then --client_lr=0.05 --local_steps=2, now --client_lr=0.1 "
                               "--local_steps=20).")
  assert "arm B FA: lr 0.1 × 20 steps;" in "\n".join(page.lines)  # seed 1's: the refused record is not read


def test_the_committed_records_read_through_the_plan(tmp_path):
  """The committed runs (docs/runs/horizon200) are the plan's, done, read as the page shows them."""
  root = os.path.join(ROOT, "docs", "runs")
  records = kws200.gather(root, _corpus(root))
  assert not records.conflicts
  finished = {}  # what the committed folders hold, by the plan's names: each must be found
  for (arm, method, seed), run in kws200.runs(root, _corpus(root)).items():
    if arm != kws200.CEILING_ARM and os.path.exists(os.path.join(run.output_dir, "final_metrics.json")):
      finished.setdefault((arm, method), []).append(seed)
  assert {k: sorted(v) for k, v in records.found.items()} == finished
  for key, seeds in {("A", "fa"): (0, 1, 2), ("A", "fa_rm"): (0, 1, 2)}.items():  # at least these, as committed
    assert set(seeds) <= set(finished[key]), key
  assert [records.found[("A", method)][seed].cell() for seed in (0, 1, 2) for method in ("fa", "fa_rm")] == [
      "63.6 (+2.0, still rising)", "61.1 (+1.8)", "64.4 (+2.8, still rising)",
      "68.5 (+3.4, still rising)", "63.9 (+2.5, still rising)", "66.3 (+4.3, still rising)"]
  # Arm B's FA seed 0 (made at 6059372): still near chance at 200 rounds (19.4, 19.2, 10.1 at 180-200).
  assert records.found[("B", "fa")][0].cell() == "16.2 (+0.8)"
  # Arm B's FA+RM seeds 0 and 1 (made at 6059372): 71.0 and 69.8 against FA's 16.2 and 41.3.
  assert records.found[("B", "fa_rm")][0].cell() == "71.0 (+2.5, still rising)"
  assert [records.found[("B", m)][1].cell() for m in ("fa", "fa_rm")] == ["41.3 (+3.8, still rising)", "69.8 (+1.9)"]
  d_b = kws200.differences(records.found, "B")
  assert [round(d_b[s], 1) for s in (0, 1)] == [54.8, 28.4]
  assert kws200.verdict_b(d_b) == kws200.HELD  # D ≥ +20 on both seeds
  d = kws200.differences(records.found, "A")
  assert [round(d[s], 1) for s in (0, 1, 2)] == [-2.6, 4.0, 2.3]
  assert kws200.verdict_a(d) == kws200.REFUTED  # mean +1.3 ± 2.0: mean ≤ +5, SE ≤ 5
  page = FakePage(str(tmp_path / "docs"))  # its figure is drawn there, not in the repository
  kws200.section(page, root)
  ceiling = [line for line in page.lines if line.startswith("The ceiling, FA on iid clients")]
  # The ceiling, made at 6059372: its window 70.0 (69.9, 70.2, 70.0 at rounds 180-200), arm A's FA 64.0.
  assert records.ceiling.cell() == "70.0 (-0.4)"
  assert len(ceiling) == 1 and "lr 0.01 × 20 steps at round 1" in ceiling[0]
  assert "peaked at 74.9 % at round 50" in ceiling[0] and "94.8 % at round 200, 24.8 points above" in ceiling[0]
  assert "is 6.0 points below it" in ceiling[0] and "against 64.6 in the paper" in ceiling[0]  # 93.0 − 28.4
  assert "FA+RM 14.0 points above FA on iid clients" in ceiling[0]
  why = [line for line in page.lines if line.startswith("**Why this differs from the paper.**")]
  assert len(why) == 1 and "reaches 64.0 % (mean over seeds 0, 1, 2)" in why[0]  # (63.6 + 64.4 + 63.9) / 3
  assert "FA rose +2.4 and FA+RM +3.2 points on average, so D moved by +0.7" in why[0]
  assert "RM does rescue it, at 30 rounds and, by this rule, at 200 (arm B above)" in why[0]
