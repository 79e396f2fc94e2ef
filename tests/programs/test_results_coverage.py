"""The results page's place for every table and figure of the RM/AH paper (`page.coverage`), its
list of runs without a recorded commit (`page.commits`), its account of AH's collapses
(`page.collapses`), Table 4's keyword row (`page.timings`) and the batch size seed 004's section
reads from the runs' records (`page.fedopt`), on constructed records."""

import csv
import json
import math
import os
import types

import pytest

from tff_robust import experiments as ex
from tff_robust.experiments.page import collapses, commits, coverage, fedopt, timings
from tff_robust.experiments.page.seeds import RMAH_TABLE4
from tff_robust.simulation.guard import UpdateNormGuard
from tff_robust.simulation.loop import LoopConfig



def test_the_index_links_every_section_by_githubs_anchor():
  assert coverage.anchor(coverage.TABLE1) == "#seed-000-table-1-mnist-5k"  # as README.md links it
  assert coverage.anchor(coverage.TABLE2) == "#seed-000-table-2-cifar-10-not-run"
  assert coverage.anchor(coverage.KWS200) == "#table-3s-one-keyword-cell-at-200-rounds"
  assert coverage.anchor(coverage.FIG3) == "#seed-000-fig-3-the-mean-μ-of-phψ-farmah-c--10"
  lines = coverage.index_lines({"c1.0_noniid": 15, "c0.5_iid": 0}, 60, 30)
  rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}
  assert set(rows) >= {"Fig. 1", "Fig. 2", "Fig. 3", "Table 1", "Table 2", "Table 3", "Table 4"}
  assert f"[C = 0.5 rows]({coverage.anchor(coverage.KWS_HALF)}): no runs on this page yet" in rows["Table 3"]
  assert "C = 0.5 rows](#table-3s-c--05-rows): 4 finished runs" in "".join(coverage.index_lines({"c0.5_iid": 4}, 60, 30))


def test_table2_says_why_it_is_not_run_and_what_would_run_it():
  lines = coverage.table2_lines()
  assert lines[0] == f"## {coverage.TABLE2}"
  text = "\n".join(lines)
  assert "python -m tff_robust.experiments --table=rmah_table2 --seeds=3 --data_dir=DIR" in text
  assert "tfds.builder('cifar10', data_dir='DIR').download_and_prepare()" in text
  assert "| 0.5 | non-iid | 33.4 ± 1.0 | 34.4 ± 0.9 | 39.8 ± 3.8 | 43.3 ± 0.8 | 19.8 ± 7.0 |" in lines
  assert ex.build_table("rmah_table2").rows  # the runner has the table the command names


def test_table4_prints_the_papers_keyword_row():
  assert RMAH_TABLE4["KWS"] == dict(fa=1.83, fa_wd=1.96, fa_rm_ah=2.03, fa_rm=2.01, fa_ah=1.85)
  cell = {"median": 3.0, "std": 0.1, "ratio_to_fa": 1.0}
  ct = {"steps": 30, "batch_size": 64, "rounds": 20, "command": "c", "tasks": {"speech_commands": {"FA": cell, "FA+WD": cell}}}
  lines = timings.table4_lines(ct, ["FA", "FA+WD"], RMAH_TABLE4, {"FA": "fa", "FA+WD": "fa_wd"})
  assert lines[-2].endswith("| 1.96 ×1.07 |") and lines[-3].endswith("| 1.83 ×1.00 |")


def _record(folder, commit):
  os.makedirs(folder)
  with open(os.path.join(folder, "experiment.json"), "w") as f:
    json.dump({"flags": []} | ({"commit": commit} if commit is not None else {}), f)
  return str(folder)


def test_runs_without_a_commit_are_listed_with_their_seeds_folded(tmp_path):
  t1 = [_record(tmp_path / f"cell_a_s{s}", None) for s in range(3)] + [_record(tmp_path / "cell_b_s0", "abc")]
  s4 = [_record(tmp_path / f"opt_s{s}", "") for s in range(2)]
  ok = [_record(tmp_path / "kws_s0", "abc"), str(tmp_path / "no_record_s0")]
  two = [_record(tmp_path / f"guard_s{s}", "abc") for s in range(2)]
  old = [_record(tmp_path / "old_s0", None)]
  lines = commits.lines({"Table 1": t1, "Seed 004": s4, "Table 3": ok, "Guard": two, "Old": old}, str(tmp_path))
  assert "- Table 1: 3 of 4: `cell_a_s{0,1,2}`." in lines
  assert "- Seed 004: both its runs." in lines
  assert "- Table 3: none (its one run names its commit)." in lines
  assert "- Guard: none (both its runs name their commit)." in lines
  assert "- Old: its one run." in lines
  assert "6 of the page's 10 runs with a record are older" in lines[2]
  _record(tmp_path / "h" / "deeper" / "x_s1", None)
  assert commits.records_under(str(tmp_path / "h")) == [str(tmp_path / "h" / "deeper" / "x_s1")]


class FakeRun:
  """What the collapse account reads of a finished run with AH."""

  def __init__(self, root, column, row, seed, lr, loss, mu, acc, extra=None):
    """``extra``: more metrics.csv columns, name -> one value a round."""
    self.cell = ex.Cell(row=row, column=column, cell_id=f"kws_{row}_{column}", flagfiles=())
    self.seed, self.output_dir = seed, os.path.join(root, f"{row}_{column}_s{seed}")
    os.makedirs(self.output_dir)
    extra = extra or {}
    with open(os.path.join(self.output_dir, "metrics.csv"), "w", newline="") as f:
      w = csv.writer(f)
      w.writerow(["round", "client_lr", "local_steps", "update_norm", "ah_loss", "ah_lr_mu", "test_accuracy",
                  *extra])
      for t, (h, l, m) in enumerate(zip(lr, loss, mu), start=1):
        w.writerow([t, h, 20, 5.0 if h == 0.3 else 0.1, l, m, "", *(v[t - 1] for v in extra.values())])
    with open(os.path.join(self.output_dir, "final_metrics.json"), "w") as f:
      json.dump({"test_accuracy": acc}, f)

  def status(self):
    return ex.DONE

  def finished(self):
    return True

  def signature(self):
    return ["--ah_lr_grid=0.001,0.01,0.3"]


def test_the_collapse_account_reads_the_round_at_the_top_lr(tmp_path):
  died = FakeRun(tmp_path, "fa_rm_ah", "c1.0_noniid", 0, [0.01, 0.01, 0.3, 0.001, 0.01, 0.01],
                 [2.0, 1.8, 2.31, 2.306, 2.305, 2.304], [0.01, 0.01, 0.001, 0.001, 0.001, 0.001], 0.10)
  lived = FakeRun(tmp_path, "fa_ah", "c1.0_noniid", 1, [0.01, 0.3, 0.001, 0.001],
                  [2.3, 2.5, 2.2, 2.1], [0.01, 0.005, 0.002, 0.001], 0.30)
  untouched = FakeRun(tmp_path, "fa_ah", "c1.0_noniid", 2, [0.01, 0.01], [2.3, 2.2], [0.01, 0.01], 0.2)
  t = collapses.top_rounds([{k: float(v) for k, v in r.items() if v} for r in
                            csv.DictReader(open(os.path.join(died.output_dir, "metrics.csv")))], 0.3)[0]
  assert (t.round, t.loss_before, t.loss_after, t.later_losses) == (3, 1.8, 2.31, (2.306, 2.305, 2.304))
  assert (t.mu_before, t.mu_after, t.mu_end) == (0.01, 0.001, 0.001) and t.collapsed
  assert t.update == 5.0 and t.median_update == pytest.approx(0.1)
  page = types.SimpleNamespace(lines=[])
  collapses.section(page, [died, lived, untouched], {"fa_rm_ah": "FA+RM+AH", "fa_ah": "FA+AH"})
  rows = [line for line in page.lines if line.startswith("| FA")]
  assert rows == [
      "| FA+AH | 1 | 2 | 0.3 | 20 | 5.00 (50×) | 50.0 | 2.300 → 2.500 | 2.100–2.200 over 2 rounds at lr 0.001–0.001 "
      "| 0.0100 → 0.0050 → 0.0010 | 30.0 | at chance 1 round, then learned again |",
      "| FA+RM+AH | 0 | 3 | 0.3 | 20 | 5.00 (50×) | 50.0 | 1.800 → 2.310 | 2.304–2.306 over 3 rounds at lr 0.001–0.01 "
      "| 0.0100 → 0.0010 → 0.0010 | 10.0 | **collapsed** |"]
  assert "In the collapse the model died in that one round: L is 2.31 when it is measured" in page.lines[0]
  assert "for the 3 rounds that follow" in page.lines[0]
  assert "After the same sample FA+AH seed 1 (μ_lr 0.0010 at its end, 30.0 % test) did not collapse" in page.lines[0]
  assert math.log(10) - collapses.MARGIN < 2.304
  assert (collapses.collapsed(died), collapses.collapsed(lived), collapses.collapsed(untouched)) == (True, False, False)


def _rows(lrs, losses, norms=None):
  norms = norms or [0.1] * len(lrs)
  return [{"round": t, "client_lr": h, "local_steps": 20, "update_norm": n, "ah_loss": l, "ah_lr_mu": 0.01}
          for t, (h, l, n) in enumerate(zip(lrs, losses, norms), start=1)]


def test_the_guards_ratio_is_the_norm_over_the_median_of_the_five_rounds_before():
  """As `UpdateNormGuard` (F, window 5) would compare round 7 of this run had it accepted every round."""
  norms = [9.0, 0.2, 0.4, 0.1, 0.3, 0.5, 6.0, 0.1]  # round 1 is outside the window of round 7
  t = collapses.read_rounds(_rows([0.01] * 6 + [0.3, 0.01], [2.0] * 8, norms), 0.3)[0]
  assert collapses.GUARD_WINDOW == LoopConfig.__dataclass_fields__["update_norm_guard_window"].default
  assert (t.round, t.guard_reference, t.guard_ratio) == (7, 0.3, "20.0")  # median(0.2, 0.4, 0.1, 0.3, 0.5)
  guard = UpdateNormGuard(factor=25.0, window=collapses.GUARD_WINDOW)
  guard.start(norms[:6])
  assert guard.reference() == t.guard_reference  # the guard's own reference for round 7
  assert t.median_update == pytest.approx(0.3)  # the run's other rounds: 9, 0.2, 0.4, 0.1, 0.3, 0.5, 0.1
  first = collapses.read_rounds(_rows([0.3, 0.3], [2.0, 2.0], [1.0, 4.0]), 0.3)[0]
  assert (first.round, first.guard_ratio) == (2, "4.0")


@pytest.mark.parametrize("losses, knocked", [
    ([2.0, 1.8, 1.6, 2.31, 2.303, 2.26], [3]),  # learned (1.6 ≤ ln 10 − 0.5), then at chance
    ([2.0, 1.8, 1.6, 2.252, 2.303, 2.25], []),  # 2.252 < ln 10 − 0.05: not back at chance
    ([2.0, 1.9, 1.81, 2.31, 2.303, 2.304], []),  # 1.81 > ln 10 − 0.5: had not learned
    ([2.0, 1.6, 2.4, 1.5, 1.4, 2.4], [2, 5]),  # two knock-outs, the second in the last round
])
def test_a_knockout_sends_a_model_that_had_learned_back_to_chance(losses, knocked):
  assert math.log(10) - collapses.LEARNED > 1.8 and math.log(10) - collapses.LEARNED < 1.81
  assert 2.252 < math.log(10) - collapses.MARGIN < 2.26
  assert collapses.knockouts(_rows([0.01] * 6, losses)) == knocked


@pytest.mark.parametrize("losses, then", [
    ([2.0, 1.6, 2.305, 2.303, 2.31, 2.302], ["**collapsed**", "dead since round 3"]),
    ([2.0, 1.6, 2.305, 2.303, 2.31, 2.2], ["at chance 3 rounds, then learned again", "at chance 1 round, then learned again"]),
    ([2.0, 1.6, 2.305, 2.303, 2.1, 2.0], ["at chance 2 rounds, then learned again", "trained on"]),
])
def test_a_knockout_below_the_grids_top_is_read_and_what_followed_it(tmp_path, losses, then):
  """iid FA+AH: a round at lr 0.1 (the grid's top is 0.3) sends the model back to chance; later the
  run samples 0.3. Dead for good, that round is no second collapse; learning again, it is read anew."""
  lrs = [0.01, 0.01, 0.1, 0.003, 0.3, 0.01]
  rounds = collapses.read_rounds(_rows(lrs, losses), 0.3)
  assert [(t.round, t.lr) for t in rounds] == [(3, 0.1), (5, 0.3)]
  assert collapses.top_rounds(_rows(lrs, losses), 0.3)[0].round == 5
  died = FakeRun(tmp_path, "fa_ah", "c1.0_iid", 0, lrs, losses, [0.01] * 6, 0.10)
  page = types.SimpleNamespace(lines=[])
  collapses.section(page, [died], {"fa_ah": "FA+AH"})
  rows = [line.split(" | ") for line in page.lines if line.startswith("| FA")]
  assert [r[2:5] for r in rows] == [["3", "0.1", "20"], ["5", "0.3", "20"]]
  assert [r[-1] for r in rows] == [f"{x} |" for x in then]
  assert (f"Below the grid's top: FA+AH (iid) seed 0 (round 3, lr 0.1 × 20 steps, ‖Δ_t‖ 1.0× the median of "
          f"the 5 rounds before it, L 1.60 → 2.31: {then[0].strip('*')}; grid top 0.3).") in page.lines[0]
  assert ("the collapse the model died in that one round" in page.lines[0]) == (then[0] == "**collapsed**")
  # The guard's criterion reads the top-lr rounds only (docs/runs/guard_kws/plan.md): round 5's.
  assert collapses.collapsed(died) == (then[1] == "dead since round 3")


def test_a_top_lr_round_whose_every_client_was_non_finite_is_read_as_no_update(tmp_path):
  """iid FA+RM+AH: a round at 0.3 × 40 where all 5 clients' updates were non-finite left the model
  as it was (‖Δ_t‖ 0, L unchanged); it is neither a collapse nor a sample the run survived."""
  lrs, losses = [0.01, 0.01, 0.3, 0.003, 0.01], [2.0, 1.4, 1.4, 1.3, 1.2]
  nonfinite = [5 if h == 0.3 else 0 for h in lrs]
  run = FakeRun(tmp_path, "fa_rm_ah", "c0.5_iid", 0, lrs, losses, [0.01, 0.01, 0.005, 0.001, 0.001], 0.71,
                extra={"num_clients": [5] * 5, "nonfinite_clients": nonfinite})
  rows = [dict(r, num_clients=5, nonfinite_clients=n) for r, n in zip(_rows(lrs, losses), nonfinite)]
  t = collapses.read_rounds(rows, 0.3)[0]
  assert (t.round, t.clients, t.nonfinite, t.discarded) == (3, 5, 5, True)
  assert (t.then(), t.guard_ratio) == ("no update: all 5 clients non-finite", "no update")
  partly = collapses.read_rounds([dict(r, nonfinite_clients=4 if r["client_lr"] == 0.3 else 0) for r in rows], 0.3)[0]
  assert not partly.discarded and partly.then() == "trained on"
  page = types.SimpleNamespace(lines=[])
  collapses.section(page, [run], {"fa_rm_ah": "FA+RM+AH"})
  cells = [line.split(" | ") for line in page.lines if line.startswith("| FA")]
  assert [c[5:7] for c in cells] == [["none", "no update"]] and cells[0][-1] == "no update: all 5 clients non-finite |"
  assert ("No update at all: FA+RM+AH (iid) seed 0 (round 3, lr 0.3 × 20 steps, all 5 clients)" in page.lines[0]
          and "did not collapse" not in page.lines[0])
  assert collapses.collapsed(run) is False


def test_seed_004_states_the_batch_its_runs_recorded(tmp_path):
  run = ex.Run(ex.build_table("rmah_table1").cells[0], 0, str(tmp_path))
  os.makedirs(run.output_dir)
  with open(run.done_path, "w") as f:
    json.dump({"test_accuracy": 0.5}, f)
  assert fedopt.batch_size([run]) == "64"  # no hparams.cfg: the flagfiles' (flags/rmah_common.cfg)
  partition = [a for a in run.signature() if a.startswith("--partition=")][-1].split("=", 1)[1]
  assert fedopt.recorded_flag(run, "partition") == partition  # no hparams.cfg: the run's flags
  with open(os.path.join(run.output_dir, "hparams.cfg"), "w") as f:
    f.write("--batch_size=48\n--client_lr=0.1\n")
  assert fedopt.recorded_flag(run, "batch_size") == "48"  # hparams.cfg holds every flag of the run
  assert fedopt.batch_size([run]) == "48"
