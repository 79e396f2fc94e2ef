"""Every JSON file the project writes is strict JSON: a non-finite number is null, never NaN."""

import json
import math
import os

import numpy as np
import pytest

from tff_robust.common import strict_json


def _strict_load(path):
  def refuse(token):
    raise ValueError(f"not strict JSON: {token}")
  with open(path) as f:
    return json.load(f, parse_constant=refuse)


def test_non_finite_numbers_are_written_as_null_and_read_back_as_nan(tmp_path):
  path = str(tmp_path / "final_metrics.json")
  strict_json.write(path, {"test_loss": float("nan"), "test_accuracy": np.float32(0.1),
                           "rows": [math.inf, -math.inf, 1.5, (2, np.float64("nan"))], "ok": True},
                    indent=2, sort_keys=True)
  loaded = _strict_load(path)
  assert loaded == {"ok": True, "rows": [None, None, 1.5, [2, None]], "test_accuracy": pytest.approx(0.1),
                    "test_loss": None}
  assert math.isnan(strict_json.number(loaded["test_loss"])) and strict_json.number(1) == 1.0
  assert os.listdir(tmp_path) == ["final_metrics.json"]  # no temporary file left


def test_a_value_json_cannot_hold_leaves_the_old_file_whole(tmp_path):
  path = str(tmp_path / "x.json")
  strict_json.write(path, {"a": 1})
  with pytest.raises(TypeError):
    strict_json.write(path, {"a": object()})
  assert _strict_load(path) == {"a": 1} and os.listdir(tmp_path) == ["x.json"]
