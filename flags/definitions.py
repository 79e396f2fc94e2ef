"""Flag definitions and their translation into plain configs, validated before any tracing.

Flags are read here and in `tff_robust.main` only; everything below takes the
dataclasses this module returns. The flags are the configs' fields (`tff_robust.common.options`):
their defaults, help and checks are declared there, once.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Optional

from absl import flags

from tff_robust import tasks
from tff_robust.algorithms import privacy
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, RobustConfig, ServerConfig
from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.methods.fedex.space import FedExConfig
from tff_robust.common import options, paths
from tff_robust.common.options import option
from tff_robust.flags import presets
from tff_robust.simulation.loop import LoopConfig
from tff_robust.tasks.base import TaskOptions

if TYPE_CHECKING:
  from tff_robust.tuning.study import StudyConfig

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything `main` needs, parsed and validated."""

  task_options: TaskOptions
  process: ProcessConfig
  loop: LoopConfig
  task: str = option("mnist", "task", "Task name (" + ", ".join(tasks.task_names())
                     + ") or a plug-in 'package.module:function' returning a tff_robust.tasks.base.Task.")
  workers: tuple[str, ...] = option((), "workers", "host:port of running TFF worker_binary services "
                                    "(python -m tff_robust.runtime.workers); a round's clients are split "
                                    "across them.", kind="list")


# The dataclasses whose fields are flags (`options.option`), in the order --help lists them.
CONFIGS = (TaskOptions, LoopConfig, ClientConfig, ProcessConfig, ServerConfig, RobustConfig, RunConfig,
           *registry.option_classes(), privacy.DPConfig)
# Why an inf / nan number flag fails (absl's float parser accepts them, and reads 1e400 as inf).
NOT_FINITE = "a finite number is required (inf, nan and values beyond ±1.8e308 are not)"


def _define(cls: type) -> None:
  """Defines one absl flag per `options.option` field of ``cls`` (a shared one, like --seed, once)."""
  for field, meta in options.flag_fields(cls):
    if meta.name in FLAGS:
      continue
    default, kind = field.default, meta.kind
    if meta.choices is not None:
      flags.DEFINE_enum(meta.name, default, list(meta.choices), meta.help)
    elif kind == "list" or isinstance(default, tuple):
      flags.DEFINE_list(meta.name, [str(v) for v in default], meta.help)
    elif kind == "bool" or isinstance(default, bool):
      flags.DEFINE_bool(meta.name, default, meta.help)
    elif kind == "int" or isinstance(default, int):
      flags.DEFINE_integer(meta.name, default, meta.help)
    elif kind == "float" or isinstance(default, float):
      flags.DEFINE_float(meta.name, default, meta.help)
    else:
      flags.DEFINE_string(meta.name, default, meta.help)


def define_flags() -> None:
  """Defines every flag of `python -m tff_robust.main` (idempotent).

  The configs' fields give most of them (default, help, choices); the rest say which task,
  which workers, and whether a method with a switch of its own (`Method.switch`) runs at all.
  """
  if "task" in FLAGS:
    return
  for method in _switched():
    flags.DEFINE_bool(method.name, False, method.switch.help)
    for name, default, help_text in method.switch.text_flags:
      flags.DEFINE_string(name, default, help_text)
  for cls in CONFIGS:
    _define(cls)
  flags.DEFINE_string("root_output_dir", paths.default_root(),
                      "Root of all outputs (default: this user's folder in the temporary directory).")
  flags.DEFINE_string("experiment_name", None, "Output sub-directory (default: derived from the flags).")
  flags.DEFINE_enum("preset", "auto", list(presets.MODES), presets.HELP)


def from_flags(cls: type, f=FLAGS, **given):
  """``cls`` built from its flag fields' values (list flags converted to the default's element
  type), plus ``given``; the dataclass validates itself."""
  values = {}
  for field, meta in options.flag_fields(cls):
    if field.name in given:
      continue
    value = getattr(f, meta.name)
    if isinstance(field.default, tuple):
      element = type(field.default[0]) if field.default else str
      try:
        value = tuple(element(v) for v in value)
      except ValueError:
        options.fail(meta.name, value, f"{element.__name__} values expected, comma-separated")
    numbers = value if isinstance(value, tuple) else (value,)
    options.check(all(math.isfinite(v) for v in numbers if isinstance(v, float)), meta.name, value,
                  NOT_FINITE)
    values[field.name] = value
  return cls(**values, **given)


def experiment_name(process: ProcessConfig, f=FLAGS) -> str:
  """The default run name: task, server optimizer, the running methods' parts (the registry's),
  ``dp`` and the seed."""
  parts = [f.task.replace(":", "_").replace(".", "_"), f.server_opt, *registry.run_name_parts(process)]
  if f.dp_noise_multiplier is not None:
    parts.append("dp")
  parts.append(f"s{f.seed}")
  return "_".join(parts)


def _switched() -> list:
  """The registry's methods that a flag of their own turns on (`Method.switch`)."""
  return [m for m in registry.METHODS if m.switch is not None]


def method_config(method, f=FLAGS):
  """The configuration of a switched method (``ProcessConfig.<name>``) from its flags."""
  on = frozenset(m.name for m in _switched() if getattr(f, m.name))
  text = {name: getattr(f, name) for name, _, _ in method.switch.text_flags}
  return method.switch.configure(lambda cls, **given: from_flags(cls, f, **given), text, on)


def method_configs(f=FLAGS) -> dict:
  """``{name: configuration}`` of the switched methods that are on."""
  return {m.name: method_config(m, f) for m in _switched() if getattr(f, m.name)}


def held_options(f=FLAGS) -> tuple:
  """The options of the methods without a switch (``ProcessConfig.methods``) from their flags."""
  return tuple(from_flags(cls, f) for cls in registry.held_option_classes())


def dp_config(f=FLAGS) -> Optional[privacy.DPConfig]:
  """DP-FedAvg's config when ``--dp_noise_multiplier`` is set; without it, the other ``--dp_*``
  flags must stay unset (they would do nothing)."""
  if f.dp_noise_multiplier is not None:
    return from_flags(privacy.DPConfig, f)
  for name in ("dp_clip", "dp_clip_quantile", "dp_delta"):
    options.check(getattr(f, name) is None, name, getattr(f, name),
                  "needs --dp_noise_multiplier (DP-FedAvg is off without it)")
  return None


def check_paths(f=FLAGS) -> None:
  """The path flags, before any data is read: ``--data_dir`` an existing directory, the output
  root and run directory ones this user can write in or create (`paths`)."""
  if f.data_dir:
    paths.check_input_dir("data_dir", f.data_dir)
  name = f.experiment_name
  options.check(name is None or (name.strip() not in ("", ".") and not os.path.isabs(name)
                                 and ".." not in name.replace(os.sep, "/").split("/")),
                "experiment_name", name, "a folder name under --root_output_dir (no '..')")
  paths.check_output_dir("root_output_dir", f.root_output_dir)
  if f.experiment_name:
    run_dir = os.path.join(os.path.expanduser(f.root_output_dir), f.experiment_name)
    options.check(not os.path.exists(run_dir) or os.path.isdir(run_dir), "experiment_name",
                  f.experiment_name, f"{run_dir} is a file, not a run directory")


def parse(f=FLAGS) -> RunConfig:
  """Maps the flags onto the configs (each validates itself) and checks what spans several of
  them; raises ValueError naming flag, value and what is allowed."""
  for address in f.workers:
    host, _, port = address.rpartition(":")
    options.check(bool(host) and port.isdigit(), "workers", ",".join(f.workers), "expected host:port,host:port")
  task_options = from_flags(TaskOptions, f)
  if not tasks.is_plugin(f.task):
    tasks.validate_task_options(f.task, task_options)
  switched = method_configs(f)
  process = from_flags(ProcessConfig, f, client=from_flags(ClientConfig, f), server=from_flags(ServerConfig, f),
                       robust=from_flags(RobustConfig, f), **switched, dp=dp_config(f),
                       algorithm=from_flags(registry.Selection, f).algorithm, methods=held_options(f))
  name = f.experiment_name or experiment_name(process, f)
  loop = from_flags(LoopConfig, f, output_dir=os.path.join(f.root_output_dir, name))
  options.check(f.byzantine_attack != "none" or f.byzantine_fraction == 0, "byzantine_fraction",
                f.byzantine_fraction, "needs --byzantine_attack other than none")
  check_paths(f)
  return from_flags(RunConfig, f, task_options=task_options, process=process, loop=loop)


# ---- `python -m tff_robust.tune` ---------------------------------------------------------


def define_tune_flags() -> None:
  """`define_flags` plus the tuning study's flags (idempotent)."""
  define_flags()
  if "tune_methods" in FLAGS:
    return
  from tff_robust.tuning import federated_eval  # pylint: disable=g-import-not-at-top
  from tff_robust.tuning import study  # pylint: disable=g-import-not-at-top
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
  flags.DEFINE_bool("tune_local", True,
                    "Each arm also draws its client hyper-parameters from FedEx's space (--fedex_*), as "
                    "seed 002's wrapper does: a baseline arm trains with them, a FedEx arm centres its "
                    "k configurations on them. --notune_local: every arm uses the client flags.")
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
  from tff_robust.tuning import study  # pylint: disable=g-import-not-at-top
  options.check(f.dp_noise_multiplier is None, "dp_noise_multiplier", f.dp_noise_multiplier,
                "a tuning study is refused with DP: its arms train on the same clients, so the study "
                "spends the privacy of every arm and its choice of arm depends on their data, which "
                "the accountant does not count; tune without DP on other data, then run main with DP")
  run = parse(f)
  methods = tuple(m.strip() for m in f.tune_methods if m.strip())
  options.check(bool(methods) and all(m in study.METHODS for m in methods), "tune_methods",
         ",".join(f.tune_methods), "choose from " + ", ".join(study.METHODS) + " (comma-separated)")
  space = study.GlobalSpace(**{n: study.parse_global(n, getattr(f, f"tune_{n}"))
                               for n in study.GLOBAL_HPARAMS})
  options.check(f.tune_test_every >= 2, "tune_test_every", f.tune_test_every, "must be ≥ 2")
  options.check(f.sha_eta >= 2, "sha_eta", f.sha_eta, "must be an integer ≥ 2")
  options.check(f.sha_arms >= 1, "sha_arms", f.sha_arms, "must be ≥ 1")
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
  if f.tune_local or any(m.endswith("fedex") for m in methods):
    fedex_cfg = method_config(registry.find(study.FEDEX), f)
    dataclasses.replace(run.process, fedex=fedex_cfg)  # validates the space against the client flags
  if f.tune_local:
    config = dataclasses.replace(config, local_space=fedex_cfg.space)
  run = dataclasses.replace(run, process=dataclasses.replace(run.process, fedex=None))
  return TuneConfig(run=run, study=config, fedex=fedex_cfg, test_every=f.tune_test_every,
                    refine=f.tune_refine)
