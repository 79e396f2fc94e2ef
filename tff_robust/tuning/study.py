"""A tuning study over global hyper-parameters: random search and successive halving (seed 002).

Seed 002 tunes the *global* hyper-parameters (the server's learning rate, momentum
and learning-rate decay) with random search (RS) and successive halving (SHA),
and the *local* ones with FedEx inside each run. A study runs any of four methods:

* ``rs``: n arms, each a full run of R rounds; the arm with the lowest federated
  validation loss wins.
* ``sha``: synchronous SHA (`sha.sha_schedule`): rung s keeps n_s = floor(n / eta^s)
  arms trained to r eta^s rounds in total; the best 1/eta go on (`sha.promote`).
  An arm continues from its checkpoint, so a rung costs n_s (b_s - b_{s-1}) rounds.
* ``rs_fedex`` / ``sha_fedex``: the same, each arm running FedEx.

An arm's global configuration is drawn by Optuna's ``RandomSampler`` seeded by
(study seed, rs|sha, arm index), so RS and RS+FedEx (SHA and SHA+FedEx) try the
same configurations. With ``local_space`` (``--tune_local``) an arm also draws one
client configuration (``local_<name>`` params), as seed 002's wrapper does: the
baseline trains with it, FedEx centres its k configurations on it (`arms.arm_fedex`).
Every method is an Optuna study in one SQLite file: an arm is a trial, each rung's validation loss an intermediate value at step = the
rung's budget, an eliminated arm is PRUNED, the winner COMPLETE. Running the
same command again reads that file and trains only what is missing; the winner's
"global" / "refine" evaluation is kept as a study attribute.

The training itself is behind ``ArmRunner`` (`tff_robust.tuning.arms` runs real
federated training), so this module is plain Python and Optuna.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from typing import Optional, Protocol

import numpy as np
import optuna

from tff_robust.algorithms import search_space
from tff_robust.algorithms.methods.fedex import space as fedex_space
from tff_robust.common import console, hard_stop, markdown
from tff_robust.tuning import sha

logger = logging.getLogger("tff_robust")

METHODS = ("rs", "sha", "rs_fedex", "sha_fedex")
FEDEX = "fedex"  # the method the ``*_fedex`` arms run (its name in `algorithms.methods.registry`)
LABELS = {"rs": "RS", "sha": "SHA", "rs_fedex": "RS+FedEx", "sha_fedex": "SHA+FedEx"}
GLOBAL_HPARAMS = ("server_lr", "server_momentum", "server_lr_decay")
# name -> (lowest, lowest allowed?, highest, highest allowed?, description for messages)
_LIMITS = {
    "server_lr": (0.0, False, math.inf, False, "> 0"),
    "server_momentum": (0.0, True, 1.0, False, "in [0, 1)"),
    "server_lr_decay": (0.0, False, 1.0, True, "in (0, 1]"),
}
LOCAL_PREFIX = "local_"  # an arm's drawn client hyper-parameter h is its param local_<h>
WINNER_ATTR = "winner"
DB_NAME = "study.db"


Range = search_space.Range
GlobalSpec = search_space.Spec  # None: not tuned (the run's own value)


def parse_global(name: str, text: str) -> GlobalSpec:
  """Parses ``--tune_<name>``: ``none``, ``low:high``, ``low:high:log`` or ``v1,v2,...``."""
  if name not in _LIMITS:
    raise ValueError(f"unknown global hyper-parameter {name!r}; choices: {', '.join(GLOBAL_HPARAMS)}")
  flag, desc = f"--tune_{name}", _LIMITS[name][4]
  spec = search_space.parse_spec(flag, text)
  if spec is None:
    return None
  values = (spec.low, spec.high) if isinstance(spec, Range) else spec
  for v in values:
    if not search_space.within(_LIMITS[name], v):
      raise ValueError(f"{flag}={text!r}: value {v} is invalid, values must be {desc}")
  if isinstance(spec, Range):
    if spec.low > spec.high:
      raise ValueError(f"{flag}={text!r}: needs low <= high")
    if spec.log and spec.low <= 0:
      raise ValueError(f"{flag}={text!r}: a log range needs low > 0")
  return spec


@dataclasses.dataclass(frozen=True)
class GlobalSpace:
  """The global search space. Defaults follow seed 002's experiments: server lr
  10^[-1, 1], momentum {0, 0.9}; the decay γ of η_t = η γ^t is drawn from [0.95, 1]."""

  server_lr: GlobalSpec = Range(0.1, 10.0, log=True)
  server_momentum: GlobalSpec = (0.0, 0.9)
  server_lr_decay: GlobalSpec = Range(0.95, 1.0)

  def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
    return {name: _distribution(getattr(self, name)) for name in GLOBAL_HPARAMS
            if getattr(self, name) is not None}


def _distribution(spec, integer: bool = False) -> optuna.distributions.BaseDistribution:
  """Optuna's distribution for a search-space spec: a ``Range`` (rounded bounds if
  ``integer``) or a tuple of values."""
  if isinstance(spec, Range) and integer:
    return optuna.distributions.IntDistribution(math.ceil(spec.low), math.floor(spec.high),
                                                log=spec.log)
  if isinstance(spec, Range):
    return optuna.distributions.FloatDistribution(spec.low, spec.high, log=spec.log)
  return optuna.distributions.CategoricalDistribution(tuple(float(v) for v in spec))


def local_distributions(space: fedex_space.SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
  """The client hyper-parameters an arm draws with its global ones (``local_<name>``), from
  FedEx's space: seed 002's wrapper draws one client configuration per arm for the baseline
  and centres FedEx's k configurations on it."""
  return {LOCAL_PREFIX + name: _distribution(space.spec(name), name in fedex_space.INTEGER_HPARAMS)
          for name in space.names}


def local_config(params: dict) -> dict[str, float]:
  """An arm's drawn client configuration ({} when the study draws none)."""
  return {k[len(LOCAL_PREFIX):]: float(v) for k, v in params.items() if k.startswith(LOCAL_PREFIX)}


@dataclasses.dataclass(frozen=True)
class StudyConfig:
  """A study: which methods, how many arms, which budgets (flags ``--tune_*``, ``--rs_*``, ``--sha_*``)."""

  study_dir: str
  methods: tuple[str, ...] = METHODS
  space: GlobalSpace = GlobalSpace()
  rs_arms: int = 3
  rs_rounds: int = 27
  sha_arms: int = 9
  sha_eta: int = 3
  sha_min_rounds: int = 3
  sha_max_rounds: Optional[int] = None
  seed: int = 0
  # The client hyper-parameters each arm also draws (a fedex_space.SearchSpace, flag
  # --tune_local); None: every arm trains with the run's client flags.
  local_space: Optional[fedex_space.SearchSpace] = None

  def __post_init__(self):
    bad = [m for m in self.methods if m not in METHODS]
    if bad or not self.methods:
      raise ValueError(f"--tune_methods={','.join(self.methods)!r} is not valid; choices: "
                       f"{', '.join(METHODS)} (comma-separated)")
    if not isinstance(self.rs_arms, int) or self.rs_arms < 1:
      raise ValueError(f"--rs_arms must be an integer >= 1, got {self.rs_arms!r}")
    if not isinstance(self.rs_rounds, int) or self.rs_rounds < 1:
      raise ValueError(f"--rs_rounds must be an integer >= 1, got {self.rs_rounds!r}")
    sha.validate(self.sha_arms, self.sha_eta, self.sha_min_rounds, self.sha_max_rounds)

  def schedule(self, method: str) -> list[sha.Rung]:
    """RS is a single rung of n arms at R rounds; SHA is `sha.sha_schedule`."""
    if method.startswith("rs"):
      return [sha.Rung(index=0, num_arms=self.rs_arms, budget_rounds=self.rs_rounds)]
    return sha.sha_schedule(self.sha_arms, self.sha_eta, self.sha_min_rounds, self.sha_max_rounds)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One arm: trial ``number`` of ``method`` with global ``params``, trained in ``directory``."""

  method: str
  number: int
  params: dict
  directory: str

  @property
  def fedex(self) -> bool:
    return self.method.endswith("fedex")


class ArmRunner(Protocol):
  """What a study needs from training (`tff_robust.tuning.arms.FederatedArmRunner`)."""

  def train(self, arm: Arm, rounds: int) -> float:
    """Trains (or resumes) ``arm`` to ``rounds`` rounds; returns its federated validation loss."""

  def evaluate(self, arm: Arm, rounds: int) -> dict[str, float]:
    """``global_*`` and ``refine_*`` test metrics of ``arm``'s model after ``rounds`` rounds."""

  def release(self, arm: Arm) -> None:
    """``arm`` will not be trained again (eliminated, or its method is done): free its memory."""


def _storage_url(study_dir: str) -> str:
  return "sqlite:///" + os.path.abspath(os.path.join(study_dir, DB_NAME))


_STORAGES: dict[str, optuna.storages.BaseStorage] = {}


def _storage(study_dir: str) -> optuna.storages.BaseStorage:
  """One RDB storage per study file (opening one checks its schema, which is slow)."""
  url = _storage_url(study_dir)
  if url not in _STORAGES:
    _STORAGES[url] = optuna.storages.RDBStorage(url)
  return _STORAGES[url]


def _load(config: StudyConfig, method: str, sampler_seed: int = 0) -> optuna.Study:
  return optuna.create_study(
      study_name=method, storage=_storage(config.study_dir), direction="minimize",
      sampler=optuna.samplers.RandomSampler(seed=sampler_seed), load_if_exists=True)


def arm_seed(seed: int, method: str, index: int) -> int:
  """The sampler seed of arm ``index``: shared by ``rs``/``rs_fedex`` (and ``sha``/``sha_fedex``)."""
  family = 0 if method.startswith("rs") else 1
  return int(np.random.SeedSequence([seed, family, index]).generate_state(1)[0])


def _arms(config: StudyConfig, method: str, n: int) -> list[Arm]:
  """The method's n arms: existing trials, plus new ones drawn with their own seeded sampler."""
  study = _load(config, method)
  trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
  distributions = config.space.distributions()
  if config.local_space is not None:
    distributions.update(local_distributions(config.local_space))
  for index in range(len(trials), n):
    _load(config, method, arm_seed(config.seed, method, index)).ask(distributions)
  trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)[:n]
  return [Arm(method=method, number=t.number, params=dict(t.params),
              directory=os.path.join(config.study_dir, method, f"arm{t.number:03d}"))
          for t in trials]


@dataclasses.dataclass(frozen=True)
class MethodResult:
  """A method's winner: its global configuration, validation loss and test metrics."""

  method: str
  arm: int
  params: dict
  val_loss: float
  rounds: int  # training rounds the method spent over all arms
  metrics: dict


def run_method(config: StudyConfig, method: str, runner: ArmRunner) -> MethodResult:
  """Runs (or resumes) one method of the study; see the module docstring."""
  schedule = config.schedule(method)
  study = _load(config, method)
  arms = {a.number: a for a in _arms(config, method, schedule[0].num_arms)}
  alive = sorted(arms)
  scores: dict[str, float] = {}
  for rung in schedule:
    budget = rung.budget_rounds
    scores = {}
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for number in alive:
      trial = trials[number]
      if budget in trial.intermediate_values:  # finished before a restart
        scores[str(number)] = trial.intermediate_values[budget]
        continue
      loss = float(runner.train(arms[number], budget))
      if not math.isfinite(loss):
        loss = math.inf  # a diverged arm ranks last
      if trial.state == optuna.trial.TrialState.RUNNING:
        optuna.trial.Trial(study, trial._trial_id).report(loss, budget)  # pylint: disable=protected-access
      scores[str(number)] = loss
      logger.info("arm      %s %d: validation loss %.4g after %s", LABELS[method], number, loss,
                  console.plural(budget, "round"))
    last = rung.index == len(schedule) - 1
    keep = 1 if last else schedule[rung.index + 1].num_arms
    survivors = [int(n) for n in sha.promote(scores, keep)]
    for number in alive:
      if number not in survivors:
        study.tell(number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        runner.release(arms[number])
    alive = survivors
  winner = alive[0]
  val_loss = scores[str(winner)]
  study.tell(winner, val_loss, skip_if_finished=True)
  budget = schedule[-1].budget_rounds
  saved = study.user_attrs.get(WINNER_ATTR)
  if saved and saved.get("arm") == winner and saved.get("rounds") == budget:
    metrics = saved["metrics"]
  else:
    metrics = runner.evaluate(arms[winner], budget)
    study.set_user_attr(WINNER_ATTR, {"arm": winner, "rounds": budget, "metrics": metrics})
  runner.release(arms[winner])
  return MethodResult(method=method, arm=winner, params=arms[winner].params, val_loss=val_loss,
                      rounds=sha.total_rounds(schedule), metrics=metrics)


def run_study(config: StudyConfig, runner: ArmRunner) -> list[MethodResult]:
  """Runs every method of ``config`` in turn and writes the table (`write_table`)."""
  os.makedirs(config.study_dir, exist_ok=True)
  optuna.logging.set_verbosity(optuna.logging.WARNING)
  results = [run_method(config, method, runner) for method in config.methods]
  with hard_stop.writing():  # a stop forced meanwhile leaves both files whole
    write_table(results, config.study_dir)
  return results


# ---- the table ---------------------------------------------------------------------------

_COLUMNS = (("method", "method"), ("server_lr", "server lr"), ("server_momentum", "momentum"),
            ("server_lr_decay", "lr decay"),
            *((LOCAL_PREFIX + n, f"client {n.replace('_', ' ')}") for n in fedex_space.HPARAM_NAMES),
            ("val_loss", "val loss"),
            ("global_accuracy", "global acc (%)"), ("refine_accuracy", "refine acc (%)"),
            ("global_loss", "global loss"), ("refine_loss", "refine loss"),
            ("rounds", "rounds spent"))


def table_rows(results: Sequence[MethodResult]) -> list[dict[str, object]]:
  """One row per method: the winner's configuration, validation loss and test metrics."""
  rows = []
  for r in results:
    row: dict[str, object] = {"method": LABELS[r.method], "val_loss": r.val_loss, "rounds": r.rounds}
    row.update({k: r.params.get(k) for k in GLOBAL_HPARAMS})
    row.update({LOCAL_PREFIX + k: v for k, v in local_config(r.params).items()})
    for k, v in r.metrics.items():
      row[k] = 100.0 * v if k.endswith("accuracy") else v
    rows.append(row)
  return rows


def _fmt(v) -> str:
  if v is None:
    return "—"
  if isinstance(v, float):
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.3e}"
  return str(v)


def write_table(results: Sequence[MethodResult], out_dir: str) -> tuple[str, str]:
  """Writes ``table.md`` and ``table.csv`` (RS / SHA / RS+FedEx / SHA+FedEx rows)."""
  rows = table_rows(results)
  cols = [(k, label) for k, label in _COLUMNS if any(k in r for r in rows)]
  md = os.path.join(out_dir, "table.md")
  with open(md, "w") as f:
    lines = markdown.table([label for _, label in cols], [[_fmt(r.get(k)) for k, _ in cols] for r in rows])
    f.write("\n".join(lines) + "\n")
  path = os.path.join(out_dir, "table.csv")
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow([k for k, _ in cols])
    for r in rows:
      writer.writerow(["" if r.get(k) is None else r.get(k) for k, _ in cols])
  return md, path


def describe(config: StudyConfig) -> str:
  """Each method's rungs and total rounds (printed before a study starts)."""
  lines = []
  for m in config.methods:
    s = config.schedule(m)
    rungs = ", ".join(f"{console.plural(r.num_arms, 'arm')} → {console.plural(r.budget_rounds, 'round')}"
                      for r in s)
    lines.append(f"{LABELS[m]}: {rungs} (total {console.plural(sha.total_rounds(s), 'round')})")
  return "\n".join(lines)

