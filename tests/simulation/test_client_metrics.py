"""``--client_metrics``: clients.csv's rows against the round's own metrics and the aggregator's
choice, the same training with and without it, nothing of it traced when off, and resume."""

import csv
import functools
import os
import tempfile

import numpy as np
import pytest

from tff_robust.algorithms.config import ClientConfig, ProcessConfig, RobustConfig
from tff_robust.simulation import client_metrics, loop

from helpers.toy import toy_task


def read_rows(out):
  with open(os.path.join(out, client_metrics.FILE), newline="") as f:
    return list(csv.DictReader(f))


def by_round(rows):
  out = {}
  for r in rows:
    out.setdefault(int(r["round"]), []).append(r)
  return out


# ---- the writer --------------------------------------------------------------------------

def test_weight_given_is_the_share_of_the_weighted_mean_or_the_rules():
  assert client_metrics.weight_given([1.0, 3.0, 0.0], None) == [0.25, 0.75, 0.0]
  assert client_metrics.weight_given([0.0, 0.0], None) == [0.0, 0.0]
  assert client_metrics.weight_given([5.0, 1.0], np.array([0.0, 1.0], np.float32)) == [0.0, 1.0]
  assert all(np.isnan(client_metrics.weight_given([1.0, 1.0], np.array([1.0]))))


def test_writer_appends_rows_and_a_resume_drops_the_later_rounds(tmp_path):
  writer = client_metrics.ClientMetricsWriter(str(tmp_path))
  row = lambda n: dict(examples=40.0, local_loss=0.5, local_accuracy=np.nan, update_norm=n,  # noqa: E731
                       aggregation_weight=40.0, nonfinite=0.0)
  for t in (1, 2, 3):
    writer.write(t, ["4", "1"], [False, True], [row(1.5), row(2.0)], None)
  rows = read_rows(str(tmp_path))
  assert list(rows[0]) == list(client_metrics.COLUMNS)
  assert rows[1] == dict(round="1", client_id="1", byzantine="1", examples="40", local_loss="0.5",
                         local_accuracy="", update_norm="2", aggregation_weight="40", weight_given="0.5",
                         nonfinite="0")
  writer.resume_at(2)
  assert [r["round"] for r in read_rows(str(tmp_path))] == ["1", "1", "2", "2"]
  with pytest.raises(ValueError, match="round 4: 1 client reports for 2 clients"):
    writer.write(4, ["4", "1"], [False, False], [row(1.0)], None)


# ---- the driver --------------------------------------------------------------------------

def config(aggregator="mean", attack="none"):
  return ProcessConfig(client=ClientConfig(lr=0.1, local_steps=3, batch_size=16),
                       robust=RobustConfig(aggregator=aggregator, byzantine_attack=attack, zeroing=False),
                       seed=1)


def loop_config(out, rounds=2, metrics=True, fraction=0.0):
  return loop.LoopConfig(output_dir=str(out), rounds=rounds, clients_per_round=5,
                         rounds_per_eval=2, rounds_per_checkpoint=2, seed=5, shuffle_buffer=64,
                         byzantine_fraction=fraction, client_metrics=metrics)


@functools.lru_cache(maxsize=None)
def built_process(process_config, metrics, fraction):
  """The process `main`'s path (`loop.build_training_loop`) builds for a setup: (process config,
  --client_metrics, the byzantine fraction, which resolves the Krum family's f). A process holds no
  training state, so every run of a setup drives the one trace (and its first execution: 2-3
  CPU-s each)."""
  with tempfile.TemporaryDirectory() as out:
    return loop.build_training_loop(toy_task(), process_config,
                                    loop_config(out, metrics=metrics, fraction=fraction)).process


def driver_for(out, process_config, rounds=2, metrics=True, fraction=0.0):
  return loop.TrainingLoop(built_process(process_config, metrics, fraction), toy_task(),
                           loop_config(out, rounds, metrics, fraction))


def run(tmp_path, name, process_config, rounds=2, metrics=True, fraction=0.0):
  driver = driver_for(tmp_path / name, process_config, rounds, metrics, fraction)
  driver.run()
  return driver, driver.config.output_dir


def check_rows_agree_with_the_rounds_metrics(driver, out):
  rounds = by_round(read_rows(out))
  assert sorted(rounds) == [1, 2]
  for h in driver.history:
    rows = rounds[h["round"]]
    assert len(rows) == 5 and len({r["client_id"] for r in rows}) == 5
    assert {float(r["examples"]) for r in rows} == {40.0}  # 240 examples over 6 clients
    # every client trained 3 × 16 examples: the round's loss is the clients' mean
    assert np.mean([float(r["local_loss"]) for r in rows]) == pytest.approx(h["train_loss"], rel=1e-5)
    assert np.mean([float(r["local_accuracy"]) for r in rows]) == pytest.approx(h["train_accuracy"], rel=1e-5)
    assert np.mean([float(r["update_norm"]) for r in rows]) == pytest.approx(h["client_drift"], rel=1e-5)
    assert [float(r["weight_given"]) for r in rows] == pytest.approx([0.2] * 5)  # equal n_k


def test_krum_gives_all_weight_to_one_honest_client(tff_rt, tmp_path):
  _, out = run(tmp_path, "krum", config("krum", "scaled"), fraction=0.2)  # 1 of 5: f = 1, n ≥ 5
  for rows in by_round(read_rows(out)).values():
    given = [float(r["weight_given"]) for r in rows]
    assert sorted(given) == [0.0, 0.0, 0.0, 0.0, 1.0]
    attacker = [r for r in rows if r["byzantine"] == "1"]
    assert len(attacker) == 1 and float(attacker[0]["weight_given"]) == 0.0
    honest_norms = [float(r["update_norm"]) for r in rows if r["byzantine"] == "0"]
    assert float(attacker[0]["update_norm"]) > 5 * max(honest_norms)  # scaled ×10


@pytest.mark.parametrize("aggregator, attack, fraction", [("mean", "none", 0.0), ("median", "sign_flip", 0.2)])
def test_the_same_training_with_and_without_it(tff_rt, tmp_path, aggregator, attack, fraction):
  with_it, out = run(tmp_path, "on", config(aggregator, attack), metrics=True, fraction=fraction)
  without, plain_out = run(tmp_path, "off", config(aggregator, attack), metrics=False, fraction=fraction)
  assert not os.path.exists(os.path.join(plain_out, client_metrics.FILE))
  for a, b in zip(with_it.history, without.history):
    assert {k: v for k, v in a.items() if k != "round_seconds"} == \
        {k: v for k, v in b.items() if k != "round_seconds"}
  if aggregator == "mean":
    check_rows_agree_with_the_rounds_metrics(with_it, out)
  else:  # the coordinate-wise shares sum to 1 in each round
    for rows in by_round(read_rows(out)).values():
      assert sum(float(r["weight_given"]) for r in rows) == pytest.approx(1.0, abs=1e-5)


def test_nothing_of_it_is_built_when_off(tff_rt, tmp_path):
  # What the driver builds with and without it: the median runs' processes above (built here
  # when those runs were not in this worker).
  off, on = (built_process(config("median", "sign_flip"), metrics, 0.2)
             for metrics in (False, True))
  assert off.next_with_client_reports is None and on.next_with_client_reports is not None
  assert off.next.type_signature == on.next.type_signature  # the same round, no extra outputs
  assert off.initialize.type_signature == on.initialize.type_signature


def test_resume_writes_each_round_once(tff_rt, tmp_path):
  run(tmp_path, "r", config(), rounds=2)
  run(tmp_path, "r", config(), rounds=4)
  assert [int(r["round"]) for r in read_rows(str(tmp_path / "r"))] == [1] * 5 + [2] * 5 + [3] * 5 + [4] * 5
