"""One default per option: the command line without flags builds the dataclasses' defaults, field
by field — the run-level fields (task, workers) and the nested configs included — and an option
with a sub-config (--ah, --fedex) builds that config's defaults."""

import dataclasses

from tff_robust.algorithms import config
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.methods.er import ERConfig
from tff_robust.algorithms.methods.fedex import space as fedex_space
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.flags import definitions
from tff_robust.simulation.loop import LoopConfig
from tff_robust.tasks.base import TaskOptions

from helpers.flag_parse import _parse, parse


def _fields(obj, prefix: str = ""):
  """(dotted name, value) of every field of dataclass ``obj``, nested dataclasses flattened."""
  for field in dataclasses.fields(obj):
    value = getattr(obj, field.name)
    if dataclasses.is_dataclass(value):
      yield from _fields(value, f"{prefix}{field.name}.")
    else:
      yield f"{prefix}{field.name}", value


def _assert_same_fields(got, want):
  got, want = dict(_fields(got)), dict(_fields(want))
  assert list(got) == list(want)
  different = {name: (got[name], want[name]) for name in got if got[name] != want[name]}
  assert not different, different


def test_no_flag_cli_config_is_every_dataclass_default():
  run = parse()
  defaults = definitions.RunConfig(task_options=TaskOptions(), process=config.ProcessConfig(),
                                   loop=LoopConfig(output_dir=run.loop.output_dir))
  _assert_same_fields(run, defaults)
  assert len(dict(_fields(run))) > 50
  assert run.process.options_of(RMConfig).client_state == RMConfig().client_state == "persist"


def test_the_held_methods_options_come_from_their_flags():
  """RM's, ER's and WD's options (``ProcessConfig.methods``): no flag, every field its default
  (and nothing held); a flag set, that value in its class and the others' defaults."""
  assert parse().process.methods == ()
  held = _parse("main", definitions.held_options, ())
  assert [type(h) for h in held] == list(registry.held_option_classes())
  for got in held:
    _assert_same_fields(got, type(got)())
  process = parse("--rm_weight=0.1", "--rm_layers=reversed", "--er_h_min=0.5").process
  assert process.methods == (ERConfig(h_min=0.5), RMConfig(weight=0.1, layers="reversed"))


def test_a_sub_config_switched_on_by_its_flag_has_its_defaults():
  _assert_same_fields(parse("--ah").process.ah, AHConfig())
  fedex = parse("--fedex").process.fedex
  _assert_same_fields(fedex.options, fedex_space.FedExOptions())
