"""The accountant of DP-FedAvg (`simulation.privacy_accounting`): ε equals dp_accounting's own for the
same events, its relation and multipliers, δ's rule, what a run resolves and refuses, and the ε the
driver records each round."""

import json
import math
import os
import types

import dp_accounting
import numpy as np
import pytest

from tff_robust.algorithms import privacy
from tff_robust.algorithms.config import ProcessConfig, RobustConfig
from tff_robust.simulation import loop, privacy_accounting

from helpers.toy import toy_task

Relation = dp_accounting.NeighboringRelation


def reference_epsilon(event, relation, rounds, delta):
  accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
  accountant.compose(event, rounds)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize("z,n,m,sampling", [(1.1, 50, 5, "fixed"), (0.7, 10, 10, "fixed"),
                                            (1.1, 50, 5, "poisson"), (0.7, 10, 4, "unamplified")])
def test_epsilon_is_dp_accountings_own_for_the_same_event(z, n, m, sampling):
  ledger = privacy_accounting.PrivacyLedger(z, n, m, 1e-3, sampling)
  event = {"fixed": dp_accounting.SampledWithoutReplacementDpEvent(n, m, dp_accounting.GaussianDpEvent(z / 2)),
           "poisson": dp_accounting.PoissonSampledDpEvent(m / n, dp_accounting.GaussianDpEvent(z)),
           "unamplified": dp_accounting.GaussianDpEvent(z / 2)}[sampling]
  relation = Relation.ADD_OR_REMOVE_ONE if sampling == "poisson" else Relation.REPLACE_ONE
  for rounds in (1, 30):
    assert ledger.epsilon(rounds) == reference_epsilon(event, relation, rounds, 1e-3)
  assert ledger.metrics(7) == {"dp_epsilon": ledger.epsilon(7), "dp_delta": 1e-3}
  assert 0 < ledger.epsilon(1) < ledger.epsilon(7) < ledger.epsilon(30)


def test_replace_one_on_the_whole_population_is_the_gaussian_of_sensitivity_2c():
  """m = N: no amplification; one client moves the clipped sum by 2C under noise zC, so the RDP of
  one round at order α is α(2C)²/(2(zC)²) = 2α/z²."""
  z = 0.8
  ledger = privacy_accounting.PrivacyLedger(z, 10, 10, 1e-2)
  orders, rdp = ledger._one_round  # pylint: disable=protected-access
  np.testing.assert_allclose(rdp, 2 * orders / z ** 2, rtol=1e-12)
  # Sampling m < N without replacement amplifies: a lower ε than the whole population's.
  assert privacy_accounting.PrivacyLedger(z, 100, 10, 1e-2).epsilon(30) < ledger.epsilon(30)


def test_no_noise_no_rounds_and_bad_settings():
  assert privacy_accounting.PrivacyLedger(0.0, 10, 10, 0.01).epsilon(3) == math.inf
  assert privacy_accounting.PrivacyLedger(1.0, 10, 10, 0.01).epsilon(0) == 0.0
  for bad in [dict(per_round=11), dict(delta=1.0), dict(sampling="shuffled")]:
    with pytest.raises(ValueError):
      privacy_accounting.PrivacyLedger(**{**dict(noise_multiplier=1.0, num_clients=10, per_round=5,
                                                  delta=0.01), **bad})


def _task(n=10, validation=None):
  return types.SimpleNamespace(name="t", train=types.SimpleNamespace(client_ids=[str(i) for i in range(n)]),
                               validation=validation)


def _process(**dp_kwargs):
  return ProcessConfig(weighting="uniform", robust=RobustConfig(zeroing=False),
                       dp=privacy.DPConfig(**{"noise_multiplier": 0.5, "clip": 1.0, **dp_kwargs}))


def test_resolve_fills_the_cohort_and_delta_1_over_n_to_the_1_1():
  cfg = loop.LoopConfig(output_dir="/tmp/x", client_fraction=0.5)
  dp = privacy_accounting.resolve(_process(), cfg, _task(40)).dp
  assert (dp.clients_per_round, dp.num_clients, dp.delta) == (20, 40, 40 ** -1.1)
  cfg = loop.LoopConfig(output_dir="/tmp/x", clients_per_round=3)
  again = privacy_accounting.resolve(_process(delta=1e-5), cfg, _task(40))
  assert (again.dp.clients_per_round, again.dp.delta) == (3, 1e-5)
  assert privacy_accounting.resolve(again, cfg, _task(40)) == again  # idempotent
  plain = ProcessConfig()
  assert privacy_accounting.resolve(plain, cfg, _task(40)) is plain
  ledger = privacy_accounting.ledger(again.dp)
  assert (ledger.num_clients, ledger.per_round, ledger.sampling) == (40, 3, "fixed")
  assert privacy_accounting.ledger(again.dp, client_dropout_rate=0.2).sampling == "unamplified"
  assert privacy_accounting.ledger(None) is None


@pytest.mark.parametrize("loop_kwargs,process_kwargs,match", [
    (dict(divergence_factor=3.0), {}, r"--divergence_factor=3.0 is not valid: .*drawn from the clients' data"),
    ({}, dict(ah=True), r"--ah_loss_source='server' is not valid: .*--validation_fraction > 0"),
    ({}, dict(clip_quantile=0.5, noise_multiplier=1.2), r"--dp_noise_multiplier=1.2 is not valid: .*< 0.1·m = 1 "),
])
def test_resolve_refuses_what_the_run_would_leak(loop_kwargs, process_kwargs, match):
  from tff_robust.algorithms.methods.ah.options import AHConfig  # pylint: disable=g-import-not-at-top
  ah = AHConfig() if process_kwargs.pop("ah", False) else None
  proc = _process(**process_kwargs)
  proc = ProcessConfig(weighting="uniform", robust=proc.robust, dp=proc.dp, ah=ah)
  cfg = loop.LoopConfig(output_dir="/tmp/x", **loop_kwargs)
  with pytest.raises(ValueError, match=match):
    privacy_accounting.resolve(proc, cfg, _task(10))
  if ah is not None or loop_kwargs:  # a server-held validation set makes both private
    privacy_accounting.resolve(proc, cfg, _task(10, validation=object()))


def test_the_driver_records_epsilon_every_round_and_in_the_final_metrics(tff_rt, tmp_path):
  task = toy_task()
  cfg = loop.LoopConfig(output_dir=str(tmp_path), rounds=2, clients_per_round=3, rounds_per_eval=2,
                        seed=5, shuffle_buffer=64)
  driver = loop.build_training_loop(task, _process(noise_multiplier=1.0), cfg)
  result = driver.run()
  # The driver's ledger is the one of z = 1, N = 6, m = 3, δ = 6^-1.1, sampling without replacement
  # (its fields; ε of a ledger is checked against dp_accounting above): its ε, whose one-round RDP
  # it computed once (about 0.5 CPU-s), not again in a second ledger.
  ledger = driver.privacy
  assert ledger == privacy_accounting.PrivacyLedger(1.0, 6, 3, 6 ** -1.1, "fixed")
  assert [h["dp_epsilon"] for h in driver.history] == [ledger.epsilon(1), ledger.epsilon(2)]
  assert all(h["dp_delta"] == 6 ** -1.1 for h in driver.history)
  with open(os.path.join(tmp_path, "final_metrics.json")) as f:
    final = json.load(f)
  assert final["dp_epsilon"] == result["dp_epsilon"] == ledger.epsilon(2)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    assert "dp_epsilon" in f.readline().split(",")
