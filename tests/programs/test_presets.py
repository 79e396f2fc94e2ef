"""A task runs its paper's setting unless told otherwise (`flags/presets.py`, ``--preset``): the
flags not given come from the paper's flagfiles, the user's flags win, the tables' runs (always
under --flagfile) and the offline default are unchanged, and the header says where each value
came from."""

import json
import os
import re
import subprocess
import sys

import pytest
from absl import flags

from helpers import data_makers
from helpers.flag_parse import parse, parse_main
from helpers.paths import ROOT
from tff_robust import cli
from tff_robust.experiments import runs, tables
from tff_robust.flags import definitions, presets, record

FLAGS = flags.FLAGS
FLAGS_DIR = os.path.join(ROOT, "flags")


def _files(*names):
  return [f"--flagfile={os.path.join(FLAGS_DIR, n)}" for n in names]


def _line_of(name, text):
  with open(os.path.join(FLAGS_DIR, name)) as f:
    return [line.strip() for line in f].index(text) + 1


# ---- the setting is the paper's cell, flag for flag ----------------------------------------------

FEDOPT_CASES = [(t, opt) for t in presets.FEDOPT_TASKS for opt in presets.FEDOPT_OPTS]


@pytest.mark.parametrize("task,server_opt", FEDOPT_CASES)
def test_a_fedopt_task_runs_reddi_et_al_s_cell_for_its_optimizer(task, server_opt):
  """``--task=T --server_opt=O`` alone is the run of the cell the tables compose for (T, O)."""
  config, setting, _ = parse_main(f"--task={task}", f"--server_opt={server_opt}")
  suffix = presets.FEDOPT_OPTS[server_opt][0]
  if task in {t for t, _, _ in tables.FEDOPT_TASKS}:  # the constant-lr table's cells
    assert setting.files == tables.fedopt_cell(task, suffix).flagfiles
  assert setting.files == ("fedopt_common.cfg", f"fedopt_{task}.cfg", f"fedopt_{task}_{suffix}.cfg")
  assert config == parse(*_files(*setting.files))


def test_emnist_cr_with_yogi_is_the_papers_numbers():
  config, _, _ = parse_main("--task=emnist_cr", "--server_opt=yogi")
  loop, client, server = config.loop, config.process.client, config.process.server
  assert (loop.clients_per_round, client.batch_size, client.local_steps, client.local_epochs) == (10, 20, 0, 1)
  assert (loop.rounds, loop.rounds_per_eval) == (1500, 100)
  assert (client.lr, server.lr, server.tau) == (0.0316228, 0.00316228, 1e-4)  # 10^-1.5, 10^-2.5, 10^-4
  # Stack Overflow (no table of its own): the authors' notes, the LR client rate scaled to a
  # batch-mean loss (x100, see fedopt_stackoverflow_lr_*.cfg).
  nwp, _, _ = parse_main("--task=stackoverflow_nwp", "--server_opt=adam")
  assert (nwp.loop.clients_per_round, nwp.process.client.batch_size, nwp.process.server.lr,
          nwp.process.server.tau) == (50, 16, 0.01, 1e-5)
  lr, _, _ = parse_main("--task=stackoverflow_lr", "--server_opt=adagrad")
  assert (lr.loop.clients_per_round, lr.process.client.batch_size, lr.process.client.lr,
          lr.process.server.lr) == (10, 100, 10000.0, 10.0)


@pytest.mark.parametrize("task,key", [("speech_commands", "kws"), ("cifar10", "cifar10")])
@pytest.mark.parametrize("method_flags,ingredients", [
    ((), ("fa",)), (("--wd_mu=0.005",), ("fa", "wd")), (("--rm_weight=0.0001",), ("fa", "rm")),
    (("--ah",), ("ah",)), (("--ah", "--rm_weight=0.0001"), ("ah", "rm", "rm_ah"))])
def test_an_rmah_task_runs_that_papers_method_cell(task, key, method_flags, ingredients):
  config, setting, _ = parse_main(f"--task={task}", *method_flags)
  assert setting.files == tables.rmah_files(key, ingredients)
  assert config == parse(*_files(*setting.files), *method_flags)


# ---- the user's flags win ------------------------------------------------------------------------


def test_flags_the_user_gives_win_and_their_alternatives_are_left_alone():
  config, _, _ = parse_main("--task=emnist_cr", "--server_opt=yogi", "--client_lr=0.5", "--rounds=2",
                            "--client_fraction=0.5", "--local_steps=3")
  loop, client = config.loop, config.process.client
  assert (client.lr, loop.rounds) == (0.5, 2)
  # --client_fraction and --local_steps say what --clients_per_round and --local_epochs would:
  # the paper's 10 clients and 1 epoch are not filled in over them.
  assert (loop.clients_per_round, loop.client_fraction) == (0, 0.5)
  assert (client.local_steps, client.local_epochs) == (3, 0)
  assert (client.batch_size, config.process.server.lr) == (20, 0.00316228)


def test_auto_is_off_under_a_flagfile_and_paper_puts_it_under_one(tmp_path):
  mine = tmp_path / "mine.cfg"
  mine.write_text("--task=emnist_cr\n--server_opt=yogi\n--batch_size=8\n")
  config, setting, _ = parse_main(f"--flagfile={mine}")
  assert config == parse(f"--flagfile={mine}") and not setting.applied
  assert (config.process.client.batch_size, config.loop.clients_per_round) == (8, 0)
  config, setting, _ = parse_main(f"--flagfile={mine}", "--preset=paper")
  assert setting.applied  # the file's flags win over the paper's, the rest is the paper's
  assert (config.process.client.batch_size, config.loop.clients_per_round, config.loop.rounds) == (8, 10, 1500)


def test_preset_none_runs_the_defaults():
  config, setting, lines = parse_main("--task=emnist_cr", "--server_opt=yogi", "--preset=none")
  assert config == parse("--task=emnist_cr", "--server_opt=yogi", "--preset=none") and not setting.applied
  assert (config.loop.clients_per_round, config.process.client.batch_size) == (0, 64)
  assert lines == ["setting  your flags and the defaults (--preset=none; the task's paper setting: "
                   "Reddi et al.'s EMNIST CR with FedYogi)"]


@pytest.mark.parametrize("args", [(), ("--task=mnist", "--server_opt=yogi"), ("--task=synthetic",),
                                  ("--task=helpers.one_class_task:build",)])
def test_tasks_without_a_paper_setting_are_unchanged(args):
  """The offline default (and synthetic, plug-ins) get nothing filled and no header line."""
  config, setting, lines = parse_main(*args)
  assert config == parse(*args) and setting.flags == () and lines == []


def test_paper_on_a_task_without_a_setting_names_those_that_have_one():
  with pytest.raises(ValueError, match=r"^--preset='paper' is not valid: --task=mnist with "
                     r"--server_opt=sgd has no paper setting \(tasks with one: emnist_cr, .*cifar10 "
                     r"\(server sgd\)\); choose auto or none\.$"):
    parse_main("--preset=paper")
  _, _, lines = parse_main("--task=cifar10", "--server_opt=yogi")
  assert lines == ["setting  your flags and the defaults (cifar10's paper setting is for server sgd, not yogi)"]


def test_a_bad_preset_value_exits_2_naming_the_choices(capsys):
  try:
    with pytest.raises(SystemExit) as exited:
      cli.parse_argv(["main", "--preset=papers"], "doc", [definitions.__name__])
  finally:
    FLAGS.unparse_flags()
  assert exited.value.code == 2
  assert capsys.readouterr().err.strip() == (
      "error: flag --preset=papers: value should be one of <auto|paper|none> (see --help)")


# ---- the header, the record, errors --------------------------------------------------------------


def test_the_header_names_the_source_of_each_value():
  _, _, lines = parse_main("--task=emnist_cr", "--server_opt=yogi", "--rounds=2", "--client_fraction=0.5")
  assert lines == [
      "setting  Reddi et al.'s EMNIST CR with FedYogi: flags/fedopt_common.cfg, fedopt_emnist_cr.cfg, "
      "fedopt_emnist_cr_yogi.cfg; your flags win (--preset=none: without it)",
      "         fedopt_common.cfg: --local_steps=0 --local_epochs=1 --rounds_per_eval=100 --rounds_per_checkpoint=100",
      "         fedopt_emnist_cr.cfg: --batch_size=20",
      "         fedopt_emnist_cr_yogi.cfg: --client_lr=0.0316228 --server_lr=0.00316228 --server_tau=0.0001",
      "         your flags: --client_fraction=0.5 (paper --clients_per_round=10), --rounds=2 (paper 1500)"]


def _with_flags(args, run):
  FLAGS.unparse_flags()
  FLAGS(["main", *args])
  try:
    return run()
  finally:
    FLAGS.unparse_flags()


def test_the_record_holds_the_effective_values_so_the_same_run_resumes(tmp_path):
  """hparams.cfg records what ran, and the same configuration given as flagfiles binds to the
  same directory (the configuration hash is of the effective values)."""
  names = record.configuration_names(definitions.__name__)
  by_preset = ["--task=emnist_cr", "--server_opt=yogi", f"--root_output_dir={tmp_path}"]
  by_files = [*_files("fedopt_common.cfg", "fedopt_emnist_cr.cfg", "fedopt_emnist_cr_yogi.cfg"),
              f"--root_output_dir={tmp_path}"]
  run_dir = str(tmp_path / "emnist_cr_yogi_s0")

  def write():
    presets.apply(["main", *by_preset])
    definitions.parse()
    record.write_record(run_dir)
    return record.configuration_hash(names)
  preset_hash = _with_flags(by_preset, write)
  text = open(os.path.join(run_dir, record.RECORD)).read()
  assert "--clients_per_round=10\n" in text and "--batch_size=20\n" in text and "--local_epochs=1\n" in text
  files_hash, bound = _with_flags(by_files, lambda: (record.configuration_hash(names),
                                                    record.bind(run_dir, names, chosen=False)))
  assert preset_hash == files_hash
  assert bound == (run_dir, [])  # resumes there, no note of other flags


def test_an_error_about_a_filled_flag_names_the_papers_file_and_line():
  parse_main("--task=emnist_cr", "--server_opt=yogi")
  message = "--clients_per_round=10 is not valid: task 'emnist_cr' has 4 clients"
  line = _line_of("fedopt_common.cfg", "--clients_per_round=10")
  assert cli.with_origin(message) == (
      f"{message} (set in {os.path.join(FLAGS_DIR, 'fedopt_common.cfg')} line {line}, the task's "
      "paper setting; give the flag, or --preset=none)")
  parse_main("--task=emnist_cr", "--clients_per_round=4")
  assert cli.with_origin(message.replace("10", "4", 1)) == message.replace("10", "4", 1)


def test_the_tables_runs_are_unchanged(tmp_path):
  """Every run of every table starts with its flagfiles: main parses it as before (the
  experiment.json flag lists are the cells' own and never name --preset)."""
  for name, make in tables.TABLES.items():
    for run in runs.plan(make(), 1, str(tmp_path)):
      args = run.flags()
      assert args[0].startswith("--flagfile=") and not any("preset" in a for a in run.signature())
      try:
        expected = parse(*args)
      except ValueError as e:
        expected = str(e)
      try:
        got, setting, _ = parse_main(*args)
        assert not setting.flags, (name, args)
      except ValueError as e:
        got = str(e)
      assert got == expected, (name, args)


# ---- the design card's command, whole --------------------------------------------------------------


@pytest.mark.slow  # two whole runs of main on a 12-writer EMNIST file (~3 min on a loaded 2-core machine)
def test_the_design_cards_command_runs_the_papers_setting_and_resumes_from_flagfiles(tmp_path):
  data_makers.make_emnist_sqlite(str(tmp_path), num_clients=12, examples_per_client=20)
  out = tmp_path / "out"

  def main(*args):
    return subprocess.run([sys.executable, "-m", "tff_robust.main", *args, f"--data_dir={tmp_path}",
                           f"--root_output_dir={out}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  proc = main("--task=emnist_cr", "--server_opt=yogi", "--rounds=2")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert re.search(r"^clients  12 in all, 10 per round; 2 rounds of 1 local epoch, batch 20, client lr 0\.03162$",
                   proc.stdout, re.M), proc.stdout
  assert re.search(r"^method   server yogi \(lr 0\.003162\)", proc.stdout, re.M)
  assert re.search(r"^         your flags: --rounds=2 \(paper 1500\)$", proc.stdout, re.M)
  assert len(re.findall(r"^round \d/2 .* 10 clients ", proc.stdout, re.M)) == 2
  again = main(*_files("fedopt_common.cfg", "fedopt_emnist_cr.cfg", "fedopt_emnist_cr_yogi.cfg"), "--rounds=3")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "resumed  from round 2" in again.stdout and str(out / "emnist_cr_yogi_s0") in again.stdout
  assert json.loads((out / "emnist_cr_yogi_s0" / "final_metrics.json").read_text())["test_accuracy"] >= 0
