"""`python -m tff_robust.experiments.page --plan=reduced`: the results page end to end on offline data (one seed,
one or two rounds). Every table cell of the page holds a number, every figure exists, and a
second call starts nothing (finished runs are found). Marked slow (about 18 minutes on 2 cores):
CI runs it as its own step after the default suite (`.ci/run`).
"""

import os
import re
import subprocess
import sys
import uuid

import pytest

from tff_robust.tasks import espeak_corpus

from helpers.paths import ROOT
from helpers.procs import workers_with

pytestmark = pytest.mark.slow

FIGURES = ("results_mnist_curves.png", "results_kws_curves.png", "results_kws_clients.png", "results_fig3.png")


def _table_cells(markdown: str) -> list[str]:
  cells = []
  for line in markdown.splitlines():
    if line.startswith("|") and not set(line) <= set("|- "):
      cells += [c.strip() for c in line.strip("|").split("|")]
  return cells


@pytest.mark.timeout(3300)  # about 40 short runs, two at a time (18 min alone on 2 cores here)
@pytest.mark.skipif(espeak_corpus.espeak_binary() is None, reason="espeak-ng speaks the KWS corpus")
def test_reduced_page_fills_every_cell_and_figure(tmp_path):
  root, docs = tmp_path / "runs", tmp_path / "docs"
  cmd = [sys.executable, "-m", "tff_robust.experiments.page", "--plan=reduced", f"--root={root}",
         f"--docs={docs}", "--parallel=2"]
  marker = uuid.uuid4().hex
  env = {**os.environ, "TFF_ROBUST_TEST_RUN": marker, "TF_CPP_MIN_LOG_LEVEL": "3"}
  done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2700, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  assert not workers_with(marker), "a worker_binary outlived the page's runs"
  page = (docs / "results.md").read_text()
  for name in FIGURES:
    assert (docs / name).stat().st_size > 1000, name
    assert f"]({name})" in page
  for title in ("Seed 000 Table 1", "Seed 000 Table 3", "Fig. 3", "Seed 004", "Seed 002", "Table 4"):
    assert title in page, title
  cells = _table_cells(page)
  assert "—" not in cells, [line for line in page.splitlines() if "—" in line and line.startswith("|")]
  numbers = [c for c in cells if re.fullmatch(r"[0-9.]+( ± [0-9.]+)?( ×[0-9.]+)?", c)]
  assert len(numbers) >= 20 + 4 + 10 + 4, len(numbers)  # tables 1 and 3, seed 004's grid, study
  # A second call finds every run and the benchmarks: nothing starts again.
  again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "start " not in again.stdout and "$ " not in again.stdout, again.stdout[-2000:]
