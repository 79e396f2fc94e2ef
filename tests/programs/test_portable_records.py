"""Run records travel with the checkout: the results page regenerated (report only) from a copy
of the repository in another folder equals the committed page, and a record that names its data
by an absolute path under another root reads as the same run."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tff_robust import experiments as ex

from helpers.paths import ROOT

FIGURES = ("results_mnist_curves.png", "results_kws_curves.png", "results_fig3.png",
           "results_kws200_curves.png")


def _tracked(*folders: str) -> list[str]:
  proc = subprocess.run(["git", "ls-files", "--", *folders], cwd=ROOT, capture_output=True, text=True)
  if proc.returncode != 0 or not proc.stdout.strip():
    pytest.skip("not a git checkout: the committed page is not known")
  return [p for p in proc.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, p))]


def test_page_regenerated_in_another_folder_equals_the_committed_one(tmp_path):
  clone = tmp_path / "elsewhere" / "tff_robust_copy"
  for rel in _tracked("docs"):
    (clone / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.join(ROOT, rel), clone / rel)
  proc = subprocess.run([sys.executable, "-m", "tff_robust.experiments.page", "--report_only",
                         f"--root={clone / 'docs' / 'runs'}", f"--docs={clone / 'docs'}"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr and "conflict" not in proc.stdout
  with open(os.path.join(ROOT, "docs", "results.md")) as f:
    assert (clone / "docs" / "results.md").read_text() == f.read()
  for name in FIGURES:
    with open(os.path.join(ROOT, "docs", name), "rb") as f:
      assert (clone / "docs" / name).read_bytes() == f.read(), name


def test_a_record_with_absolute_paths_of_another_checkout_is_the_same_run(tmp_path):
  """The committed keyword runs record ``--data_dir=<their root>/kws_corpus`` as an absolute path
  of the machine that ran them; here the same corpus under this root is the same run."""
  cell = ex.rmah_cell("kws", "c1.0_noniid", "fa")
  root = str(tmp_path / "runs")
  run = ex.Run(cell, 0, root, ex.Overrides(rounds=3, data_dir=os.path.join(root, "kws_corpus")))
  old_root = "/elsewhere/checkout/docs/runs"
  old_flags = [a.replace("$ROOT", old_root) for a in run.signature()]
  assert f"--data_dir={old_root}/kws_corpus" in old_flags
  os.makedirs(run.output_dir)
  with open(os.path.join(run.output_dir, "experiment.json"), "w") as f:
    json.dump({"flags": old_flags, "command": f"python -m tff_robust.main --flagfile=/elsewhere/checkout/"
               f"flags/rmah_common.cfg --root_output_dir={old_root}"}, f)
  with open(run.done_path, "w") as f:
    json.dump({"test_accuracy": 0.5}, f)
  assert run.conflict() is None and run.status() == ex.DONE
  assert ex.read_values(run, ex.ACCURACY) == [50.0]
  other = ex.Run(cell, 0, root, ex.Overrides(rounds=3, data_dir=str(tmp_path / "another_corpus")))
  assert other.status() == ex.CONFLICT and "--data_dir" in other.conflict()
  run.record(sys.executable)  # a new record names the corpus by its place under the root
  with open(os.path.join(run.output_dir, "experiment.json")) as f:
    assert "--data_dir=$ROOT/kws_corpus" in json.load(f)["flags"]


def test_page_records_name_the_machine_and_date_of_their_runs():
  with open(os.path.join(ROOT, "docs", "runs", "bench", "client_time.json")) as f:
    machine = json.load(f)["machine"]
  with open(os.path.join(ROOT, "docs", "results.md")) as f:
    page = f.read()
  assert f"Machine: {machine}." in page
  with open(os.path.join(ROOT, "docs", "runs", "page.json")) as f:
    assert f"on {json.load(f)['date']}." in page
