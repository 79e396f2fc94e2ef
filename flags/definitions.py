"""Flag definitions and their translation into plain configs, validated before any tracing.

Flags are read here and in `tff_robust.main` only; everything below takes the
dataclasses this module returns.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Optional

from absl import flags

from tff_robust import tasks
from tff_robust.tasks.base import TaskOptions
from tff_robust import aggregation
from tff_robust import attacks
from tff_robust import fedex
from tff_robust import schedules
from tff_robust import server_opt
from tff_robust.config import AGGREGATION_NORMS, AH_BASELINES
from tff_robust.config import AH_LOSS_SOURCES, AHConfig, ClientConfig, FedExConfig, ProcessConfig
from tff_robust.config import RM_CLIENT_STATES, RM_NORMALIZATIONS, RobustConfig, ServerConfig, WEIGHTINGS
from tff_robust.loop import LoopConfig

if TYPE_CHECKING:
  from tff_robust.study import StudyConfig

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines every flag of `python -m tff_robust.main` (idempotent)."""
  if "task" in FLAGS:
    return
  # Task and data.
  flags.DEFINE_string("task", "mnist", "Task name (" + ", ".join(tasks.task_names())
                      + ") or a plug-in 'package.module:function' returning a tff_robust.tasks.base.Task.")
  flags.DEFINE_string("data_source", "default", "Task-specific data source; 'default' = offline default.")
  flags.DEFINE_string("data_dir", None, "Directory with downloaded data / caches.")
  flags.DEFINE_string("model", "default", "Task-specific model variant.")
  flags.DEFINE_string("partition", "default", "iid | one_class | dirichlet | natural (task-specific).")
  flags.DEFINE_integer("num_clients", None, "Clients for centrally held data sets (default: the task's, 10 as in seed 000); "
                       "for natural splits a seeded sample of that many (0 = all).")
  flags.DEFINE_float("dirichlet_alpha", 0.5, "Concentration of the dirichlet partition.")
  flags.DEFINE_float("validation_fraction", 0.0,
                     "Share of each client's training examples held out as server-held validation data "
                     "(val_loss / val_accuracy in the metrics; AH's L_t and the guard draw from it); "
                     "for choosing hyper-parameters without the test split. mnist, cifar10, synthetic only.")
  # Rounds and sampling.
  flags.DEFINE_integer("rounds", 30, "Number of federated rounds.")
  flags.DEFINE_integer("clients_per_round", 0, "Clients sampled per round (0: use --client_fraction).")
  flags.DEFINE_float("client_fraction", 1.0, "Fraction C of clients sampled per round.")
  flags.DEFINE_integer("seed", 0, "Seed of initial weights, client sampling, data order, policies.")
  # Client training.
  flags.DEFINE_float("client_lr", 0.05, "Client SGD learning rate η_l.")
  flags.DEFINE_enum("client_lr_schedule", "constant", list(schedules.LR_SCHEDULES),
                    "Client lr schedule: constant, invsqrt (η_l/√t), expdecay (staircase).")
  flags.DEFINE_float("client_lr_decay_rate", 0.1, "expdecay factor γ.")
  flags.DEFINE_integer("client_lr_decay_every", 500, "expdecay: decay every N rounds.")
  flags.DEFINE_integer("local_steps", 20, "Local SGD steps K per round (0: use --local_epochs).")
  flags.DEFINE_integer("local_epochs", 0, "Local epochs E when --local_steps=0.")
  flags.DEFINE_float("local_steps_decay_rate", 1.0, "Fixed decay of local steps: K·γ^floor((t-1)/N).")
  flags.DEFINE_integer("local_steps_decay_every", 1, "Decay local steps every N rounds.")
  flags.DEFINE_integer("min_local_steps", 1, "Lower bound of the decayed local steps.")
  flags.DEFINE_integer("batch_size", 64, "Client batch size B.")
  flags.DEFINE_enum("weighting", "num_examples", list(WEIGHTINGS),
                    "Aggregation weights: num_examples, uniform, val_accuracy, train_accuracy.")
  flags.DEFINE_string("aggregation_norm", "sampled",
                      "Denominator of the weighted mean: sampled (Σ n_k over the round's clients) or all "
                      "(N over all K clients, seed 000 Algorithm 1 line 13: the step shrinks by ≈ C).")
  flags.DEFINE_integer("client_val_every", 10,
                       "With val_accuracy weighting, every n-th client example is held out.")
  # Server optimizer.
  flags.DEFINE_string("server_opt", "sgd", "Server optimizer: " + ", ".join(server_opt.SERVER_OPTIMIZERS))
  flags.DEFINE_float("server_lr", 1.0, "Server learning rate η.")
  flags.DEFINE_float("server_momentum", None, "sgdm (FedAvgM) momentum (default 0.9; only for sgdm).")
  flags.DEFINE_float("server_beta1", 0.9, "β1 of FedAdagrad/FedAdam/FedYogi.")
  flags.DEFINE_float("server_beta2", 0.99, "β2 of FedAdam/FedYogi.")
  flags.DEFINE_float("server_tau", 1e-3, "τ (adaptivity) of FedAdagrad/FedAdam/FedYogi.")
  flags.DEFINE_float("server_lr_decay", 1.0, "Server lr decay γ per round: η_t = η γ^t (1 = constant).")
  flags.DEFINE_string("aggregator", "mean", "Aggregation: " + ", ".join(aggregation.AGGREGATORS))
  flags.DEFINE_float("trim_fraction", 0.2, "trimmed_mean: fraction dropped at each end per coordinate.")
  flags.DEFINE_float("clip_norm", None, "norm_clip: fixed L2 norm (default: adaptive, 0.8-quantile).")
  flags.DEFINE_bool("zeroing", True, "Zero client updates with huge norms (TFF zeroing); non-finite ones are always excluded.")
  flags.DEFINE_float("zeroing_norm", None, "Fixed zeroing norm (default: TFF's adaptive one).")
  # Faults.
  flags.DEFINE_float("client_dropout_rate", 0.0, "Each sampled client fails independently with this probability.")
  flags.DEFINE_float("byzantine_fraction", 0.0, "Fraction of each round's clients that send corrupted updates.")
  flags.DEFINE_string("byzantine_attack", "none", "Corruption: none, sign_flip, gaussian, scaled, nan.")
  flags.DEFINE_float("byzantine_scale", None, "Scale of sign_flip (default 1) / scaled (default 10).")
  flags.DEFINE_float("byzantine_sigma", 1.0, "σ of the gaussian attack.")
  flags.DEFINE_float("divergence_factor", 0.0,
                     "Reject a round whose model loss (256 held-out examples) is non-finite or exceeds "
                     "this factor × the last accepted one (0 = off).")
  flags.DEFINE_list("workers", [], "host:port of running TFF worker_binary services (python -m "
                    "tff_robust.workers); a round's clients are split across them.")
  # Representation matching, entropy regularisation, weight divergence.
  flags.DEFINE_float("rm_weight", 0.0, "Weight of the representation-matching loss in eq. 2 (0 = off).")
  flags.DEFINE_enum("rm_normalize", "unit", list(RM_NORMALIZATIONS),
                    "How eq. 1's terms enter the model's loss: 'unit' = each layer's squared error "
                    "per unit (the weight does not grow with width), 'sum' = eq. 1 as printed.")
  flags.DEFINE_float("rm_theta_lr", 1e-3, "Adam learning rate of the matching layers θ "
                     "(their own optimizer, on eq. 1).")
  flags.DEFINE_enum("rm_client_state", "persist", list(RM_CLIENT_STATES),
                    "Matching parameters θ: persist per client, or reset each round.")
  flags.DEFINE_float("er_h_min", 0.0, "Entropy regularisation H_min (0 = off).")
  flags.DEFINE_float("wd_mu", 0.0, "Weight-divergence (FedProx) coefficient μ (0 = off).")
  # Adaptive hyper-parameters (online REINFORCE over client lr and local steps).
  flags.DEFINE_bool("ah", False, "Adaptive hyper-parameters: sample (lr, steps) each round from P(h|ψ).")
  flags.DEFINE_list("ah_lr_grid", ["0.001", "0.003", "0.01", "0.03", "0.1", "0.3"],
                    "Allowed client learning rates (normalised in log10 space).")
  flags.DEFINE_list("ah_steps_grid", ["5", "10", "20", "40", "80"], "Allowed local SGD steps.")
  flags.DEFINE_bool("ah_steps_log_scale", True, "Normalise the steps grid in log10 space.")
  flags.DEFINE_integer("ah_window", 5, "Baseline window Z of eq. 7.")
  flags.DEFINE_float("ah_hyper_lr", 0.05, "Hyper learning rate η_H.")
  flags.DEFINE_float("ah_init_lr", None, "Initial mean learning rate (default: grid centre).")
  flags.DEFINE_integer("ah_init_steps", None, "Initial mean local steps (default: grid centre).")
  flags.DEFINE_float("ah_init_std", 0.25, "Initial std of P(h|ψ) in normalised units.")
  flags.DEFINE_string("ah_baseline", "mean", "Baseline of the ψ update: mean (eq. 7), hold (eq. 7, ψ "
                      "held for the first Z rounds) or detrended (a line fitted through the window).")
  flags.DEFINE_string("ah_reward_clip", "-1", "Lower clip of r_t (a number < 0), or none (the seed's "
                      "unclipped reward).")
  flags.DEFINE_enum("ah_loss_source", "server", list(AH_LOSS_SOURCES),
                    "Where L_t comes from: a server-held validation set, or the clients' own data.")
  flags.DEFINE_integer("ah_val_examples", 500, "Size of the server validation set (loss source server).")
  flags.DEFINE_integer("ah_client_eval_batches", 2, "Batches each client evaluates (loss source clients).")
  # FedEx (seed 002): a distribution θ over k client configurations, one sample per client.
  flags.DEFINE_bool("fedex", False, "Tune client hyper-parameters with FedEx.")
  flags.DEFINE_integer("fedex_k", 10, "Number of configurations k.")
  flags.DEFINE_float("fedex_radius", 0.5, "Configurations are drawn within this fraction of each range.")
  flags.DEFINE_enum("fedex_eta_schedule", "adaptive", ["constant", "invsqrt", "adaptive"],
                    "Step size η_t: η0, η0/√t, or η0/‖∇̃‖∞.")
  flags.DEFINE_float("fedex_eta0", None, "η0 (default √(2 ln k)).")
  flags.DEFINE_float("fedex_discount", 0.9, "Discount γ of the baseline λ_t.")
  flags.DEFINE_float("fedex_entropy_cutoff", None, "Below this entropy of θ use its most likely config.")
  flags.DEFINE_bool("fedex_product_space", False, "One categorical per hyper-parameter.")
  for name, default in (("learning_rate", "0.0001:1.0:log"), ("momentum", "0.0:0.9"),
                        ("weight_decay", "0.00001:0.1:log"), ("prox_mu", "none"),
                        ("local_epochs", "none"), ("local_steps", "none"),
                        ("batch_size", "8,16,32,64,128")):
    flags.DEFINE_string(f"fedex_{name}", default,
                        f"FedEx search space of {name}: none, low:high[:log], or v1,v2,...")
  # Outputs.
  flags.DEFINE_string("root_output_dir", "/tmp/tff_robust", "Root of all outputs.")
  flags.DEFINE_string("experiment_name", None, "Output sub-directory (default: derived from the flags).")
  flags.DEFINE_integer("rounds_per_eval", 10, "Evaluate on the test set every N rounds.")
  flags.DEFINE_integer("rounds_per_checkpoint", 10, "Checkpoint every N rounds.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything `main` needs, parsed and validated."""

  task: str
  task_options: TaskOptions
  process: ProcessConfig
  loop: LoopConfig
  rm_client_state: str
  ah_val_examples: int = 500
  workers: tuple[str, ...] = ()


def _check(cond: bool, flag: str, value, allowed: str) -> None:
  if not cond:
    raise ValueError(f"--{flag}={value!r} is not valid: {allowed}.")


def experiment_name(f=FLAGS) -> str:
  parts = [f.task.replace(":", "_").replace(".", "_"), f.server_opt]
  if f.rm_weight > 0:
    parts.append("rm")
  if f.wd_mu > 0:
    parts.append("wd")
  if f.ah:
    parts.append("ah")
  if f.fedex:
    parts.append("fedex")
  parts.append(f"s{f.seed}")
  return "_".join(parts)


def fedex_config(f=FLAGS) -> FedExConfig:
  """FedEx's search space and options from the ``--fedex_*`` flags."""
  _check(not f.ah or f.fedex_learning_rate == "none", "fedex_learning_rate", f.fedex_learning_rate,
         "--ah already tunes the learning rate: set it to none")
  names = ("learning_rate", "momentum", "weight_decay", "prox_mu", "local_epochs", "local_steps",
           "batch_size")
  space = fedex.SearchSpace(**{n: fedex.parse_hparam(n, getattr(f, f"fedex_{n}")) for n in names})
  options = fedex.FedExOptions(k=f.fedex_k, radius=f.fedex_radius, eta_schedule=f.fedex_eta_schedule,
                               eta0=f.fedex_eta0, discount=f.fedex_discount,
                               entropy_cutoff=f.fedex_entropy_cutoff,
                               product_space=f.fedex_product_space, seed=f.seed)
  return FedExConfig(space=space, options=options)


def parse(f=FLAGS) -> RunConfig:
  """Validates every flag and returns the configs; raises ValueError naming flag, value, choices."""
  _check(f.rounds >= 1, "rounds", f.rounds, "must be ≥ 1")
  _check(f.clients_per_round >= 0, "clients_per_round", f.clients_per_round, "must be ≥ 0")
  _check(0 < f.client_fraction <= 1, "client_fraction", f.client_fraction, "must be in (0, 1]")
  _check(f.client_lr > 0, "client_lr", f.client_lr, "must be > 0")
  _check(f.local_steps >= 0, "local_steps", f.local_steps, "must be ≥ 0")
  _check(f.local_steps > 0 or f.local_epochs > 0, "local_epochs", f.local_epochs,
         "must be ≥ 1 when --local_steps=0")
  _check(f.local_epochs >= 0, "local_epochs", f.local_epochs, "must be ≥ 0")
  _check(0 < f.local_steps_decay_rate <= 1, "local_steps_decay_rate", f.local_steps_decay_rate,
         "must be in (0, 1]")
  _check(f.local_steps_decay_every >= 1, "local_steps_decay_every", f.local_steps_decay_every, "must be ≥ 1")
  _check(f.min_local_steps >= 1, "min_local_steps", f.min_local_steps, "must be ≥ 1")
  _check(f.batch_size >= 1, "batch_size", f.batch_size, "must be ≥ 1")
  _check(f.client_val_every >= 2, "client_val_every", f.client_val_every, "must be ≥ 2")
  _check(f.rm_weight >= 0, "rm_weight", f.rm_weight, "must be ≥ 0")
  _check(f.rm_theta_lr > 0, "rm_theta_lr", f.rm_theta_lr, "must be > 0")
  _check(f.er_h_min >= 0, "er_h_min", f.er_h_min, "must be ≥ 0")
  _check(f.wd_mu >= 0, "wd_mu", f.wd_mu, "must be ≥ 0")
  _check(f.rounds_per_eval >= 1, "rounds_per_eval", f.rounds_per_eval, "must be ≥ 1")
  _check(f.rounds_per_checkpoint >= 1, "rounds_per_checkpoint", f.rounds_per_checkpoint, "must be ≥ 1")
  aggregation.validate_aggregator(f.aggregator, f.trim_fraction, f.clip_norm, f.zeroing_norm)
  attacks.validate_attack(f.byzantine_attack, f.byzantine_fraction, f.byzantine_scale, f.byzantine_sigma)
  _check(0 <= f.client_dropout_rate < 1, "client_dropout_rate", f.client_dropout_rate, "must be in [0, 1)")
  _check(f.byzantine_attack != "none" or f.byzantine_fraction == 0, "byzantine_fraction",
         f.byzantine_fraction, "needs --byzantine_attack other than none")
  _check(f.divergence_factor == 0 or f.divergence_factor > 1, "divergence_factor", f.divergence_factor,
         "must be 0 (off) or > 1")
  for address in f.workers:
    host, _, port = address.rpartition(":")
    _check(bool(host) and port.isdigit(), "workers", ",".join(f.workers), "expected host:port,host:port")
  schedule = f.client_lr_schedule
  decay_rate = f.client_lr_decay_rate if schedule == "expdecay" else 1.0
  schedules.validate_schedule(schedule, decay_rate, f.client_lr_decay_every)

  task_options = TaskOptions(
      data_source=f.data_source, data_dir=f.data_dir, num_clients=f.num_clients,
      partition=f.partition, dirichlet_alpha=f.dirichlet_alpha, model=f.model, seed=f.seed,
      validation_fraction=f.validation_fraction)
  if not tasks.is_plugin(f.task):
    tasks.validate_task_options(f.task, task_options)

  momentum = f.server_momentum
  if momentum is None:
    momentum = 0.9 if f.server_opt == "sgdm" else 0.0
  _check(0 < f.server_lr_decay <= 1, "server_lr_decay", f.server_lr_decay, "must be in (0, 1]")
  server = ServerConfig(opt=f.server_opt, lr=f.server_lr, momentum=momentum,
                        beta1=f.server_beta1, beta2=f.server_beta2, tau=f.server_tau,
                        lr_decay=f.server_lr_decay)
  server_opt.build_server_optimizer(server.opt, learning_rate=server.lr, momentum=server.momentum,
                                    beta1=server.beta1, beta2=server.beta2, tau=server.tau)
  client = ClientConfig(
      lr=f.client_lr, lr_schedule=schedule, lr_decay_rate=decay_rate,
      lr_decay_every=f.client_lr_decay_every, local_steps=f.local_steps, local_epochs=f.local_epochs,
      steps_decay_rate=f.local_steps_decay_rate, steps_decay_every=f.local_steps_decay_every,
      min_local_steps=f.min_local_steps, batch_size=f.batch_size, rm_weight=f.rm_weight,
      rm_normalize=f.rm_normalize, rm_theta_lr=f.rm_theta_lr, er_h_min=f.er_h_min, wd_mu=f.wd_mu)
  ah = None
  if f.ah:
    _check(f.local_steps > 0, "local_steps", f.local_steps, "--ah tunes the local steps: use --local_steps > 0")
    try:
      lr_grid = tuple(float(v) for v in f.ah_lr_grid)
      steps_grid = tuple(int(v) for v in f.ah_steps_grid)
    except ValueError as e:
      raise ValueError(f"--ah_lr_grid={','.join(f.ah_lr_grid)!r} / --ah_steps_grid={','.join(f.ah_steps_grid)!r}:"
                       f" numbers expected (steps: integers): {e}") from None
    _check(all(s >= 1 for s in steps_grid), "ah_steps_grid", ",".join(f.ah_steps_grid), "steps must be ≥ 1")
    _check(f.ah_val_examples >= 1, "ah_val_examples", f.ah_val_examples, "must be ≥ 1")
    _check(f.ah_baseline in AH_BASELINES, "ah_baseline", f.ah_baseline, "choose one of " + ", ".join(AH_BASELINES))
    clip = f.ah_reward_clip.strip().lower()
    try:
      min_reward = None if clip == "none" else float(clip)
    except ValueError:
      min_reward = float("nan")
    _check(min_reward is None or -float("inf") < min_reward < 0, "ah_reward_clip", f.ah_reward_clip,
           "a finite number < 0, or none (unclipped)")
    _check(f.ah_client_eval_batches >= 1, "ah_client_eval_batches", f.ah_client_eval_batches, "must be ≥ 1")
    ah = AHConfig(lr_grid=lr_grid, steps_grid=steps_grid, steps_log_scale=f.ah_steps_log_scale,
                  window=f.ah_window, hyper_lr=f.ah_hyper_lr, init_lr=f.ah_init_lr,
                  init_steps=f.ah_init_steps, init_std=f.ah_init_std, loss_source=f.ah_loss_source,
                  client_eval_batches=f.ah_client_eval_batches, baseline=f.ah_baseline,
                  min_reward=min_reward)
    ah.policy_config()  # validates grids, window, η_H, init
  fedex_cfg = fedex_config(f) if f.fedex else None
  robust = RobustConfig(aggregator=f.aggregator, trim_fraction=f.trim_fraction, clip_norm=f.clip_norm,
                        zeroing=f.zeroing, zeroing_norm=f.zeroing_norm,
                        byzantine_attack=f.byzantine_attack, byzantine_scale=f.byzantine_scale,
                        byzantine_sigma=f.byzantine_sigma)
  _check(f.aggregation_norm in AGGREGATION_NORMS, "aggregation_norm", f.aggregation_norm,
         "choose one of " + ", ".join(AGGREGATION_NORMS))
  process = ProcessConfig(client=client, server=server, weighting=f.weighting, ah=ah, robust=robust,
                          fedex=fedex_cfg, seed=f.seed, aggregation_norm=f.aggregation_norm)
  if fedex_cfg is not None:
    from tff_robust import process as process_lib  # pylint: disable=g-import-not-at-top
    process_lib.fedex_client(process)  # validates the space against the client configuration
  name = f.experiment_name or experiment_name(f)
  loop = LoopConfig(
      output_dir=os.path.join(f.root_output_dir, name), rounds=f.rounds,
      clients_per_round=f.clients_per_round, client_fraction=f.client_fraction,
      rounds_per_eval=f.rounds_per_eval, rounds_per_checkpoint=f.rounds_per_checkpoint,
      seed=f.seed, client_val_every=f.client_val_every, client_dropout_rate=f.client_dropout_rate,
      byzantine_fraction=f.byzantine_fraction, divergence_factor=f.divergence_factor)
  return RunConfig(task=f.task, task_options=task_options, process=process, loop=loop,
                   rm_client_state=f.rm_client_state, ah_val_examples=f.ah_val_examples,
                   workers=tuple(f.workers))


# ---- `python -m tff_robust.tune` ---------------------------------------------------------


def define_tune_flags() -> None:
  """`define_flags` plus the tuning study's flags (idempotent)."""
  define_flags()
  if "tune_methods" in FLAGS:
    return
  from tff_robust import federated_eval  # pylint: disable=g-import-not-at-top
  from tff_robust import study  # pylint: disable=g-import-not-at-top
  flags.DEFINE_list("tune_methods", list(study.METHODS), "Methods of the study: " + ", ".join(study.METHODS))
  for name, default in (("server_lr", "0.1:10:log"), ("server_momentum", "0,0.9"),
                        ("server_lr_decay", "0.95:1.0")):
    flags.DEFINE_string(f"tune_{name}", default,
                        f"Global search space of {name}: none (the run's flag), low:high[:log], v1,v2,...")
  flags.DEFINE_integer("rs_arms", 3, "Random search: number of arms, each trained --rs_rounds rounds.")
  flags.DEFINE_integer("rs_rounds", None, "Rounds of every RS arm (default --rounds).")
  flags.DEFINE_integer("sha_arms", 9, "SHA: arms in the first rung.")
  flags.DEFINE_integer("sha_eta", 3, "SHA: elimination rate η (the best 1/η of a rung go on).")
  flags.DEFINE_integer("sha_min_rounds", None,
                       "SHA: budget r of the first rung (default: the last rung gets --rounds).")
  flags.DEFINE_integer("sha_max_rounds", None, "SHA: largest budget R (default --rounds).")
  flags.DEFINE_integer("tune_test_every", 5, "Every N-th example of a client is its test data.")
  flags.DEFINE_enum("tune_refine", "most_likely", list(federated_eval.REFINE_CONFIGS),
                    "Refine with θ's most likely configuration or a sample of θ.")


@dataclasses.dataclass(frozen=True)
class TuneConfig:
  """Everything `tune` needs: the base run, the study and the arms' evaluation settings."""

  run: RunConfig
  study: "StudyConfig"
  fedex: Optional[FedExConfig]
  test_every: int
  refine: str


def parse_tune(f=FLAGS) -> TuneConfig:
  """Validates the run's and the study's flags; raises ValueError naming flag, value, choices."""
  from tff_robust import study  # pylint: disable=g-import-not-at-top
  run = parse(f)
  methods = tuple(m.strip() for m in f.tune_methods if m.strip())
  _check(bool(methods) and all(m in study.METHODS for m in methods), "tune_methods",
         ",".join(f.tune_methods), "choose from " + ", ".join(study.METHODS) + " (comma-separated)")
  space = study.GlobalSpace(**{n: study.parse_global(n, getattr(f, f"tune_{n}"))
                               for n in study.GLOBAL_HPARAMS})
  _check(f.tune_test_every >= 2, "tune_test_every", f.tune_test_every, "must be ≥ 2")
  _check(f.sha_eta >= 2, "sha_eta", f.sha_eta, "must be an integer ≥ 2")
  _check(f.sha_arms >= 1, "sha_arms", f.sha_arms, "must be ≥ 1")
  max_rounds = f.sha_max_rounds or f.rounds
  min_rounds = f.sha_min_rounds
  if min_rounds is None:  # the last rung (one arm) trains max_rounds in total
    levels = 0
    while f.sha_arms // f.sha_eta ** (levels + 1) >= 1:
      levels += 1
    min_rounds = max(1, max_rounds // f.sha_eta ** levels)
  name = f.experiment_name or f"tune_{f.task.replace(':', '_').replace('.', '_')}_s{f.seed}"
  config = study.StudyConfig(
      study_dir=os.path.join(f.root_output_dir, name), methods=methods, space=space,
      rs_arms=f.rs_arms, rs_rounds=f.rs_rounds or f.rounds, sha_arms=f.sha_arms, sha_eta=f.sha_eta,
      sha_min_rounds=min_rounds, sha_max_rounds=max_rounds, seed=f.seed)
  fedex_cfg = None
  if any(m.endswith("fedex") for m in methods):
    fedex_cfg = fedex_config(f)
    from tff_robust import process as process_lib  # pylint: disable=g-import-not-at-top
    process_lib.fedex_client(dataclasses.replace(run.process, fedex=fedex_cfg))
  run = dataclasses.replace(run, process=dataclasses.replace(run.process, fedex=None))
  return TuneConfig(run=run, study=config, fedex=fedex_cfg, test_every=f.tune_test_every,
                    refine=f.tune_refine)
