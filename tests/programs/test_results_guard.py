"""The update-norm guard's section of the results page (`tff_robust.experiments.page.guard`): the
plan's rule on constructed pairs (prevents / does not / partly, the cost judged or listed), and the
section on run folders made here in the runner's format, each at the path the plan names (so a
wrong pairing or a collapse criterion other than the page's shows), pending and running runs."""

import csv
import json
import math
import os

import pytest

from helpers.fake_page import FakePage

from tff_robust import experiments as ex
from tff_robust.experiments.page import guard
from tff_robust.experiments.runs import REPO

LN10 = math.log(10)
UP, FLAT = LN10 - 0.051, LN10 - 0.049  # L after the top-lr round: learning again (just), or collapsed (just)


def _corpus(root):
  return os.path.join(str(root), "kws_corpus")


def _record(root, folder, row, seed, guarded, accuracy=None, after=2.0, top=4, rejected=(), last_round=30,
            extra=(), parts=None):
  """A FA+RM+AH run of ``row`` at ``root/folder`` as the runner leaves it: AH samples its grid's top lr
  (0.3) at round ``top``, L is ``after`` in every later round; the guard's ``rejected`` rounds; done
  with ``accuracy`` (a fraction) at round 30, else stopped after ``last_round``. Its training loss is
  every run's from round 1 to the round before ``parts`` (default: the round after its first rejection,
  never without one), its own from there."""
  parts = parts or (rejected[0] + 1 if rejected else last_round + 1)
  flags = (guard.GUARD_FLAGS if guarded else ()) + tuple(extra)
  over = ex.Overrides(rounds=30, data_dir=_corpus(root), extra_flags=flags)
  table = ex.select(ex.build_table("rmah_table3"), ["FA+RM+AH"], [row])
  run = next(r for r in ex.plan(table, seed + 1, os.path.join(str(root), folder), over) if r.seed == seed)
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "experiment.json"), "w") as f:
    json.dump({"cell": run.cell.cell_id, "seed": seed, "flags": run.signature(), "commit": "abc"}, f)
  with open(os.path.join(run.output_dir, "metrics.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["round", "client_lr", "local_steps", "train_loss", "update_norm", "ah_loss", "ah_lr_mu",
                "rejected_round", "test_accuracy"])
    for t in range(1, last_round + 1):
      w.writerow([t, 0.3 if t == top else 0.01, 20, 1.0 + t / 100 + (0.5 if t >= parts else 0.0), 9.0 if t == top else 0.2,
                  2.0 if top is None or t < top else 2.5 if t == top else after, 0.01, int(t in rejected),
                  accuracy if accuracy is not None and t == last_round else ""])
  if accuracy is not None:
    with open(os.path.join(run.output_dir, "final_metrics.json"), "w") as f:
      json.dump({"test_accuracy": accuracy, "test_loss": 2.0}, f)
  return run.output_dir


def _arm(accuracy=None, collapsed=False, rejected=(), state=guard.DONE, last_round=30):
  return guard.Arm("x", state, accuracy, collapsed if state == guard.DONE else None, last_round, rejected)


def _pair(row, seed, g, u):
  return guard.Pair(row, seed, g, u)


NONIID, IID = (r for r, _ in guard.ROWS)


@pytest.mark.parametrize("g_noniid, g_iid, verdict", [
    (_arm(40.0), _arm(80.0), guard.PREVENTS),  # no collapse, +27 and +70
    (_arm(23.0), _arm(80.0), guard.PREVENTS),  # +10.0 exactly: "at least 10 points"
    (_arm(22.9), _arm(80.0), guard.PARTLY),  # no collapse, one gain under 10
    (_arm(40.0), _arm(80.0, collapsed=True), guard.DOES_NOT),  # a collapse, whatever the gain
    (_arm(state=guard.PENDING), _arm(10.0, collapsed=True), guard.DOES_NOT),  # decided by either collapse
    (_arm(state=guard.RUNNING, last_round=17), _arm(80.0), None),  # a seed-0 run not done: not judged
    (_arm(40.0), _arm(state=guard.OTHER_FLAGS), None),
])
def test_the_rule_on_the_seed_0_pairs(g_noniid, g_iid, verdict):
  pairs = [_pair(NONIID, 0, g_noniid, _arm(13.0, collapsed=True)), _pair(IID, 0, g_iid, _arm(10.0, collapsed=True)),
           _pair(NONIID, 1, _arm(5.0, collapsed=True), _arm(30.0))]  # a seed-1 collapse: not the rule's
  assert guard.collapse_verdict(pairs) == verdict


def test_the_cost_is_judged_on_two_collapse_free_pairs_and_listed_below_two():
  pairs = [_pair(NONIID, 0, _arm(40.0), _arm(13.0, collapsed=True)),  # seed 0: not a cost pair
           _pair(NONIID, 1, _arm(27.0), _arm(29.0)), _pair(IID, 1, _arm(70.0), _arm(71.0)),
           _pair(NONIID, 2, _arm(10.0, collapsed=True), _arm(30.0)),  # a collapse: left out
           _pair(IID, 2, _arm(state=guard.RUNNING, last_round=12), _arm(70.0))]
  assert [(p.row, p.seed) for p in guard.cost_pairs(pairs)] == [(NONIID, 1), (IID, 1)]
  judged = guard.cost(pairs)  # differences −2, −1: mean −1.5, SE 0.5
  assert (judged.n, judged.mean, judged.se, judged.verdict) == (2, -1.5, 0.5, "did not hold")
  lines = guard.verdict_lines(pairs)
  assert lines[2].startswith("**Its cost where nothing collapsed: -1.5 ± 0.5: did not hold** (the guard costs "
                             "accuracy there) — guarded − unguarded over 2 pairs (one keyword per client seed 1, "
                             "iid seed 1)")
  assert lines[3].startswith("Left out of the cost (a run collapsed): one keyword per client: guarded 10.0 % "
                             "(collapsed, rejected rounds none) vs 30.0 % unguarded, -20.0")
  one = pairs[:2] + pairs[3:]
  assert guard.cost(one) is None
  assert guard.verdict_lines(one)[2] == ("**Its cost where nothing collapsed: not judged** (fewer than 2 such "
                                         "pairs; the plan lists each): one keyword per client seed 1 -2.0.")


def test_a_guard_that_stops_training_is_named():
  assert guard.stopped_training(_arm(10.0, rejected=(4, 5, 6), last_round=6))
  assert not guard.stopped_training(_arm(10.0, rejected=(4, 6), last_round=6))
  assert not guard.stopped_training(_arm(10.0, rejected=(30,), last_round=30))
  pair = _pair(NONIID, 0, _arm(12.0, rejected=tuple(range(4, 31))), _arm(13.0, collapsed=True))
  assert "every round from its first rejection on" in guard.verdict_lines([pair])[0]


def _make(root, iid_s0_after):
  """Every run of the plan, each at the path the plan names, and decoys at the paths it does not read."""
  r = str(root)
  _record(r, "guard_kws", NONIID, 0, True, 0.40, after=UP, rejected=(4,))
  _record(r, "guard_kws", IID, 0, True, 0.80, after=iid_s0_after, rejected=(4, 13))
  _record(r, "guard_kws", NONIID, 1, True, 0.27, top=None)
  _record(r, "guard_kws", IID, 1, True, 0.70, top=None)
  _record(r, "", NONIID, 0, False, 0.13, after=FLAT)  # Table 3's runs: the unguarded arm of seeds 0-1
  _record(r, "", IID, 0, False, 0.10, after=FLAT)
  _record(r, "", NONIID, 1, False, 0.29, top=None)
  _record(r, "", IID, 1, False, 0.71, after=UP)
  _record(r, "guard_kws/seed2_guarded", NONIID, 2, True, 0.31, top=None)
  _record(r, "guard_kws/seed2_unguarded", NONIID, 2, False, 0.33, top=None)
  _record(r, "guard_kws/seed2_guarded", IID, 2, True, last_round=17, rejected=(9,))  # running
  _record(r, "guard_kws/seed2_guarded", NONIID, 0, True, 0.99, after=UP)  # decoys: --seeds=3 made these too,
  _record(r, "", NONIID, 2, False, 0.99, top=None)  # and Table 3's own seed 2 is not seed 2's unguarded arm


def _section(root):
  page = FakePage(os.path.join(str(root), "docs"))
  guard.section(page, str(root), _corpus(root))
  return page


@pytest.mark.parametrize("iid_s0_after, verdict", [(UP, guard.PREVENTS), (FLAT, guard.DOES_NOT)])
def test_the_section_pairs_the_plans_runs_and_reads_collapses_by_the_pages_criterion(tmp_path, iid_s0_after, verdict):
  _make(tmp_path, iid_s0_after)
  page = _section(tmp_path)
  collapsed = "**yes**" if verdict == guard.DOES_NOT else "no"
  assert [line for line in page.lines if line.startswith("| one keyword") or line.startswith("| iid")] == [
      "| one keyword per client | 0 | 40.0 | no | 4 | 13.0 | **yes** | 4 | +27.0 |",
      "| one keyword per client | 1 | 27.0 | no | none | 29.0 | no | 30 (all) | -2.0 |",
      "| one keyword per client | 2 | 31.0 | no | none | 33.0 | no | 30 (all) | -2.0 |",
      f"| iid | 0 | 80.0 | {collapsed} | 4, 13 | 10.0 | **yes** | 4 | +70.0 |",
      "| iid | 1 | 70.0 | no | none | 71.0 | no | 3 | -1.0 |",  # Table 3's run sampled lr 0.3 at round 4
      "| iid | 2 | running: round 17 | not yet | 9 so far | pending | no record | not yet | not yet |"]
  text = "\n".join(page.lines)
  assert f"**The collapses (seed 0): {verdict}** ({guard.VERDICT_WORDS[verdict]}) — one keyword per client: guarded 40.0 % (no collapse, " \
         "rejected rounds 4) vs 13.0 % unguarded, +27.0; iid: guarded 80.0 % (" in text
  # cost over the three collapse-free pairs of seeds 1-2: −2, −2, −1 -> −1.67 ± 0.33
  assert "**Its cost where nothing collapsed: -1.7 ± 0.3: did not hold**" in text
  assert "over 3 pairs (one keyword per client seed 1, one keyword per client seed 2, iid seed 1)" in text
  assert ("- running (not finished): `guard_kws/seed2_guarded/rmah_kws_c1.0_iid_fa_rm_ah_s2`." in page.lines)
  assert ("- not on record yet: `guard_kws/seed2_unguarded/rmah_kws_c1.0_iid_fa_rm_ah_s2`." in page.lines)
  assert text.index("> - **The guard prevents the collapses**") < text.index("| clients |")
  # Only the iid seed-1 pair parts before the guard acts (it never rejected; Table 3's run took lr 0.3 at round 4).
  assert ("Not the guard's: in the iid seed-1 pair the records differ from round 4, and the guard rejected no "
          "round, so such a pair's difference") in text
  assert text.count("Not the guard's") == 1 and "why the records part" not in text  # no machine check here
  assert "The rule's verdict above" not in text  # both seed-0 pairs show the guard acting


def test_a_pair_that_parts_before_the_guards_first_rejection_is_named_with_the_machine_check(tmp_path):
  r = str(tmp_path)
  _record(r, "guard_kws", NONIID, 0, True, 0.40, after=UP, rejected=(4,))  # parts at round 5: the guard's
  _record(r, "", NONIID, 0, False, 0.13, after=FLAT)
  _record(r, "guard_kws", IID, 0, True, 0.50, after=UP, rejected=(9,), parts=1)  # parts at round 1
  _record(r, "", IID, 0, False, 0.10, after=FLAT)
  os.makedirs(os.path.join(r, "guard_kws", "machine_check"))
  open(os.path.join(r, guard.MACHINE_CHECK), "w").close()
  pairs = guard.gather(r, _corpus(r))
  assert [(p.identical_through, p.parts_before_the_guard) for p in pairs if p.seed == 0] == [(4, False), (0, True)]
  text = "\n".join(_section(tmp_path).lines)
  assert ("Not the guard's: in the iid seed-0 pair the records differ from round 1, before the guard's first "
          "rejection (round 9), so such a pair's difference") in text
  assert ("not the guard's doing ([why the records part](runs/guard_kws/machine_check/README.md)). The rule's verdict "
          "above is given as the plan wrote it; of its seed-0 pairs, the guard acted in the one keyword per client "
          "pair only.") in text
  assert "| iid | 0 | 50.0 | no | 9 | 10.0 | **yes** | none | +40.0 |" in text
  assert "**The collapses (seed 0): prevents**" in text  # the rule's verdict is the plan's, with the caveat beside it


def test_a_pair_the_guard_never_touched_is_not_said_to_show_it_acting(tmp_path):
  r = str(tmp_path)
  _record(r, "guard_kws", NONIID, 0, True, 0.13, after=FLAT)  # no rejection: the unguarded run, round for round
  _record(r, "", NONIID, 0, False, 0.13, after=FLAT)
  _record(r, "guard_kws", IID, 0, True, 0.50, after=UP, parts=1)
  _record(r, "", IID, 0, False, 0.10, after=FLAT)
  text = "\n".join(_section(tmp_path).lines)
  assert "| one keyword per client | 0 | 13.0 | **yes** | none | 13.0 | **yes** | 30 (all) | +0.0 |" in text
  assert "of its seed-0 pairs, the guard acted in none." in text


def test_without_records_every_run_is_pending_and_nothing_is_judged(tmp_path):
  page = _section(tmp_path)  # the plan from the committed copy
  rows = [line for line in page.lines if line.startswith("| one keyword") or line.startswith("| iid")]
  assert len(rows) == 6 and all(line.count("pending") == 2 and line.endswith("| not yet |") for line in rows)
  text = "\n".join(page.lines)
  assert "**The collapses (seed 0): not judged yet** (0 of 2 guarded seed-0 runs done)" in text
  assert "**Its cost where nothing collapsed: not judged** — no seed-1 or seed-2 pair" in text
  assert ("- not on record yet: `guard_kws/rmah_kws_c1.0_iid_fa_rm_ah_s{0,1}`, `guard_kws/rmah_kws_c1.0_noniid_fa_rm_ah_s{0,1}`, "
          "`guard_kws/seed2_guarded/rmah_kws_c1.0_iid_fa_rm_ah_s2`, `guard_kws/seed2_guarded/rmah_kws_c1.0_noniid_fa_rm_ah_s2`, "
          "`guard_kws/seed2_unguarded/rmah_kws_c1.0_iid_fa_rm_ah_s2`, `guard_kws/seed2_unguarded/rmah_kws_c1.0_noniid_fa_rm_ah_s2`, "
          "`rmah_kws_c1.0_iid_fa_rm_ah_s{0,1}`, `rmah_kws_c1.0_noniid_fa_rm_ah_s{0,1}`.") in page.lines
  assert text.index("> - A run is **collapsed**") < text.index("| clients |") and page.drawn == []


def test_a_run_without_final_metrics_is_running_and_one_of_other_flags_is_not_read(tmp_path):
  r = str(tmp_path)
  _record(r, "guard_kws", NONIID, 0, True, last_round=12, rejected=(4,))
  _record(r, "", NONIID, 0, False, 0.13, after=FLAT)
  _record(r, "guard_kws", IID, 0, True, 0.8, extra=("--update_norm_guard_window=3",))  # not the plan's guard
  rows = [line for line in _section(tmp_path).lines if "| 0 |" in line]
  assert rows == ["| one keyword per client | 0 | running: round 12 | not yet | 4 so far | 13.0 | **yes** | not yet | not yet |",
                  "| iid | 0 | made with other flags | no record | no record | pending | no record | not yet | not yet |"]
  pairs = guard.gather(r, _corpus(r))
  assert guard.collapse_verdict(pairs) is None


def test_the_codes_numbers_and_folders_are_the_committed_plans():
  with open(os.path.join(REPO, "docs", "runs", guard.PLAN)) as f:
    plan = " ".join(f.read().replace("\\\n", " ").split())  # the command's continued lines joined
  for text in ("**F = 25**, window 5", "at least 10 points of test accuracy", "more than 0.05 below ln 10",
               "--rows=c1.0_noniid,c1.0_iid --methods=FA+RM+AH --seeds=2 --rounds=30",
               "--extra_flags=--update_norm_guard=25", "docs/runs/rmah_kws_c1.0_*_fa_rm_ah_s{0,1}"):
    assert text in plan, text
  assert guard.GUARD_FLAGS == ("--update_norm_guard=25",) and (guard.GAIN, guard.HORIZON) == (10.0, 30)
  assert (guard.FOLDER, guard.SEED2_GUARDED, guard.SEED2_UNGUARDED) == (
      "guard_kws", "guard_kws/seed2_guarded", "guard_kws/seed2_unguarded")
  from tff_robust.experiments.page import collapses
  assert collapses.MARGIN == 0.05
