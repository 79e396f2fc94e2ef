"""The flags of `python -m tff_robust.main` and `python -m tff_robust.tune`, parsed into their
configs as the programs do (the flags are left unparsed afterwards)."""

from absl import flags

from tff_robust.flags import definitions

definitions.define_tune_flags()  # main's flags and the study's
FLAGS = flags.FLAGS


def _parse(program: str, to_config, args):
  FLAGS.unparse_flags()
  FLAGS([program, *args])
  try:
    return to_config()
  finally:
    FLAGS.unparse_flags()


def parse(*args):
  """`definitions.parse()` of the command line ``main *args``: a RunConfig."""
  return _parse("main", definitions.parse, args)


def parse_tune(*args):
  """`definitions.parse_tune()` of the command line ``tune *args``."""
  return _parse("tune", definitions.parse_tune, args)


def parse_main(*args):
  """`main`'s own parse of ``main *args``: the task's paper setting fills the flags not given
  (`presets.apply`), then `definitions.parse()`; returns the RunConfig, the `presets.Setting`
  and the header's setting lines."""
  from tff_robust.flags import presets  # pylint: disable=g-import-not-at-top

  def run():
    setting = presets.apply(["main", *args])
    return definitions.parse(), setting, presets.header_lines(setting)
  return _parse("main", run, args)
