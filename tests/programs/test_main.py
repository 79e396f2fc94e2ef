"""`python -m tff_robust.main`: flag validation, the offline default, EMNIST with FedYogi, outputs."""

import json
import os
import subprocess
import sys
import time

import pytest
from absl import flags

from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.common import run_lock
from tff_robust.flags import definitions
from tff_robust.flags import record

from helpers import data_makers, in_process
from helpers.flag_parse import parse
from helpers.paths import ROOT
from helpers.procs import live_child_workers, orphan_workers

definitions.define_flags()
FLAGS = flags.FLAGS


@pytest.mark.parametrize("args,pattern", [
    (["--server_opt=adamw"], r"--server_opt.*sgd.*sgdm.*adagrad.*adam.*yogi.*'adamw'"),
    (["--server_tau=-1"], r"--server_tau.*-1"),
    (["--client_fraction=0"], r"--client_fraction=0.0 is not valid: must be in \(0, 1\]"),
    (["--partition=dirichlet2"], r"--partition='dirichlet2'.*one_class, iid, dirichlet"),
    (["--task=nope"], r"--task='nope'.*mnist"),
    (["--local_steps=0"], r"--local_epochs=0 is not valid: must be ≥ 1 when --local_steps=0"),
    (["--server_opt=sgd", "--server_momentum=0.5"], r"--server_momentum.*sgdm"),
    (["--num_clients=3"], r"--num_clients=3.*at least 10"),
    (["--fedex", "--ah"], r"--fedex_learning_rate=.*--ah already tunes the learning rate"),
    (["--fedex", "--fedex_momentum=abc"], r"--fedex_momentum='abc' is not understood"),
    (["--fedex", "--fedex_local_epochs=1,2"], r"FedEx tunes local_epochs but --local_steps > 0"),
    (["--aggregator=mode"], r"--aggregator='mode'.*median.*trimmed_mean"),
    (["--byzantine_fraction=0.2"], r"--byzantine_fraction=0.2 is not valid: needs --byzantine_attack"),
])
def test_bad_flags_name_flag_value_and_choices(args, pattern):
  with pytest.raises(ValueError, match=pattern):
    parse(*args)


def test_enum_flags_rejected_by_absl():
  FLAGS.unparse_flags()
  with pytest.raises(flags.IllegalFlagValueError, match="client_lr_schedule=cosine.*constant.invsqrt.expdecay"):
    FLAGS(["main", "--client_lr_schedule=cosine"])
  FLAGS.unparse_flags()


def test_flags_map_to_config():
  cfg = parse("--server_opt=sgdm", "--client_lr_schedule=expdecay", "--client_lr_decay_rate=0.99",
              "--client_lr_decay_every=1", "--rm_weight=0.5", "--experiment_name=x")
  assert cfg.process.server.momentum == 0.9
  assert cfg.process.client.lr_decay_rate == 0.99
  assert cfg.process.options_of(RMConfig).weight == 0.5 and registry.find("rm").runs(cfg.process)
  assert os.path.basename(os.path.dirname(cfg.loop.output_dir)).startswith("tff_robust-")  # the user's root
  assert os.path.basename(cfg.loop.output_dir) == "x"


def run_main(*args, timeout=900):
  before = orphan_workers()
  proc = subprocess.run([sys.executable, "-m", "tff_robust.main", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  time.sleep(0.5)
  survivors = orphan_workers() - before
  assert not survivors, f"worker_binary survived the run: {survivors}"
  return proc


def test_bad_flag_fails_before_tracing(tmp_path):
  """In this process (`run_argv`): a new one would import TensorFlow and TFF only to see this exit
  (7-8 CPU-s). The command line's exit 2 through `cli.run` (absl's `app.run`, then the interpreter's
  exit with TFF imported) is a whole program in test_refusals (tune's missing data: the same
  `cli.run` and `cli.fail`); main's own start-up and exit in test_cli's default run."""
  proc = in_process.run("tff_robust.main", "--server_opt=adamw", f"--root_output_dir={tmp_path}")
  assert proc.returncode == 2
  assert "--server_opt" in proc.stderr and "adamw" in proc.stderr and "yogi" in proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
  assert not os.listdir(tmp_path)  # nothing built, nothing written


def test_aggregator_beyond_its_assumption_fails_before_tracing(tmp_path):
  """2 of 10 byzantine clients are beyond Bulyan's n ≥ 4f+3: exit 2, nothing written."""
  proc = in_process.run("tff_robust.main", "--aggregator=bulyan", "--byzantine_attack=sign_flip",
                        "--byzantine_fraction=0.2", f"--root_output_dir={tmp_path}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert ("error: --byzantine_f=2 (from --byzantine_fraction=0.2 of 10) is not valid: --aggregator=bulyan "
          "assumes n ≥ 4f+3") in proc.stderr
  assert "tolerates f ≤ 1" in proc.stderr
  assert not os.listdir(tmp_path)


@pytest.mark.slow  # the whole program, 2 rounds of 10 clients (about a minute on 2 loaded cores)
def test_krum_with_client_metrics_on_k_class_clients(tmp_path):
  out = tmp_path / "out"
  proc = run_main("--aggregator=krum", "--byzantine_f=2", "--byzantine_attack=scaled", "--byzantine_fraction=0.2",
                  "--partition=k_class", "--classes_per_client=2", "--client_metrics", "--rounds=2",
                  "--local_steps=2", "--batch_size=16", f"--root_output_dir={out}", "--experiment_name=e")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "k_class(K=2) over 10 clients" in proc.stdout
  assert "aggregator krum (f 2), no zeroing" not in proc.stdout and "aggregator krum (f 2)" in proc.stdout
  assert f"clients  {out / 'e' / 'clients.csv'} (one row per round per client)" in proc.stdout
  rows = (out / "e" / "clients.csv").read_text().strip().splitlines()
  assert rows[0] == "round,client_id,byzantine,examples,local_loss,local_accuracy,update_norm,aggregation_weight,weight_given,nonfinite"
  assert len(rows) == 1 + 2 * 10
  given = [float(r.split(",")[8]) for r in rows[1:]]
  assert sorted(given) == [0.0] * 18 + [1.0, 1.0]  # Krum: one client per round
  assert "--client_metrics" in (out / "e" / "hparams.cfg").read_text()


def test_missing_emnist_names_file(tmp_path):
  proc = in_process.run("tff_robust.main", "--task=emnist_cr", f"--data_dir={tmp_path}",
                        f"--root_output_dir={tmp_path}/o")
  assert proc.returncode == 2
  assert os.path.join(str(tmp_path), "emnist_all.sqlite") in proc.stderr


# A whole run (about 2 min on a loaded 2-core machine). The default suite keeps its parts: the task's
# round on this file in process (tests/tasks/test_task_rounds.py), and a whole run with
# --server_opt=yogi checking the same outputs (test_onramp's offered command).
@pytest.mark.slow
def test_emnist_cr_with_yogi_runs_on_tff_format_file(tmp_path):
  # 10 writers: the paper's setting (flags/presets.py) samples 10 a round.
  data_makers.make_emnist_sqlite(str(tmp_path), num_clients=10, examples_per_client=24)
  out = tmp_path / "out"
  proc = run_main("--task=emnist_cr", "--server_opt=yogi", "--server_lr=0.01", "--rounds=2",
                  "--local_steps=2", "--batch_size=8", f"--data_dir={tmp_path}",
                  f"--root_output_dir={out}", "--experiment_name=e")
  assert proc.returncode == 0, proc.stderr[-3000:]
  exp = out / "e"
  final = json.loads((exp / "final_metrics.json").read_text())
  assert 0.0 <= final["test_accuracy"] <= 1.0
  rows = (exp / "metrics.csv").read_text().strip().splitlines()
  assert rows[0].startswith("round,") and len(rows) == 3
  assert "--server_opt=yogi" in (exp / "hparams.cfg").read_text()
  assert os.listdir(exp / "tensorboard")
  assert any(n.startswith("program_state_2") for n in os.listdir(exp / "checkpoints"))


def test_busy_run_directory_fails_fast(tmp_path):
  """A second process on a run directory exits 75 before tracing and writes nothing."""
  data_makers.make_emnist_sqlite(str(tmp_path), num_clients=2, examples_per_client=8)
  exp = tmp_path / "out" / "e"
  with run_lock.hold(str(exp)):
    proc = in_process.run("tff_robust.main", "--task=emnist_cr", "--rounds=1", "--preset=none",
                          f"--data_dir={tmp_path}", f"--root_output_dir={tmp_path / 'out'}", "--experiment_name=e")
  assert proc.returncode == run_lock.EXIT_BUSY, proc.stderr[-2000:]
  assert f"{exp} is in use by another process (pid {os.getpid()})" in proc.stderr
  assert os.listdir(exp) == [run_lock.LOCK_FILE]


def test_data_manifest_written_only_when_the_task_has_one(tmp_path):
  record.write_data_manifest(str(tmp_path), None)
  assert not os.listdir(tmp_path)
  record.write_data_manifest(str(tmp_path), {"version": 2, "fingerprint": "ab"})
  assert os.listdir(tmp_path) == [record.DATA_MANIFEST]
  assert json.loads((tmp_path / record.DATA_MANIFEST).read_text()) == {"version": 2, "fingerprint": "ab"}


def test_run_on_espeak_corpus_writes_data_json(tmp_path):
  """A run on a corpus with a manifest copies it to <run>/data.json and names it in the header."""
  from tff_robust.tasks import espeak_corpus  # pylint: disable=g-import-not-at-top
  if espeak_corpus.espeak_binary() is None:
    pytest.skip("espeak-ng is not installed (apt-get install -y espeak-ng)")
  corpus = str(tmp_path / "kws")
  info = espeak_corpus.build_corpus(corpus, 4, 1, test_fraction=0.25, validation_fraction=0.25)
  before = live_child_workers()  # a whole run in this process: no TensorFlow start-up of its own
  proc = in_process.run("tff_robust.main", "--task=speech_commands", f"--data_dir={corpus}", "--num_clients=0",
                        "--rounds=1", "--local_steps=1", "--batch_size=4", f"--root_output_dir={tmp_path / 'out'}",
                        "--experiment_name=e")
  assert live_child_workers() == before  # its TFF worker (this process's child) ended with it
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads((tmp_path / "out" / "e" / record.DATA_MANIFEST).read_text()) == info.manifest
  assert f"fingerprint {info.manifest['fingerprint'][:8]}" in proc.stdout


@pytest.mark.slow
def test_offline_default_learns(tmp_path):
  """The README's first command (no flags): mnist 2NN, 10 one-class clients."""
  proc = run_main(f"--root_output_dir={tmp_path}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  final = json.loads((tmp_path / "mnist_sgd_s0" / "final_metrics.json").read_text())
  assert final["test_accuracy"] > 0.5  # chance is 0.1
  assert "round 30/30" in proc.stdout
  assert f"final    test accuracy {final['test_accuracy']:.4f}" in proc.stdout
