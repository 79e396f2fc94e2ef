"""notebooks/quickstart.ipynb: a valid nbformat-4 notebook whose code cells run offline.

The code cells are executed with nbclient (a Jupyter kernel) when nbclient and ipykernel are
installed; otherwise they are run as one Python script (IPython's ``!`` shell lines, which only
the install branch uses, become no-ops), so the notebook is exercised either way. A check
cell is appended that tests what the notebook computed.
"""

import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from helpers.paths import ROOT
from helpers.procs import workers_with

NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")
SHELL_LINE = re.compile(r"^(\s*)!(.*)$")

# The notebook trains ROUNDS = 5 rounds (its set-up cell); the test runs it with 3, set by a cell it
# adds after that one (papermill's way): a round costs FA about 2.1 CPU-s with its evaluation and
# FA+AH 1.3, beside 7-8.5 to build and start each run (measured at load 20). FA's test accuracy by
# round (the same in each of 3 runs measured): 0.129, 0.164, 0.224, 0.303, 0.374; FA+AH's 0.127,
# 0.134, 0.147, 0.328, 0.413. After 3 rounds FA is past the check's 0.2 (chance: 0.1), and its decay
# has taken its first step (lr 0.1 -> 0.05, steps 20 -> 15 at round 3).
TEST_ROUNDS = 3
PARAMETERS = f"ROUNDS = {TEST_ROUNDS}  # the test's (the notebook's own: 5)"
NOTEBOOK_ROUNDS = "ROUNDS = 5"

# Appended to the notebook's code: what the TEST_ROUNDS rounds must have produced.
CHECK = """
fa_hist, ah_hist = histories["FA (fixed decay)"], histories["FA+AH"]
assert ROUNDS == 3 and [h["round"] for h in fa_hist] == [1, 2, 3] == [h["round"] for h in ah_hist]
# FA's fixed decay: lr 0.1 * 0.5^floor((t-1)/2), steps round(20 * 0.75^floor((t-1)/2)).
assert [round(h["client_lr"], 6) for h in fa_hist] == [0.1, 0.1, 0.05]
assert [h["local_steps"] for h in fa_hist] == [20, 20, 15]
# FA+AH samples from its grid, and the policy mean stays inside the grid's range.
assert all(any(abs(h["client_lr"] - g) < 1e-6 for g in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)) for h in ah_hist)
assert all(h["local_steps"] in (5, 10, 20, 40) for h in ah_hist)
assert all(0.001 <= h["ah_lr_mu"] <= 0.3 and 5 <= h["ah_steps_mu"] <= 40 for h in ah_hist)
assert all(0.0 <= h["test_accuracy"] <= 1.0 for h in fa_hist + ah_hist)
assert max(h["test_accuracy"] for h in fa_hist) > 0.2  # learns beyond chance (0.1)
# clients.csv as the notebook read it: the 10 clients in each of the 3 rounds, shares n_k / Σ n.
assert sorted((int(r["round"]), int(r["client_id"])) for r in clients) == [(t, k) for t in range(1, 4) for k in range(10)]
assert all(abs(sum(r["weight_given"] for r in clients if r["round"] == t) - 1.0) < 1e-5 for t in range(1, 4))
assert abs(sum(r["local_loss"] for r in clients if r["round"] == 1) / 10 - fa_hist[0]["train_loss"]) < 1e-4  # equal counts
print("NOTEBOOK CHECKS PASSED")
"""


def load():
  with open(NOTEBOOK, encoding="utf-8") as f:
    return json.load(f)


def code_cells(nb):
  return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def rounds_cell(sources: list[str]) -> int:
  """The index of the one cell that sets the notebook's own ROUNDS, after which the test's goes."""
  found = [i for i, source in enumerate(sources) if re.search(rf"^{NOTEBOOK_ROUNDS}$", source, re.M)]
  assert len(found) == 1, f"the notebook sets {NOTEBOOK_ROUNDS!r} in one cell: {found}"
  return found[0]


def with_test_rounds(sources: list[str]) -> list[str]:
  """The code cells with the test's parameter cell after the notebook's."""
  i = rounds_cell(sources) + 1
  return sources[:i] + [PARAMETERS] + sources[i:]


def as_python(source: str) -> str:
  """IPython ``!cmd`` lines -> ``pass`` (same indentation), so the cell is plain Python."""
  return "\n".join(SHELL_LINE.sub(r"\1pass  # shell: \2", line) for line in source.splitlines())


def test_notebook_structure():
  nb = load()
  assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
  assert nb["metadata"]["kernelspec"]["language"] == "python"
  ids = [c["id"] for c in nb["cells"]]
  assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)
  for cell in nb["cells"]:
    assert cell["cell_type"] in ("markdown", "code")
    assert isinstance(cell["metadata"], dict)
    assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
    if cell["cell_type"] == "code":  # committed without outputs
      assert cell["outputs"] == [] and cell["execution_count"] is None
  codes = code_cells(nb)
  assert len(codes) >= 6
  install = codes[0]
  assert "pip install -q uv" in install and "uv pip install" in install
  assert 'find_spec("tff_robust") is None' in install
  for source in codes:  # shell lines only inside the install guard
    for line in source.splitlines():
      if SHELL_LINE.match(line):
        assert source is install and line.startswith("  !"), line
    compile(as_python(source), "<cell>", "exec")
  try:
    import nbformat  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))


def _has_nbclient() -> bool:
  try:
    import ipykernel  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import nbclient  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import nbformat  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


@pytest.mark.skipif(not _has_nbclient(),
                    reason="nbclient / ipykernel / nbformat are not installed (dev dependencies to add); "
                           "test_notebook_code_runs_as_script runs the cells instead")
def test_notebook_executes_with_nbclient(tmp_path):
  import nbclient  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  marker = uuid.uuid4().hex
  nb = nbformat.reads(json.dumps(load()), as_version=4)
  nb.cells.insert(rounds_cell([c.source if c.cell_type == "code" else "" for c in nb.cells]) + 1,
                  nbformat.v4.new_code_cell(PARAMETERS))
  nb.cells.append(nbformat.v4.new_code_cell(CHECK))
  env_backup = dict(os.environ)
  os.environ.update(MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3", TFF_ROBUST_TEST_RUN=marker,
                    TMPDIR=str(tmp_path))
  try:
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
  finally:
    os.environ.clear()
    os.environ.update(env_backup)
  text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
  assert "NOTEBOOK CHECKS PASSED" in text
  assert not workers_with(marker), "a worker_binary outlived the notebook"


@pytest.mark.skipif(_has_nbclient(), reason="covered by test_notebook_executes_with_nbclient")
def test_notebook_code_runs_as_script(tmp_path):
  marker = uuid.uuid4().hex
  script = tmp_path / "quickstart.py"
  script.write_text("\n\n".join(as_python(s) for s in with_test_rounds(code_cells(load()))) + "\n" + CHECK)
  env = {**os.environ, "MPLBACKEND": "Agg", "TF_CPP_MIN_LOG_LEVEL": "3", "TFF_ROBUST_TEST_RUN": marker,
         "TMPDIR": str(tmp_path),
         "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "nothing to install" in proc.stdout
  assert proc.stdout.count(" final: ") == 2 and "NOTEBOOK CHECKS PASSED" in proc.stdout
  assert not workers_with(marker), "a worker_binary outlived the notebook"


def test_readme_says_how_to_open_the_notebook_with_the_projects_kernel(tmp_path):
  """The README's way to open the notebook interactively: the project's environment registered
  as a Jupyter kernel (ipykernel, a dev dependency), any front end (uvx jupyter-lab)."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  assert "python -m ipykernel install --user --name tff_robust" in readme
  assert "jupyter-lab notebooks/quickstart.ipynb" in readme
  proc = subprocess.run([sys.executable, "-m", "ipykernel", "install", f"--prefix={tmp_path}",
                         "--name", "tff_robust"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  with open(tmp_path / "share" / "jupyter" / "kernels" / "tff_robust" / "kernel.json") as f:
    spec = json.load(f)
  assert spec["argv"][0] == sys.executable and "ipykernel_launcher" in spec["argv"]


def test_notebook_keeps_the_console_quiet():
  """The set-up cell silences TensorFlow's C++ start-up lines and the libraries' INFO lines, as
  `python -m tff_robust.main` does."""
  setup = next(s for s in code_cells(load()) if "tff_runtime" in s and "import" in s)
  assert "console.quiet_native_logs(" in setup and "console.configure_logging(0)" in setup
  assert setup.index("console.quiet_native_logs(") < setup.index("import matplotlib")
