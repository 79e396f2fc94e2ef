"""Table 3's C = 0.5 rows on the results page (`tff_robust.experiments.page.kws_half`), on run
folders made here in the runner's format (experiment.json with the runner's flags, data.json,
final_metrics.json, metrics.csv): the numbers against hand computations, the runs the runner
counts done, unfinished or made with other flags, the missing runs and the command that makes
them, the index's link, and the same text from the same records."""

import json
import os
import shlex

import pytest

from helpers.fake_page import FakePage

from tff_robust.experiments import __main__ as runner
from tff_robust.experiments import Overrides, build_table, plan, select
from tff_robust.experiments.page import coverage, kws_half
from tff_robust.experiments.page.seeds import ORDERINGS_T3_HALF, RMAH_TABLE3
from tff_robust.experiments.runs import REPO

COMMIT = "abc1234567890def"
PRINT = "d91e78de"  # the corpus's fingerprint (data.json, kws_corpus.json)


def _corpus(root):
  return os.path.join(str(root), "kws_corpus")


def _run(root, row, method, seed, accuracy=None, last_round=30, commit=COMMIT, corpus=None, rounds=30):
  """A run folder as the runner and `python -m tff_robust.main` leave it (on ``corpus``, else the
  page's): finished when ``accuracy`` (a fraction) is given, else stopped after ``last_round``."""
  table = select(build_table("rmah_table3"), rows=[row])
  planned = plan(table, seed + 1, str(root), Overrides(rounds=rounds, data_dir=corpus or _corpus(root)))
  run = next(r for r in planned if r.experiment_name == kws_half.name(row, method, seed))
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "experiment.json"), "w") as f:
    json.dump({"cell": run.cell.cell_id, "seed": seed, "flags": run.signature(),
               "command": shlex.join(run.command("python")), "commit": commit}, f, indent=1)
  with open(os.path.join(run.output_dir, "data.json"), "w") as f:
    json.dump({"fingerprint": PRINT}, f)
  with open(os.path.join(run.output_dir, "metrics.csv"), "w") as f:
    f.write("round,train_loss,train_accuracy,test_accuracy,test_loss\n")
    for t in range(1, last_round + 1):
      test = f"{accuracy},2.0" if accuracy is not None and t == last_round else ","
      f.write(f"{t},1.5,0.5,{test}\n")
  if accuracy is not None:
    with open(os.path.join(run.output_dir, "final_metrics.json"), "w") as f:
      json.dump({"test_accuracy": accuracy, "test_loss": 2.0, "val_accuracy": accuracy, "val_loss": 2.0}, f)
  return run.output_dir


# (row, method, seed) -> final test accuracy (a fraction); None: stopped at the round given.
RUNS = {
    ("c0.5_noniid", "fa", 0): 0.12, ("c0.5_noniid", "fa", 1): 0.14,
    ("c0.5_noniid", "fa_rm", 0): 0.50, ("c0.5_noniid", "fa_rm", 1): 0.60,
    ("c0.5_noniid", "fa_ah", 0): 0.11, ("c0.5_noniid", "fa_ah", 1): 7,
    ("c0.5_noniid", "fa_rm_ah", 0): 0.10, ("c0.5_noniid", "fa_rm_ah", 1): 0.20,
    ("c0.5_iid", "fa", 0): 0.80, ("c0.5_iid", "fa", 1): 0.84,
    ("c0.5_iid", "fa_ah", 0): 12,
    ("c0.5_iid", "fa_rm_ah", 0): 0.85, ("c0.5_iid", "fa_rm_ah", 1): 0.89,
}


def _make(root, order=sorted):
  for (row, method, seed) in order(RUNS):
    value = RUNS[(row, method, seed)]
    if isinstance(value, int):
      _run(root, row, method, seed, last_round=value)
    else:
      _run(root, row, method, seed, value, commit="" if (method, seed) == ("fa_ah", 0) else COMMIT)


def _section(root, base=REPO):
  page = FakePage(os.path.join(str(root), "docs"))
  kws_half.section(page, kws_half.gather(str(root), _corpus(root)), str(root), _corpus(root), base)
  return page


def _rows(lines, first):
  return [line for line in lines if line.startswith(f"| {first} |")]


def test_the_tables_hold_the_hand_computed_numbers(tmp_path):
  _make(str(tmp_path))
  lines = _section(tmp_path).lines
  assert lines[0] == f"### {coverage.KWS_HALF}"
  # FA: 12, 14 -> 13.0 ± sd 1.41; FA+RM: 50, 60 -> 55.0 ± 7.07; FA+RM+AH 10, 20; FA+AH seed 0 only.
  accuracy, difference = _rows(lines, "one keyword per client")
  assert accuracy == ("| one keyword per client | 13.0 ± 1.41 (2) | 11.45 ± 1.7 | 55.0 ± 7.07 (2) | 60.7 ± 3.3 "
                      "| 11.0 (1) | 10.0 ± 0.3 | 15.0 ± 7.07 (2) | 74.9 ± 2.5 |")
  # D per seed: FA+RM 38, 46 -> +42.0, SE sd/√2 = 4.0; FA+AH −1 (seed 0); FA+RM+AH −2, +6 -> +2.0 ± 4.0.
  assert difference == ("| one keyword per client | +42.0 ± 4.0 (2) | +49.25 | -1.0 (1) | -1.45 "
                        "| +2.0 ± 4.0 (2) | +63.45 |")
  accuracy, difference = _rows(lines, "iid")
  assert accuracy == ("| iid | 82.0 ± 2.83 (2) | 91.4 ± 0.3 | not on record | 91.0 ± 0.2 "
                      "| unfinished: round 12 of 30 | 93.2 ± 0.4 | 87.0 ± 2.83 (2) | 94.3 ± 0.1 |")
  assert difference == "| iid | no paired seed | -0.4 | no paired seed | +1.8 | +5.0 ± 0.0 (2) | +2.9 |"
  claims = [line for line in lines if line.startswith("| FA+RM")]
  assert claims == [f"| {ORDERINGS_T3_HALF[0].sentence} | +2.00 ± 4.00: within noise |",
                    f"| {ORDERINGS_T3_HALF[1].sentence} | +42.00 ± 4.00: held |"]


def test_the_ah_runs_rounds_at_the_grids_top_are_read_as_on_the_c1_rows(tmp_path):
  """FA+AH seed 0 samples the grid's top lr (0.3, `flags/rmah_kws_ah.cfg`) in round 2 and L stays
  at ln 10 after it; FA+RM+AH seed 1 samples it and learns on (`collapses`' criterion)."""
  _make(str(tmp_path))
  header = "round,client_lr,local_steps,update_norm,ah_loss,ah_lr_mu,test_accuracy,test_loss\n"
  for (method, seed, lrs, losses) in (("fa_ah", 0, [0.01, 0.3, 0.001, 0.01], [2.2, 2.6, 2.31, 2.30]),
                                      ("fa_rm_ah", 1, [0.01, 0.3, 0.001, 0.001], [2.2, 2.5, 2.1, 1.9])):
    run_dir = os.path.join(str(tmp_path), kws_half.name("c0.5_noniid", method, seed))
    with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
      f.write(header)
      for t, (lr, loss) in enumerate(zip(lrs, losses), start=1):
        norm, test = (4.0 if lr == 0.3 else 0.5), (f"{RUNS[('c0.5_noniid', method, seed)]},2.0" if t == 4 else ",")
        f.write(f"{t},{lr},20,{norm},{loss},{0.01 / t},{test}\n")
  lines = _section(tmp_path).lines
  assert _rows(lines, "FA+AH") == ["| FA+AH | 0 | 2 | 0.3 | 20 | 4.00 (8×) | 8.0 | 2.200 → 2.600 | 2.300–2.310 over 2 rounds at "
                                   "lr 0.001–0.01 | 0.0100 → 0.0050 → 0.0025 | 11.0 | **collapsed** |"]
  assert _rows(lines, "FA+RM+AH") == ["| FA+RM+AH | 1 | 2 | 0.3 | 20 | 4.00 (8×) | 8.0 | 2.200 → 2.500 | 1.900–2.100 over 2 "
                                      "rounds at lr 0.001–0.001 | 0.0100 → 0.0050 → 0.0025 | 20.0 | at chance 1 round, then learned again |"]
  text = "\n".join(lines)
  assert "In the collapse the model died in that one round: L is 2.60 when it is measured" in text
  assert text.index("| FA+RM beats FA") < text.index("**AH's collapses, round by round.**") < text.index("**Horizon")


def test_missing_runs_are_named_with_the_command_that_makes_them(tmp_path):
  _make(str(tmp_path))
  lines = _section(tmp_path).lines
  assert "**Runs missing** (of seeds 0 and 1, 30 rounds):" in lines
  assert "- one keyword per client: FA+AH seed 1 unfinished (round 7 of 30)." in lines
  assert ("- iid: FA+RM seeds 0, 1 not on record; FA+AH seed 0 unfinished (round 12 of 30), seed 1 not on record."
          in lines)
  command = lines[lines.index("```sh") + 1]
  assert command == ("python -m tff_robust.experiments --table=rmah_table3 --rows=c0.5_noniid,c0.5_iid "
                     f"--methods=FA,FA+RM,FA+AH,FA+RM+AH --seeds=2 --rounds=30 --data_dir={tmp_path}/kws_corpus "
                     f"--root_output_dir={tmp_path}")  # not under the page's checkout: absolute
  assert not any(line.startswith("Made with other flags") for line in lines)
  assert lines.index("```sh") < lines.index("| clients | FA | paper | FA+RM | paper | FA+AH | paper | FA+RM+AH | paper |")


def test_the_command_makes_exactly_the_runs_the_section_reads(tmp_path):
  """Run from the page's checkout, the command plans the runs `kws_half.runs` reads, flag for flag."""
  checkout = tmp_path / "copy"
  root = str(checkout / "docs" / "runs")
  command = kws_half.command(root, _corpus(root), str(checkout))
  assert command.endswith("--data_dir=docs/runs/kws_corpus --root_output_dir=docs/runs")
  args = runner.parse_args(shlex.split(command)[3:])
  table = select(build_table(args.table), args.methods.split(","), args.rows.split(","))
  made = plan(table, args.seeds, str(checkout / args.root_output_dir),
              Overrides(args.rounds, data_dir=str(checkout / args.data_dir)))
  read = kws_half.runs(root, _corpus(root))
  assert sorted(r.flags() for r in made) == sorted(r.flags() for r in read)
  assert {r.experiment_name for r in read} == {kws_half.name(row, m, s) for row, _ in kws_half.ROWS
                                               for m, _ in kws_half.METHODS for s in kws_half.SEEDS}


def test_horizon_schedule_and_commits_are_the_records(tmp_path):
  _make(str(tmp_path))
  text = "\n".join(_section(tmp_path).lines)
  assert ("**Horizon: 30 rounds**, as the finished runs record it (`--rounds`), against the flagfiles' 200, whose "
          "decay schedule of FA's lr and steps acts at rounds 50, 100, 150") in text
  assert ("lr 0.01 × 20 steps for one keyword per client FA+AH (AH's start), one keyword per client FA+RM+AH "
          "(AH's start), iid FA, iid FA+AH (AH's start), iid FA+RM+AH (AH's start); lr 0.05 × 2 steps for "
          "one keyword per client FA, one keyword per client FA+RM.") in text
  assert ("Each run's recorded commit: commit abc1234567: `rmah_kws_c0.5_noniid_fa_s{0,1}`, "
          "`rmah_kws_c0.5_noniid_fa_rm_s{0,1}`, `rmah_kws_c0.5_noniid_fa_ah_s1`, `rmah_kws_c0.5_noniid_fa_rm_ah_s{0,1}`, "
          "`rmah_kws_c0.5_iid_fa_s{0,1}`, `rmah_kws_c0.5_iid_fa_ah_s0`, `rmah_kws_c0.5_iid_fa_rm_ah_s{0,1}`; "
          "no commit recorded: `rmah_kws_c0.5_noniid_fa_ah_s0`.") in text
  records = kws_half.gather(str(tmp_path), _corpus(tmp_path))
  assert kws_half.finished_by_row(records) == {"c0.5_noniid": 7, "c0.5_iid": 4}
  assert len(kws_half.finished_dirs(records)) == 11


def test_without_records_the_section_says_so_and_gives_the_command(tmp_path):
  os.makedirs(tmp_path / "rmah_kws_c1.0_noniid_fa_s0")  # another row's run: not one of these
  _run(str(tmp_path), "c0.5_noniid", "fa_wd", 0, 0.5)  # a method the section does not show
  page = _section(tmp_path)
  assert page.lines[2].startswith("Half the ten clients a round (C = 0.5)")
  for text in ("FA 11.45 ± 1.7, FA+RM 60.7 ± 3.3, FA+RM+AH 74.9 ± 2.5", "validation-chosen schedule, lr 0.05 × 2 steps",
               "the iid row keeps the flagfiles' 0.01 × 20, AH starts at 0.01 × 20",
               "The runs are 30 rounds; the flagfiles' own horizon is 200"):
    assert text in page.lines[2], text
  assert page.lines[4] == ("**Runs pending**: none of the 16 runs of these rows (FA, FA+RM, FA+AH, FA+RM+AH on "
                           "one-keyword and on iid clients, seeds 0 and 1, 30 rounds) is on record in the page's "
                           "runs root yet.")
  assert page.lines[9] == ("python -m tff_robust.experiments --table=rmah_table3 --rows=c0.5_noniid,c0.5_iid "
                           "--methods=FA,FA+RM,FA+AH,FA+RM+AH --seeds=2 --rounds=30 "
                           f"--data_dir={tmp_path}/kws_corpus --root_output_dir={tmp_path}")
  assert not any(line.startswith("|") for line in page.lines) and page.drawn == []
  records = kws_half.gather(str(tmp_path), _corpus(tmp_path))
  assert kws_half.finished_by_row(records) == {} and records.conflicts == {}
  absent = str(tmp_path / "absent")
  assert kws_half.finished_dirs(kws_half.gather(absent, _corpus(absent))) == []


def test_a_checkouts_runs_root_is_named_from_the_checkout_so_every_copy_reads_the_same(tmp_path):
  for checkout in (REPO, str(tmp_path / "elsewhere" / "copy")):
    root = os.path.join(checkout, "docs", "runs")
    assert kws_half.command(root, _corpus(root), checkout).endswith(
        "--data_dir=docs/runs/kws_corpus --root_output_dir=docs/runs")
  root = str(tmp_path / "runs")
  assert kws_half.command(root, "/data/kws", str(tmp_path / "copy")).endswith(
      f"--data_dir=/data/kws --root_output_dir={root}")  # not under the checkout: absolute


def test_the_same_records_give_the_same_section(tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  _make(str(a))
  _make(str(b), order=lambda keys: sorted(keys, reverse=True))
  first, again = _section(a).lines, _section(a).lines
  assert first == again
  assert [line.replace(str(b), str(a)) for line in _section(b).lines] == first


@pytest.mark.parametrize("claim, method", list(zip(ORDERINGS_T3_HALF, ("fa_rm_ah", "fa_rm"))))
def test_the_claims_quote_the_papers_row(claim, method):
  paper = RMAH_TABLE3["c0.5_noniid"]
  assert claim.rows == ("c0.5_noniid",) and claim.parts == ((method, "fa", 0.0),)
  assert f"(the paper: {paper[method].split(' ± ')[0]} vs {paper['fa'].split(' ± ')[0]})" in claim.sentence


def test_the_index_links_the_section():
  assert coverage.anchor(coverage.KWS_HALF) == "#table-3s-c--05-rows"
  line = "".join(coverage.index_lines({"c0.5_noniid": 3, "c0.5_iid": 2, "c1.0_iid": 6}, 60, 30))
  assert "[C = 0.5 rows](#table-3s-c--05-rows): 5 finished runs" in line
  assert "[C = 0.5 rows](#table-3s-c--05-rows): 1 finished run |" in "".join(coverage.index_lines({"c0.5_iid": 1}, 60, 30))


def test_a_run_on_another_copy_of_the_corpus_is_read_by_its_fingerprint(tmp_path):
  """A run recorded on a corpus elsewhere (a machine path) is the same run on the page's corpus when
  its data.json states the fingerprint the page records for it (kws_corpus.json beside the corpus,
  which is not at hand); without that record it is made with other flags, named and not read."""
  made = _run(str(tmp_path), "c0.5_noniid", "fa", 0, 0.139, corpus="/work/kws/kws_corpus")
  with open(os.path.join(made, "experiment.json")) as f:
    assert "--data_dir=/work/kws/kws_corpus" in json.load(f)["flags"]
  lines = _section(tmp_path).lines  # no record of the page's corpus: the path decides
  assert "- one keyword per client: FA seed 0 made with other flags, seed 1 not on record;" in "\n".join(lines)
  assert ("Made with other flags than the command's (not read; the runner refuses to reuse them, so remove them "
          "first): `rmah_kws_c0.5_noniid_fa_s0`.") in lines
  with open(_corpus(tmp_path) + ".json", "w") as f:
    json.dump({"test_clips": 3000, "fingerprint": PRINT}, f)
  lines = _section(tmp_path).lines
  assert _rows(lines, "one keyword per client")[0].startswith("| one keyword per client | 13.9 (1) |")
  assert "- one keyword per client: FA seed 1 not on record; FA+RM seeds 0, 1 not on record;" in "\n".join(lines)
  assert "Made with other flags" not in "\n".join(lines)
  assert lines[lines.index("```sh") + 1].endswith(f"--data_dir={tmp_path}/kws_corpus --root_output_dir={tmp_path}")


def test_the_runners_state_decides_a_run_of_other_rounds(tmp_path):
  """A finished run of more rounds is a conflict (named, not read); one of fewer is unfinished (the
  runner extends it)."""
  _make(str(tmp_path))
  longer, shorter = kws_half.name("c0.5_iid", "fa", 1), kws_half.name("c0.5_iid", "fa_rm", 0)
  _run(str(tmp_path), "c0.5_iid", "fa_rm", 0, 0.9, last_round=20, rounds=20)
  path = tmp_path / longer / "experiment.json"
  record = json.loads(path.read_text())
  record["flags"].append("--rounds=60")
  path.write_text(json.dumps(record))
  lines = _section(tmp_path).lines
  text = "\n".join(lines)
  assert "**Horizon: 30 rounds**" in text
  assert "- iid: FA seed 1 made with other flags; FA+RM seed 0 unfinished (round 20 of 20), seed 1 not on record;" in text
  assert [line for line in lines if line.startswith("Made with other flags")] == [
      f"Made with other flags than the command's (not read; the runner refuses to reuse them, so remove them "
      f"first): `{longer}`."]  # the shorter run is not: the runner extends it
  assert f"`{shorter}`" in text  # its commit, with every run's
  assert _rows(lines, "iid")[0].startswith("| iid | 80.0 (1) | 91.4 ± 0.3 | unfinished: round 20 of 20 |")
  assert kws_half.finished_by_row(kws_half.gather(str(tmp_path), _corpus(tmp_path))) == {"c0.5_noniid": 7,
                                                                                          "c0.5_iid": 3}
