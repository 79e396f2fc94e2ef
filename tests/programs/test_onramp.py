"""A new user's first steps: bad paths and flagfile lines fail at once with one line (exit 2,
no traceback, nothing loaded), a missing data set names what runs offline with a command that
works, the default output root is the user's own, and the console says what its numbers are."""

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tff_robust import cli
from tff_robust.common import console, paths

from helpers import in_process
from helpers.flag_parse import parse, parse_main
from helpers.paths import ROOT
from helpers.procs import live_child_workers, workers_with


def _run(args, timeout=300, cwd=ROOT):
  marker = uuid.uuid4().hex
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # a user's shell
  env["TFF_ROBUST_TEST_RUN"] = marker
  proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
  assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  assert not workers_with(marker)
  return proc


def _module(module, *args, **kw):
  return _run([sys.executable, "-m", module, *args], **kw)


def _one_error_line(proc) -> str:
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  return lines[0]


@pytest.fixture()
def a_file(tmp_path):
  path = tmp_path / "a_file"
  path.write_text("not a folder")
  return path


# ---- every path flag, checked before anything loads ----------------------------------------------

@pytest.mark.parametrize("command", ["main", "tune"])
def test_root_output_dir_that_is_a_file_exits_2(tmp_path, a_file, command):
  proc = in_process.run(f"tff_robust.{command}", f"--root_output_dir={a_file}", "--rounds=1")
  line = _one_error_line(proc)
  assert f"--root_output_dir='{a_file}' is not valid: it is a file, not a directory" in line
  assert sorted(os.listdir(tmp_path)) == ["a_file"]


def test_paths_that_cannot_be_created_or_read_are_refused(tmp_path, a_file):
  """The checks `main` and `tune` make before loading (their exit 2 and one line: above)."""
  with pytest.raises(ValueError, match=f"--root_output_dir='{a_file}/runs' is not valid: {a_file} is a file, "
                                       "so the directory cannot be created"):
    parse(f"--root_output_dir={a_file}/runs")
  with pytest.raises(ValueError, match="--root_output_dir='/proc/nope' is not valid: cannot create it in /proc"):
    parse("--root_output_dir=/proc/nope")
  with pytest.raises(ValueError, match=f"--data_dir='{tmp_path / 'nowhere'}' is not valid: no such directory"):
    parse(f"--data_dir={tmp_path / 'nowhere'}", f"--root_output_dir={tmp_path / 'out'}")
  with pytest.raises(ValueError, match=f"--experiment_name='a_file' is not valid: {a_file} is a file"):
    parse("--experiment_name=a_file", f"--root_output_dir={tmp_path}")
  assert not (tmp_path / "out").exists() and sorted(os.listdir(tmp_path)) == ["a_file"]


@pytest.mark.parametrize("flag", ["--root_output_dir", "--out_dir", "--data_dir"])
def test_experiments_checks_its_paths_first(tmp_path, a_file, flag):
  value = a_file if flag != "--data_dir" else tmp_path / "nowhere"
  proc = _module("tff_robust.experiments", "--table=rmah_table1", f"--root_output_dir={tmp_path / 'r'}",
                 f"{flag}={value}", timeout=60)
  assert f"{flag}='{value}' is not valid" in _one_error_line(proc)


def test_results_page_checks_its_paths_first(tmp_path, a_file):
  proc = _run([sys.executable, "-m", "tff_robust.experiments.page", f"--root={a_file}",
               f"--docs={tmp_path / 'docs'}"], timeout=60)
  assert f"--root='{a_file}' is not valid: it is a file" in _one_error_line(proc)


# ---- flagfiles and flag checks ----------------------------------------------------------------------

def test_a_flagfile_error_names_file_and_line(tmp_path):
  flagfile = tmp_path / "mine.cfg"
  flagfile.write_text("--rounds=3\n# a comment\n--client_lr=abc\n")
  line = _one_error_line(in_process.run("tff_robust.main", f"--flagfile={flagfile}", f"--root_output_dir={tmp_path}"))
  assert "--client_lr=abc" in line and f"(set in {flagfile} line 3)" in line
  # A value the configs refuse, set in a nested flagfile; the command line's setting counts last.
  inner = tmp_path / "inner.cfg"
  inner.write_text("--server_opt=adamw\n")
  flagfile.write_text(f"--rounds=3\n--flagfile={inner}\n")
  argv = ["main", f"--flagfile={flagfile}"]
  assert cli.flag_origin("server_opt", argv=argv) == f"{inner} line 1"
  assert cli.flag_origin("server_opt", argv=argv + ["--server_opt=sgd"]) is None
  assert cli.flag_origin("rounds", argv=argv) == f"{flagfile} line 1"
  assert cli.flag_origin(text="rounds=3", argv=["main", f"--flagfile={tmp_path / 'bad.cfg'}"]) is None


def test_a_value_out_of_range_is_reported_before_what_it_needs():
  with pytest.raises(ValueError, match=r"--byzantine_fraction=2.0 is not valid: must be in \[0, 1\)"):
    parse("--byzantine_fraction=2")
  with pytest.raises(ValueError, match=r"--byzantine_fraction=0.2 is not valid: needs --byzantine_attack"):
    parse("--byzantine_fraction=0.2")


# ---- the offline on-ramp ------------------------------------------------------------------------------

def test_missing_data_names_the_offline_tasks_with_a_command_that_works(tmp_path):
  """The brief's command on a machine without EMNIST: exit 2, the file expected, and the same
  flags on the offline default task, which then runs. That one run (the default suite's only
  run of main with a non-default server optimizer) also checks what a run writes, and where
  a rerun starts after an earlier start that stopped before its first checkpoint.

  The offered command runs in this process: its words after the interpreter are main's command
  line (`run_argv`), and the interpreter is `console.python_command()`, whose commands start in a
  shell (test_cli runs the default run's plot hint, printed the same way; the cases are checked in
  test_printed_commands_start_the_interpreter_that_ran). A new process would import TensorFlow and
  TFF again (7-8 CPU-s) for what test_cli's default run already sees: main's start-up and exit."""
  out = tmp_path / "out"
  line = _one_error_line(in_process.run("tff_robust.main", "--task=emnist_cr", "--server_opt=yogi",
                                       f"--data_dir={tmp_path}", f"--root_output_dir={out}"))
  assert "emnist_all.sqlite" in line
  assert "--task=synthetic" in line and "tff_robust.tasks.espeak_corpus" in line
  offered = re.search(r"Offline, with nothing to download: (.+?) \(the default task", line).group(1)
  assert offered.endswith(f"-m tff_robust.main --task=mnist --server_opt=yogi --root_output_dir={out}"), offered
  words = shlex.split(offered)  # as a shell splits it
  interpreter = shlex.split(console.python_command())
  assert words[:len(interpreter) + 2] == [*interpreter, "-m", "tff_robust.main"], offered
  tiny = ("--rounds=1", "--local_steps=2", "--batch_size=16", "--server_lr=0.01")
  # What a start killed before its first checkpoint leaves: rounds in metrics.csv, no checkpoint.
  run = Path(parse_main("--task=mnist", "--server_opt=yogi", f"--root_output_dir={out}", *tiny)[0].loop.output_dir)
  run.mkdir(parents=True)
  (run / "metrics.csv").write_text("round,train_loss\n1,0.5\n2,0.4\n3,0.3\n")
  before = live_child_workers()
  ran = in_process.run("tff_robust.main", *words[len(interpreter) + 2:], *tiny)
  assert live_child_workers() == before  # the run's TFF worker ended with it
  assert "Traceback" not in ran.stderr + ran.stdout, ran.stderr[-3000:]
  assert ran.returncode == 0 and re.search(r"^final\s+test accuracy", ran.stdout, re.M), ran.stderr[-3000:]
  assert re.search(rf"^output\s+{re.escape(str(run))}$", ran.stdout, re.M), ran.stdout
  assert re.search(r"^start\s+round 1: no checkpoint yet \(an earlier start stopped before its first; its "
                   r"3 rounds are trained again\)$", ran.stdout, re.M), ran.stdout
  rows = (run / "metrics.csv").read_text().strip().splitlines()
  assert rows[0].startswith("round,") and [r.split(",")[0] for r in rows[1:]] == ["1"]
  assert 0.0 <= json.loads((run / "final_metrics.json").read_text())["test_accuracy"] <= 1.0
  assert "--server_opt=yogi" in (run / "hparams.cfg").read_text()
  assert os.listdir(run / "tensorboard")
  assert "program_state_1" in os.listdir(run / "checkpoints")


def test_printed_commands_start_the_interpreter_that_ran(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("UV_RUN_RECURSION_DEPTH", "VIRTUAL_ENV")}
  code = "from tff_robust.common import console; print(console.python_command())"
  plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
  assert plain.stdout.strip() in ("python", sys.executable)
  under_uv = {**env, "UV_RUN_RECURSION_DEPTH": "1", "VIRTUAL_ENV": sys.prefix}
  inside = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=under_uv, cwd=ROOT)
  assert inside.stdout.strip() == "uv run python"
  outside = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=under_uv,
                           cwd=tmp_path)
  assert outside.stdout.strip() == f"uv run --project {ROOT} python"


# ---- defaults and words -------------------------------------------------------------------------------

def test_the_default_output_root_is_the_users_own():
  root = paths.default_root()
  assert os.path.basename(root).startswith("tff_robust-") and os.path.basename(root) != "tff_robust-"
  assert parse().loop.output_dir == os.path.join(root, "mnist_sgd_s0")
  # `experiments --help` names it as the default: test_cli.test_help_exits_0_with_usage_and_no_traceback.


def test_counts_are_plural_only_when_they_are():
  assert (console.plural(1, "round"), console.plural(2, "round"), console.plural(0, "arm")) == (
      "1 round", "2 rounds", "0 arms")
  run = parse("--rounds=1", "--local_steps=1")
  assert console.describe_training(run.process, run.loop).startswith("1 round of 1 local step,")
  line = console.format_round(1, 30, {"train_loss": 0.35, "train_accuracy": 0.95, "test_loss": 0.7,
                                      "test_accuracy": 0.79})
  assert "local train loss 0.3500 acc 0.950" in line and line.endswith("| test loss 0.7000 acc 0.7900")
