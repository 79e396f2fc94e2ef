"""A run made before client components (commit 46b9f5b: θ^i stored as ``arr_0, arr_1, ...``,
its client report a dict of strings) resumes under them with the metrics its uninterrupted run
had. The fixture and its expected metrics come from `tests/fixtures/make_legacy_rm_run.py`."""

import json
import os
import shutil

import pytest

from tff_robust.algorithms import client_work, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.simulation import loop

from helpers import toy
from helpers.paths import TESTS

FIXTURE = os.path.join(TESTS, "fixtures", "legacy_rm_run")


def test_a_run_of_the_old_layout_resumes_with_its_metrics(tff_rt, tmp_path):
  out = str(tmp_path / "run")
  shutil.copytree(FIXTURE, out)
  with open(os.path.join(out, "expected.json")) as f:
    expected = json.load(f)
  assert sorted(expected) == ["3", "4"]
  task = toy.toy_task()
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=3, batch_size=8),
                      methods=(RMConfig(weight=0.05),), seed=3)
  p = process.build_process(spec, cfg)  # θ^i persisted: RMConfig's default
  driver = loop.TrainingLoop(p, task, loop.LoopConfig(
      output_dir=out, rounds=4, clients_per_round=3, rounds_per_eval=1, rounds_per_checkpoint=2, seed=5,
      shuffle_buffer=64))
  driver.run()
  assert [h["round"] for h in driver.history] == [3, 4]
  for row in driver.history:
    want = expected[str(row["round"])]
    assert "rm_loss_1" in want
    for key, value in want.items():
      assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-7), (row["round"], key)
