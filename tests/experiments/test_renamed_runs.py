"""Runs made before the papers' names (``seed000_...``): a committed run folder renamed to the new
scheme is the same finished run (its record's ``--experiment_name`` is the old name), a folder
left under its old name is found and resumed there, and an old flagfile name still resolves."""

import json
import os
import subprocess
import sys

import pytest

from tff_robust import cli
from tff_robust import experiments as ex
from tff_robust.experiments.page import plan as page_plan
from tff_robust.flags import papers

from helpers.paths import ROOT

CELL = ex.rmah_cell("mnist", "c1.0_iid", "fa", tuned=False)  # the flagfiles' lr 0.1


def _finish(run: ex.Run) -> None:
  with open(run.done_path, "w") as f:
    json.dump({"test_accuracy": 0.5}, f)


def _old_record(root: str) -> str:
  """A finished run recorded as the runner recorded it before the rename; its folder."""
  old = ex.Run(ex.Cell(CELL.row, CELL.column, papers.legacy_name(CELL.cell_id), CELL.flagfiles,
                       CELL.flags, task=CELL.task), 0, root)
  assert old.experiment_name == "seed000_mnist_c1.0_iid_fa_s0"
  old.record(sys.executable)
  _finish(old)
  return old.output_dir


def test_names_translate_both_ways():
  assert papers.legacy_name("rmah_fa.cfg") == "seed000_fa.cfg"
  assert papers.legacy_name("fedavg_keras_mnist_2nn_c0.1_num_examples_s0").startswith("seed003_")
  assert papers.legacy_name("scaffold_mnist") is None
  for prefix, earlier, _ in papers.PAPERS:
    assert papers.current_name(papers.legacy_name(f"{prefix}_x")) == f"{prefix}_x"
  assert papers.current_name("fa_s0") == "fa_s0"


def test_a_renamed_run_folder_is_the_same_finished_run(tmp_path):
  root = str(tmp_path / "runs")
  old_dir = _old_record(root)
  run = ex.Run(CELL, 0, root)
  os.rename(old_dir, os.path.join(root, "rmah_mnist_c1.0_iid_fa_s0"))  # as `git mv` did
  assert run.experiment_name == "rmah_mnist_c1.0_iid_fa_s0"
  assert run.conflict() is None and run.status() == ex.DONE
  other = ex.Run(CELL, 0, root, ex.Overrides(extra_flags=("--client_lr=0.3",)))
  assert other.status() == ex.CONFLICT  # other flags still conflict


def test_a_run_left_under_its_old_name_is_found_there(tmp_path):
  root = str(tmp_path / "runs")
  old_dir = _old_record(root)
  run = ex.Run(CELL, 0, root)
  assert run.output_dir == old_dir and run.status() == ex.DONE
  assert f"--experiment_name={os.path.basename(old_dir)}" in run.flags()  # main resumes it there
  os.remove(run.done_path)
  assert run.status() == ex.PENDING  # unfinished: started again in its own folder
  os.makedirs(os.path.join(root, "rmah_mnist_c1.0_iid_fa_s0"))
  assert ex.Run(CELL, 0, root).experiment_name == "rmah_mnist_c1.0_iid_fa_s0"  # the new one wins


def test_the_committed_records_are_the_pages_finished_runs():
  """Every run of the results page's full plan is found in docs/runs (renamed there) with today's
  flags: finished, except Table 3's keyword runs, which may still be in progress (several hours of a
  2-core machine; the page prints what has finished) but never made with other flags."""
  proc = subprocess.run(["git", "ls-files", "--", "docs/runs"], cwd=ROOT, capture_output=True, text=True)
  if proc.returncode != 0 or not proc.stdout.strip():
    pytest.skip("not a git checkout: the committed runs are not known")
  root = os.path.join(ROOT, "docs", "runs")
  plan = page_plan.PLANS["full"]
  grid = page_plan.fedopt_grid_runs(plan, root)
  kws = page_plan.table3_runs(plan, root, os.path.join(root, "kws_corpus"))
  runs = (page_plan.table1_runs(plan, root) + grid + page_plan.fedopt_final_runs(
      plan, root, page_plan.fedopt_choose(grid)) + page_plan.fedex_runs(plan, root))
  assert len(runs) > 90 and len(kws) == 24  # 8 keyword cells x 3 seeds
  assert {r.experiment_name: r.status() for r in runs if r.status() != ex.DONE} == {}
  assert {r.experiment_name: r.status() for r in kws if r.status() not in (ex.DONE, ex.PENDING)} == {}
  assert not [r for r in runs + kws if papers.legacy_name(r.experiment_name) is None]


def test_an_old_flagfile_name_resolves_to_its_new_name():
  resolved = cli.resolve_flagfile("--flagfile=flags/seed000_fa.cfg")
  assert resolved == f"--flagfile={ex.flagfile_path('rmah_fa.cfg')}"


def test_main_resumes_a_renamed_run_with_the_runners_flags(tmp_path):
  """`main` binds a renamed folder (its hparams.cfg, as main wrote it, names the old
  --experiment_name) to the runner's flags for it: no difference, so the same command resumes
  or extends it."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from tff_robust.flags import definitions, record  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "runs")
  old_dir = _old_record(root)
  run = ex.Run(CELL, 0, root)
  definitions.define_flags()
  flags.FLAGS.unparse_flags()
  try:
    flags.FLAGS(["main", *ex.Run(ex.Cell(CELL.row, CELL.column, papers.legacy_name(CELL.cell_id),
                                         CELL.flagfiles, CELL.flags, task=CELL.task), 0, root).flags()])
    record.write_record(old_dir)  # what main wrote for the run under its old name
    os.rename(old_dir, run.output_dir)  # as `git mv` did
    with open(os.path.join(run.output_dir, record.RECORD)) as f:
      assert "--experiment_name=seed000_mnist_c1.0_iid_fa_s0\n" in f.read()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["main", *run.flags()])
    names = record.configuration_names(definitions.__name__)
    assert record.bind(run.output_dir, names, chosen=True) == (run.output_dir, [])
  finally:
    flags.FLAGS.unparse_flags()
