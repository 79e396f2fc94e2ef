"""One source of defaults: the configs' fields are the flags, and both fail the same way."""

import dataclasses
import getpass
import os

import pytest
from absl import flags

from tff_robust.algorithms import config
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.methods.fedex import update as fedex
from tff_robust.algorithms.methods.fedex import space as fedex_space
from tff_robust.algorithms.methods.er import ERConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.algorithms.methods.wd import WDConfig
from tff_robust.algorithms import privacy
from tff_robust.common import options, paths
from tff_robust.flags import definitions
from tff_robust.simulation.loop import LoopConfig
from tff_robust.tasks.base import TaskOptions

from helpers.flag_parse import parse  # the flags of `python -m tff_robust.main`, parsed into a RunConfig

FLAGS = flags.FLAGS


def test_no_flag_cli_builds_the_default_dataclasses():
  run = parse()
  assert run.process == config.ProcessConfig()
  assert run.task_options == TaskOptions()
  assert run.loop == LoopConfig(output_dir=run.loop.output_dir)
  assert run.loop.output_dir == os.path.join(paths.default_root(), "mnist_sgd_s0")
  assert os.path.basename(paths.default_root()) == f"tff_robust-{getpass.getuser()}"  # one per user
  assert (run.task, run.process.options_of(RMConfig).client_state, run.workers) == ("mnist", "persist", ())
  with_ah = parse("--ah", "--fedex", "--fedex_learning_rate=none")
  assert with_ah.process.ah == AHConfig()
  assert with_ah.process.fedex.options == fedex_space.FedExOptions()


def test_every_flag_default_is_its_field_default():
  definitions.define_flags()
  seen = 0
  for cls in definitions.CONFIGS:
    for field, meta in options.flag_fields(cls):
      default = FLAGS[meta.name].default
      if isinstance(field.default, tuple):
        default = tuple(type(field.default[0])(v) for v in default)
      assert default == field.default, (cls.__name__, meta.name)
      assert FLAGS[meta.name].help.endswith(meta.help)  # absl puts an enum's choices first
      seen += 1
  assert seen > 60


@pytest.mark.parametrize("build,argv", [
    (lambda: config.ClientConfig(lr=0.0), ["--client_lr=0"]),
    (lambda: config.ClientConfig(local_steps=0), ["--local_steps=0"]),
    (lambda: RMConfig(weight=-1.0), ["--rm_weight=-1"]),
    (lambda: RMConfig(theta_lr=0.0), ["--rm_theta_lr=0"]),
    (lambda: ERConfig(h_min=-0.5), ["--er_h_min=-0.5"]),
    (lambda: WDConfig(mu=-0.1), ["--wd_mu=-0.1"]),
    (lambda: config.ServerConfig(lr_decay=2.0), ["--server_lr_decay=2"]),
    (lambda: config.ServerConfig(opt="sgd", momentum=0.5), ["--server_momentum=0.5"]),
    (lambda: config.ProcessConfig(aggregation_norm="some"), ["--aggregation_norm=some"]),
    (lambda: config.ProcessConfig(client=config.ClientConfig(local_steps=0, local_epochs=1),
                                  ah=AHConfig()), ["--ah", "--local_steps=0", "--local_epochs=1"]),
    (lambda: AHConfig(baseline="median"), ["--ah", "--ah_baseline=median"]),
    (lambda: AHConfig(steps_grid=(0, 5)), ["--ah", "--ah_steps_grid=0,5"]),
    (lambda: config.RobustConfig(aggregator="mode"), ["--aggregator=mode"]),
    (lambda: LoopConfig(output_dir="x", rounds=0), ["--rounds=0"]),
    (lambda: LoopConfig(output_dir="x", divergence_factor=0.5), ["--divergence_factor=0.5"]),
    (lambda: fedex_space.FedExOptions(k=0), ["--fedex", "--fedex_k=0", "--fedex_learning_rate=0.01,0.1"]),
])
def test_configs_built_in_a_notebook_fail_like_the_flags(build, argv):
  with pytest.raises(ValueError) as in_notebook:
    build()
  with pytest.raises(ValueError) as on_cli:
    parse(*argv)
  assert str(in_notebook.value) == str(on_cli.value)
  assert str(on_cli.value).startswith("--")


def test_list_flags_need_numbers():
  with pytest.raises(ValueError, match=r"--ah_lr_grid='0.1,fast' is not valid: float values expected"):
    parse("--ah", "--ah_lr_grid=0.1,fast")
  with pytest.raises(ValueError, match=r"--ah_reward_clip='soft' is not valid: a finite number < 0"):
    parse("--ah", "--ah_reward_clip=soft")


def test_option_needs_a_kind_when_the_default_is_none():
  with pytest.raises(ValueError, match="kind="):
    options.option(None, "x", "help")
  field = options.option(None, "x", "help", kind="float")
  assert field.default is None and field.metadata["flag"].kind == "float"


def test_dataclass_replace_validates_again():
  with pytest.raises(ValueError, match=r"--batch_size=0 is not valid: must be ≥ 1\."):
    dataclasses.replace(config.ClientConfig(), batch_size=0)


def _number_flags():
  """Every float flag of main and every list-of-floats flag, with the flags that make it count."""
  definitions.define_flags()
  enable = {AHConfig: ("--ah",), fedex_space.FedExOptions: ("--fedex",),
            privacy.DPConfig: ("--dp_noise_multiplier=1.0",)}
  for cls in definitions.CONFIGS:
    for field, meta in options.flag_fields(cls):
      default = field.default
      if isinstance(default, float) or meta.kind == "float":
        yield meta.name, "", enable.get(cls, ())
      elif isinstance(default, tuple) and default and isinstance(default[0], float):
        yield meta.name, "0.1,", enable.get(cls, ())


def test_every_number_flag_refuses_non_finite_values():
  """absl reads inf, nan and 1e400 (as inf) for a float flag: each is refused in one line naming
  the flag and the value, also inside a list of numbers."""
  cases = list(_number_flags())
  assert len(cases) > 25 and {"server_lr", "client_lr", "rm_weight", "ah_lr_grid"} <= {n for n, _, _ in cases}
  for name, prefix, extra in cases:
    for bad, shown in (("inf", "inf"), ("nan", "nan"), ("1e400", "inf"), ("-inf", "-inf")):
      with pytest.raises(ValueError) as e:
        parse(*extra, f"--{name}={prefix}{bad}")
      message = str(e.value)
      assert message == f"--{name}={prefix + shown!r} is not valid: {definitions.NOT_FINITE}." or (
          message == f"--{name}={float(shown)!r} is not valid: {definitions.NOT_FINITE}."), message
      assert "\n" not in message
