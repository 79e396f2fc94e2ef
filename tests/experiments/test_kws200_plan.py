"""The runner's plan of Table 3's one-keyword cell at 200 rounds (`experiments.planned`,
``--table=rmah_kws200``): its runs, folders and flags, against the shell queue's table-runner calls
that made the first runs and against the records committed from them (docs/runs/horizon200)."""

import json
import os
import shlex

import pytest

from helpers.paths import ROOT

from tff_robust.experiments import __main__ as runner
from tff_robust.experiments import planned

COMMITTED = os.path.join(ROOT, "docs", "runs", "horizon200")
CORPUS = os.path.join(ROOT, "docs", "runs", "kws_corpus")  # not in a clone: kws_corpus.json beside it
CELL = "rmah_kws_c1.0_noniid"

# The shell queue's calls of the table runner, one per (arm, methods, seeds, folder, extra flags).
QUEUE = [
    ("A", "FA", 3, "chosen", None),
    ("A", "FA+RM", 3, "chosen", None),
    ("ceiling", "FA", 1, "ceiling", None),
    ("B", "FA", 2, "failing_fa", "--client_lr=0.1 --local_steps=20"),
    ("B", "FA+RM", 2, "failing_rm", "--client_lr=0.1 --local_steps=20 --rm_weight=0.001"),
]


def _plan(root=COMMITTED, corpus=CORPUS):
  return planned.kws200_runs(root, corpus)


def test_the_plan_is_the_rules_runs_in_the_pages_folders(tmp_path):
  runs = _plan(str(tmp_path))
  expected = {("A", m, s): f"{CELL}_{m}_s{s}" for m in ("fa", "fa_rm") for s in (0, 1, 2)}
  expected[("ceiling", "fa", 0)] = "rmah_kws_c1.0_iid_fa_s0"
  expected.update({("B", m, s): f"kws_failing/{CELL}_{m}_s{s}" for m in ("fa", "fa_rm") for s in (0, 1)})
  assert {k: os.path.relpath(r.output_dir, tmp_path) for k, r in runs.items()} == expected
  assert [k[0] for k in runs] == ["A"] * 6 + ["ceiling"] + ["B"] * 4  # the order they start in
  for (arm, method, seed), run in runs.items():
    assert run.seed == seed and run.cell.column == method
    assert run.cell.row == ("c1.0_iid" if arm == "ceiling" else "c1.0_noniid")
    assert run.overrides.rounds == 200 and run.overrides.data_dir == CORPUS


def test_arm_bs_flags_are_the_rules_and_come_last():
  runs = _plan()
  assert runs[("B", "fa", 0)].overrides.extra_flags == ("--client_lr=0.1", "--local_steps=20")
  assert runs[("B", "fa_rm", 1)].overrides.extra_flags == ("--client_lr=0.1", "--local_steps=20",
                                                           "--rm_weight=0.001")
  for key, run in runs.items():
    if key[0] != "B":
      assert run.overrides.extra_flags == ()
    values = dict(a[2:].split("=", 1) for a in run.signature() if "=" in a)  # the last value of each
    if key[0] == "B":
      assert (values["client_lr"], values["local_steps"]) == ("0.1", "20")
    elif key[0] == "A":
      assert (values["client_lr"], values["local_steps"]) == ("0.05", "2")  # the cell's chosen schedule
    if key[1] == "fa_rm":
      assert values["rm_weight"] == ("0.001" if key[0] == "B" else "0.0001")
    else:
      assert "rm_weight" not in values  # RM off (the flag's default)
    assert values["rounds"] == "200"


@pytest.mark.parametrize("arm, methods, seeds, folder, extra", QUEUE)
def test_each_run_is_the_queues_command_flag_for_flag(tmp_path, arm, methods, seeds, folder, extra):
  """The queue's call of the table runner plans the same command for every run of the plan (the
  folder aside): a run made either way is the same run."""
  argv = ["--table=rmah_table3", f"--rows={'c1.0_iid' if arm == 'ceiling' else 'c1.0_noniid'}",
          f"--methods={methods}", f"--seeds={seeds}", "--rounds=200", f"--data_dir={CORPUS}",
          f"--root_output_dir={tmp_path / folder}"] + ([f"--extra_flags={extra}"] if extra else [])
  _, _, queued = runner.table_runs(runner.parse_args(argv))
  mine = {r.experiment_name: r for k, r in _plan(str(tmp_path / "study")).items() if k[0] == arm}
  assert len(queued) == seeds
  for q in queued:
    run = mine[q.experiment_name]
    strip = lambda args: [a for a in args if not a.startswith("--root_output_dir=")]
    assert strip(run.command("python")) == strip(q.command("python"))


@pytest.mark.parametrize("method", ["fa", "fa_rm"])
def test_the_committed_runs_are_the_plans_and_done(method):
  """Arm A's committed seed-0 runs: the plan's command as their run.log and experiment.json record
  it (the queue's worktree, corpus and root aside), and done by the runner's own check."""
  run = _plan()[("A", method, 0)]
  with open(os.path.join(run.output_dir, "experiment.json")) as f:
    record = json.load(f)
  with open(os.path.join(run.output_dir, "run.log")) as f:
    logged = next(line for line in f if line.startswith("$ "))[2:].split()
  recorded = shlex.split(record["command"])
  assert logged == recorded

  def norm(args):
    out = []
    for a in args[1:]:  # the interpreter aside
      name, _, value = a.partition("=")
      if name == "--flagfile":
        value = os.path.basename(value)
      elif name in ("--data_dir", "--root_output_dir"):
        value = "…"
      out.append(f"{name}={value}" if value else name)
    return out

  assert norm(recorded) == norm(run.command("python"))
  assert record["cell"] == run.cell.cell_id and record["seed"] == 0
  assert run.status() == "done"


def test_the_runner_runs_the_study_and_refuses_what_it_fixes(tmp_path, capsys):
  assert "rmah_kws200" in runner.PLANNED
  for extra in ("--seeds=2", "--rounds=30", "--methods=FA", "--extra_flags=--local_steps=5"):
    with pytest.raises(SystemExit) as e:
      runner.parse_args(["--table=rmah_kws200", f"--root_output_dir={tmp_path}", extra])
    assert e.value.code == 2
    assert f"fixes its runs' {extra.split('=')[0]}" in capsys.readouterr().err
  assert runner.main(["--table=rmah_kws200", f"--root_output_dir={tmp_path}", "--dry_run"]) == 2
  assert "needs --data_dir" in capsys.readouterr().err
  assert runner.parse_args(["--table=rmah_table3"]).seeds == 3  # a table's default is unchanged
