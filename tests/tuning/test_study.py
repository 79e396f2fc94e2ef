"""The tuning study's driver (`tff_robust.tuning.study`): RS and SHA over arms, Optuna storage, resume."""

import csv
import math
import os
import types

import optuna
import pytest

from tff_robust.tuning import sha
from tff_robust.tuning import study


def arm_loss(params: dict, rounds: int) -> float:
  """A toy landscape: best at server lr 1, better with more rounds."""
  return abs(math.log10(params["server_lr"])) + 1.0 / rounds + 0.01 * params["server_momentum"]


class FakeRunner:
  """Records what the study asks for; optionally crashes after ``crash_after`` trainings."""

  def __init__(self, crash_after=None):
    self.trained: list[tuple[str, int, int]] = []
    self.evaluated: list[tuple[str, int, int]] = []
    self.released: list[tuple[str, int, int]] = []
    self.crash_after = crash_after

  def train(self, arm, rounds):
    if self.crash_after is not None and len(self.trained) >= self.crash_after:
      raise KeyboardInterrupt("simulated crash")
    self.trained.append((arm.method, arm.number, rounds))
    return arm_loss(arm.params, rounds)

  def evaluate(self, arm, rounds):
    self.evaluated.append((arm.method, arm.number, rounds))
    return {"global_accuracy": 0.5, "global_loss": 1.0, "refine_accuracy": 0.75, "refine_loss": 0.5}

  def release(self, arm):
    assert not any(n == arm.number and m == arm.method for m, n, _ in self.released)
    self.released.append((arm.method, arm.number, len(self.trained)))


def config(tmp_path, **kw):
  kw.setdefault("methods", ("rs", "sha"))
  return study.StudyConfig(study_dir=str(tmp_path / "study"), rs_arms=4, rs_rounds=9, sha_arms=9,
                           sha_eta=3, sha_min_rounds=1, sha_max_rounds=9, **kw)


@pytest.fixture(scope="module")
def full_study(tmp_path_factory):
  """One uninterrupted study of every method (RS, SHA, RS+FedEx, SHA+FedEx) with a fake runner.
  Each method runs in turn on its own Optuna study and an arm's draw depends only on (seed, rs|sha,
  index), so each method's trainings, arms and result are those of a study of that method alone:
  the tests below read their method's part (opening a study file and running a method cost about
  0.5-1 CPU-s each; five studies were run before)."""
  cfg = config(tmp_path_factory.mktemp("full"), methods=study.METHODS)
  runner = FakeRunner()
  results = study.run_study(cfg, runner)
  return types.SimpleNamespace(cfg=cfg, runner=runner, results=results)


def _of(method, records):
  return [r for r in records if r[0] == method]


def test_sha_follows_its_schedule_and_promotes_the_best(full_study):
  cfg, runner = full_study.cfg, full_study.runner
  result = full_study.results[cfg.methods.index("sha")]
  assert result.method == "sha"
  trained = _of("sha", runner.trained)
  schedule = sha.sha_schedule(9, 3, 1, 9)
  assert [(r.num_arms, r.budget_rounds) for r in schedule] == [(9, 1), (3, 3), (1, 9)]
  # Rung by rung: n_s arms, each trained to the rung's cumulative budget.
  by_rung = [[n for _, n, r in trained if r == rung.budget_rounds] for rung in schedule]
  assert [len(arms) for arms in by_rung] == [9, 3, 1]
  s = optuna.load_study(study_name="sha", storage=study._storage_url(cfg.study_dir))
  params = {t.number: t.params for t in s.trials}
  for prev, nxt in zip(by_rung, by_rung[1:]):
    ranked = sorted(prev, key=lambda n: arm_loss(params[n], 1))  # same order at every budget
    assert sorted(nxt) == sorted(ranked[:len(nxt)])
  best = min(params, key=lambda n: arm_loss(params[n], 9))
  assert result.arm == best == by_rung[-1][0]
  assert result.val_loss == pytest.approx(arm_loss(params[best], 9))
  assert result.rounds == sha.total_rounds(schedule) == 9 * 1 + 3 * 2 + 1 * 6
  states = {t.number: t.state for t in s.trials}
  assert states[best] == optuna.trial.TrialState.COMPLETE
  assert sum(st == optuna.trial.TrialState.PRUNED for st in states.values()) == 8
  assert s.trials[best].intermediate_values == {1: pytest.approx(arm_loss(params[best], 1)),
                                                3: pytest.approx(arm_loss(params[best], 3)),
                                                9: pytest.approx(arm_loss(params[best], 9))}
  assert _of("sha", runner.evaluated) == [("sha", best, 9)]
  # Each arm is released once, as soon as the rung it was last trained in ends (positions in the
  # whole study's list of trainings, of which SHA's are one stretch).
  released = _of("sha", runner.released)
  assert sorted(n for _, n, _ in released) == sorted(params)
  for _, n, after in released:
    last_budget = max(r for _, m, r in trained if m == n)
    rung_end = 1 + max(i for i, (method, _, r) in enumerate(runner.trained)
                       if method == "sha" and r == last_budget)
    assert after == rung_end


def test_random_search_trains_every_arm_fully_and_picks_the_lowest_loss(full_study):
  cfg, runner = full_study.cfg, full_study.runner
  result = full_study.results[cfg.methods.index("rs")]
  assert result.method == "rs"
  assert sorted(_of("rs", runner.trained)) == [("rs", n, 9) for n in range(4)]
  s = optuna.load_study(study_name="rs", storage=study._storage_url(cfg.study_dir))
  losses = {t.number: arm_loss(t.params, 9) for t in s.trials}
  assert result.arm == min(losses, key=losses.get)
  assert result.rounds == 36


def test_arms_are_distinct_and_shared_between_a_method_and_its_fedex_variant(full_study):
  cfg = full_study.cfg
  url = study._storage_url(cfg.study_dir)
  params = {m: [t.params for t in optuna.load_study(study_name=m, storage=url).trials]
            for m in cfg.methods}
  assert params["rs"] == params["rs_fedex"]
  assert params["sha"] == params["sha_fedex"]
  lrs = [p["server_lr"] for p in params["rs"]] + [p["server_lr"] for p in params["sha"]]
  assert len(set(lrs)) == len(lrs)  # RS and SHA draw their own arms
  for p in params["rs"] + params["sha"]:
    assert 0.1 <= p["server_lr"] <= 10.0 and p["server_momentum"] in (0.0, 0.9)
    assert 0.95 <= p["server_lr_decay"] <= 1.0


def test_a_restarted_study_trains_only_what_is_missing(tmp_path, full_study):
  cfg = config(tmp_path)  # RS and SHA
  # The uninterrupted study of these methods: their part of the full one (see `full_study`).
  uninterrupted = [t for t in full_study.runner.trained if t[0] in cfg.methods]
  expected = [r for r in full_study.results if r.method in cfg.methods]
  assert [r.method for r in expected] == list(cfg.methods)

  crashed = FakeRunner(crash_after=7)  # all 4 RS arms, then 3 of SHA's first rung
  with pytest.raises(KeyboardInterrupt):
    study.run_study(cfg, crashed)
  resumed = FakeRunner()
  results = study.run_study(cfg, resumed)
  assert not set(crashed.trained) & set(resumed.trained)  # nothing trained twice
  assert sorted(crashed.trained + resumed.trained) == sorted(uninterrupted)
  assert [(r.arm, r.val_loss, r.params) for r in results] == [
      (r.arm, r.val_loss, r.params) for r in expected]

  again = FakeRunner()
  study.run_study(cfg, again)  # finished: no training, no evaluation
  assert again.trained == [] and again.evaluated == []


def test_table_has_one_row_per_method(full_study):
  cfg = full_study.cfg
  text = open(os.path.join(cfg.study_dir, "table.md")).read()
  for label in ("| RS |", "| SHA |", "| RS+FedEx |", "| SHA+FedEx |"):
    assert label in text
  with open(os.path.join(cfg.study_dir, "table.csv")) as f:
    rows = list(csv.DictReader(f))
  assert [r["method"] for r in rows] == ["RS", "SHA", "RS+FedEx", "SHA+FedEx"]
  assert all(float(r["refine_accuracy"]) == 75.0 and float(r["global_accuracy"]) == 50.0 for r in rows)
  assert [int(r["rounds"]) for r in rows] == [36, 21, 36, 21]


def test_non_finite_arms_rank_last(tmp_path):
  class Diverging(FakeRunner):
    def train(self, arm, rounds):
      super().train(arm, rounds)
      return float("nan") if arm.number != 2 else 5.0

  [result] = study.run_study(config(tmp_path, methods=("rs",)), Diverging())
  assert result.arm == 2


@pytest.mark.parametrize("name,text,pattern", [
    ("server_lr", "0:1", r"--tune_server_lr='0:1': value 0.0 is invalid, values must be > 0"),
    ("server_momentum", "0,1", r"--tune_server_momentum='0,1': value 1.0 is invalid.*\[0, 1\)"),
    ("server_lr_decay", "0.9:x", r"--tune_server_lr_decay='0.9:x' is not understood; choices"),
    ("server_lr", "2:1", r"needs low <= high"),
    ("server_beta", "1", r"unknown global hyper-parameter 'server_beta'; choices: server_lr"),
])
def test_bad_global_space_names_flag_value_and_choices(name, text, pattern):
  with pytest.raises(ValueError, match=pattern):
    study.parse_global(name, text)


def test_global_space_parses_ranges_values_and_none():
  assert study.parse_global("server_lr", "0.1:10:log") == study.Range(0.1, 10.0, log=True)
  assert study.parse_global("server_momentum", "0,0.9") == (0.0, 0.9)
  assert study.parse_global("server_lr_decay", "none") is None
  space = study.GlobalSpace(server_lr_decay=None)
  assert set(space.distributions()) == {"server_lr", "server_momentum"}


def test_bad_study_settings_name_the_flag():
  with pytest.raises(ValueError, match=r"--tune_methods='rs,bo' is not valid; choices: rs, sha"):
    study.StudyConfig(study_dir="x", methods=("rs", "bo"))
  with pytest.raises(ValueError, match=r"--sha_eta must be an integer >= 2, got 1"):
    study.StudyConfig(study_dir="x", sha_eta=1)
  with pytest.raises(ValueError, match=r"--rs_arms must be an integer >= 1, got 0"):
    study.StudyConfig(study_dir="x", rs_arms=0)


def test_arms_draw_client_hyperparameters_from_fedex_space_shared_with_the_fedex_variant(tmp_path):
  """--tune_local (seed 002's wrapper): an arm also draws one client configuration from FedEx's
  space; RS and RS+FedEx get the same draws, and the table shows the winner's."""
  from tff_robust.algorithms.methods.fedex import space as fedex_space
  space = fedex_space.SearchSpace(learning_rate=study.Range(1e-4, 1.0, log=True), momentum=(0.0, 0.9),
                                  weight_decay=None, local_epochs=None, batch_size=(16, 64))
  cfg = config(tmp_path, methods=("rs", "rs_fedex"), local_space=space)
  study.run_study(cfg, FakeRunner())
  url = study._storage_url(cfg.study_dir)
  params = {m: [t.params for t in optuna.load_study(study_name=m, storage=url).trials]
            for m in cfg.methods}
  assert params["rs"] == params["rs_fedex"]
  locals_ = [study.local_config(p) for p in params["rs"]]
  assert all(set(c) == {"learning_rate", "momentum", "batch_size"} for c in locals_)
  assert all(1e-4 <= c["learning_rate"] <= 1.0 and c["momentum"] in (0.0, 0.9)
             and c["batch_size"] in (16.0, 64.0) for c in locals_)
  assert len({c["learning_rate"] for c in locals_}) == len(locals_)
  with open(os.path.join(cfg.study_dir, "table.csv")) as f:
    rows = list(csv.DictReader(f))
  assert float(rows[0]["local_learning_rate"]) in {c["learning_rate"] for c in locals_}
  assert "client learning rate" in open(os.path.join(cfg.study_dir, "table.md")).read()
  assert set(study.local_distributions(space)) == {"local_learning_rate", "local_momentum",
                                                    "local_batch_size"}


def test_a_stop_names_the_arms_checkpoint_or_that_the_arm_had_not_started(tmp_path):
  """`tune`'s line when a stop ends an arm: a stop asked for between two arms (the next one at
  round 0) names no checkpoint, for that arm has none."""
  from tff_robust.tuning import arms  # pylint: disable=g-import-not-at-top (imports the training loop)
  arm = study.Arm("rs", 1, {"server_lr": 1.0}, str(tmp_path / "rs_1"))
  assert arms.stopped_line(arm, 9, 0, "SIGTERM") == (
      "stopped before RS arm 1 trained (SIGTERM): the same command starts that arm at round 1 (finished "
      "arms and rungs are kept in study.db).")
  assert arms.stopped_line(arm, 9, 4, "SIGINT") == (
      f"stopped after round 4/9 of RS arm 1 (SIGINT); its checkpoint is in {tmp_path / 'rs_1' / 'checkpoints'}: "
      "run the same command to resume that arm at round 5 (finished arms and rungs are kept in study.db).")
