"""A task runs its paper's setting unless told otherwise (``--preset``).

``--task=emnist_cr --server_opt=yogi`` alone is Reddi et al.'s EMNIST CR run of FedYogi: the
flagfiles the tables compose for that cell (`files_for`) fill every flag the command line did not
spell (absl's ``present``), so clients per round, batch, local epochs, rounds, the evaluation
period and the client and server rates tuned for that optimizer are the paper's, and any flag
the user gives wins. The RM/AH paper's tasks (``speech_commands``, ``cifar10``) get its FA
setting, or the method's files with ``--ah`` / ``--rm_weight`` / ``--wd_mu``.

``--preset=auto`` (the default) applies the setting unless the command line names a
``--flagfile`` (the tables' and studies' runs then run exactly their files); ``paper`` applies it
under flagfiles too; ``none`` never. ``mnist`` (the offline default), ``synthetic`` and plug-in
tasks have no setting. The filled values are ordinary flag values: ``hparams.cfg`` records them
and the run directory is bound to them (`record`), as if they had been typed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Optional

from absl import flags

from tff_robust.common import options

FLAGS = flags.FLAGS
FLAGS_DIR = os.path.dirname(os.path.abspath(__file__))
MODES = ("auto", "paper", "none")
HELP = ("main fills the flags not given with the task's paper setting (flags/fedopt_*.cfg for the "
        "FedOpt tasks, flags/rmah_*.cfg for speech_commands and cifar10): auto (unless a --flagfile "
        "is given), paper (also under --flagfile), none. Flags you give always win. tune takes its "
        "flags as given.")

# task -> (its name in the flagfiles, in the header)
FEDOPT_TASKS = {"emnist_cr": "EMNIST CR", "emnist_ae": "EMNIST AE", "shakespeare": "Shakespeare",
                "cifar100": "CIFAR-100", "stackoverflow_nwp": "Stack Overflow NWP",
                "stackoverflow_lr": "Stack Overflow LR"}
# --server_opt -> (its flagfiles' suffix, the paper's name of the method)
FEDOPT_OPTS = {"sgd": ("avg", "FedAvg"), "sgdm": ("avgm", "FedAvgM"), "adagrad": ("adagrad", "FedAdagrad"),
               "adam": ("adam", "FedAdam"), "yogi": ("yogi", "FedYogi")}
RMAH_TASKS = {"speech_commands": ("kws", "keyword spotting"), "cifar10": ("cifar10", "CIFAR-10")}
# The RM/AH paper's method ingredients and a task's overlay of one (as `experiments.tables`).
RMAH_INGREDIENTS = {"fa": "rmah_fa.cfg", "wd": "rmah_fa_wd.cfg", "rm": "rmah_fa_rm.cfg",
                    "ah": "rmah_fa_ah.cfg", "rm_ah": "rmah_fa_rm_ah.cfg"}
RMAH_OVERLAYS = {("kws", "ah"): "rmah_kws_ah.cfg", ("cifar10", "ah"): "rmah_cifar10_ah.cfg"}
# Flags that say one thing two ways: a user who spells one gets none of the others filled
# (--client_fraction=0.1 would otherwise lose to the paper's --clients_per_round).
ALTERNATIVES = (frozenset({"clients_per_round", "client_fraction"}),
                frozenset({"local_steps", "local_epochs"}))


@dataclasses.dataclass(frozen=True)
class Fill:
  """One flag of the setting: its value text in ``file`` (line ``line``), and the flag the user
  gave instead (``winner``: the flag itself, or its alternative), empty when it was filled."""

  name: str
  text: str
  file: str
  line: int
  winner: str = ""

  @property
  def filled(self) -> bool:
    return not self.winner


@dataclasses.dataclass(frozen=True)
class Setting:
  """What `apply` did: the paper and files of the setting (empty when none applies), the flags
  of the files, and, when it applied nothing to a task that has one, the header's words why."""

  paper: str = ""
  files: tuple[str, ...] = ()
  flags: tuple[Fill, ...] = ()
  off: str = ""

  @property
  def applied(self) -> bool:
    return bool(self.files) and not self.off


_LAST = [Setting()]  # the setting of this process's run, for `origin`


def files_for(task: str, server_opt: str, *, ah: bool = False, rm: bool = False,
              wd: bool = False) -> tuple[str, tuple[str, ...]]:
  """``(paper, flagfiles)`` of ``task`` with ``server_opt`` (empty when the paper did not run it),
  composed as `tff_robust.experiments.tables` composes the cell."""
  if task in FEDOPT_TASKS and server_opt in FEDOPT_OPTS:
    suffix, method = FEDOPT_OPTS[server_opt]
    return (f"Reddi et al.'s {FEDOPT_TASKS[task]} with {method}",
            ("fedopt_common.cfg", f"fedopt_{task}.cfg", f"fedopt_{task}_{suffix}.cfg"))
  if task in RMAH_TASKS and server_opt == "sgd":
    key, label = RMAH_TASKS[task]
    ingredients = (["ah"] + (["rm", "rm_ah"] if rm else []) if ah else ["fa"] + (["rm"] if rm else []))
    ingredients += ["wd"] if wd else []
    files = (["rmah_common.cfg", f"rmah_{key}.cfg"] + [RMAH_INGREDIENTS[i] for i in ingredients]
             + [RMAH_OVERLAYS[(key, i)] for i in ingredients if (key, i) in RMAH_OVERLAYS])
    method = "+".join(["FA"] + [m.upper() for m in ("rm", "ah", "wd") if m in ingredients])
    return f"the RM/AH paper's {label} with {method}", tuple(files)
  return "", ()


def _has_flagfile(argv: Sequence[str]) -> bool:
  return any(a.lstrip("-").split("=", 1)[0] == "flagfile" for a in argv[1:] if a.startswith("-"))


def _read(name: str, f: flags.FlagValues) -> list[tuple[str, str, int]]:
  """``(flag, value text, line)`` of flagfile ``name``, read by absl's flagfile reader."""
  path = os.path.join(FLAGS_DIR, name)
  with open(path) as fh:
    lines = [line.strip() for line in fh]
  out = []
  for arg in f.read_flags_from_files([f"--flagfile={path}"], force_gnu=True):
    flag, eq, text = arg.lstrip("-").partition("=")
    if not eq:  # --ah / --noah
      flag, text = (flag[2:], "false") if flag not in f and flag.startswith("no") else (flag, "true")
    out.append((flag, text, max(i for i, line in enumerate(lines, 1) if line == arg)))
  return out


def _shown(value: Any) -> str:
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, (list, tuple)):
    return ",".join(str(v) for v in value)
  return str(value)


def apply(argv: Sequence[str], f: flags.FlagValues = FLAGS) -> Setting:
  """Fills the flags ``argv`` did not spell with the paper setting of ``--task`` /
  ``--server_opt`` (call after absl parsed ``argv``); raises ValueError for ``--preset=paper``
  on a task without one."""
  mode = f.preset
  paper, files = files_for(f.task, f.server_opt, ah=f.ah, rm=f.rm_weight > 0, wd=f.wd_mu > 0)
  if mode == "paper" and not files:
    have = (", ".join(FEDOPT_TASKS) + " (server " + ", ".join(FEDOPT_OPTS) + "); "
            + ", ".join(RMAH_TASKS) + " (server sgd)")
    options.fail("preset", mode, f"--task={f.task} with --server_opt={f.server_opt} has no paper "
                 f"setting (tasks with one: {have}); choose auto or none")
  off = ""
  if not files and (f.task in FEDOPT_TASKS or f.task in RMAH_TASKS):
    off = (f"your flags and the defaults ({f.task}'s paper setting is for server "
           f"{'sgd' if f.task in RMAH_TASKS else ', '.join(FEDOPT_OPTS)}, not {f.server_opt})")
  elif files and mode == "none":
    off = f"your flags and the defaults (--preset=none; the task's paper setting: {paper})"
  elif files and mode == "auto" and _has_flagfile(argv):
    off = (f"your flagfiles and flags (the task's paper setting, {paper}, is not added under "
           "--flagfile; --preset=paper adds it)")
  fills = []
  if files and not off:
    spelled = [n for n in f if f[n].present]
    winner = {n: n for n in spelled}
    for group in ALTERNATIVES:
      hit = sorted(group & set(spelled))
      winner.update({n: hit[0] for n in group - set(spelled) if hit})
    last: dict[str, tuple[str, str, int]] = {}
    for name in files:
      for flag, text, line in _read(name, f):
        last[flag] = (text, name, line)
    for flag, (text, name, line) in last.items():
      if not winner.get(flag):
        setattr(f, flag, f[flag].parser.parse(text))
      fills.append(Fill(flag, text, name, line, winner.get(flag, "")))
  _LAST[0] = Setting(paper=paper, files=files, flags=tuple(fills), off=off)
  return _LAST[0]


def _changed(f: flags.FlagValues, name: str, text: str) -> bool:
  return _shown(f[name].default) != _shown(f[name].parser.parse(text))


def header_lines(setting: Setting, f: flags.FlagValues = FLAGS) -> list[str]:
  """The header's ``setting`` lines: the paper and its files, then per file the values it set
  that are not the defaults, then the user's flags that replaced a value of the paper's. None
  for a task without a paper setting (the offline default's header is unchanged)."""
  if not setting.paper and not setting.off:
    return []
  if not setting.applied:
    return [f"setting  {setting.off}"]
  lines = [f"setting  {setting.paper}: flags/{', '.join(setting.files)}; your flags win "
           "(--preset=none: without it)"]
  for name in setting.files:
    shown = [fl for fl in setting.flags if fl.file == name and fl.filled and _changed(f, fl.name, fl.text)]
    if shown:
      lines.append(f"         {name}: " + " ".join(f"--{fl.name}={fl.text}" for fl in shown))
  yours: dict[str, list[str]] = {}
  for fl in setting.flags:
    if fl.winner and (fl.winner != fl.name or _shown(f[fl.name].value) != _shown(f[fl.name].parser.parse(fl.text))):
      yours.setdefault(fl.winner, []).append(fl.text if fl.winner == fl.name else f"--{fl.name}={fl.text}")
  if yours:
    lines.append("         your flags: " + ", ".join(f"--{n}={_shown(f[n].value)} (paper {', '.join(p)})"
                                                   for n, p in yours.items()))
  return lines


def origin(name: str) -> Optional[str]:
  """``flags/FILE line N (the task's paper setting ...)`` when the setting of this run filled
  flag ``name``, for error messages (`tff_robust.cli.with_origin`); else None."""
  for fl in _LAST[0].flags:
    if fl.name == name and fl.filled:
      return (f"{os.path.join(FLAGS_DIR, fl.file)} line {fl.line}, the task's paper setting; "
              "give the flag, or --preset=none")
  return None
