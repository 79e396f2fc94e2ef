"""What a run prints: one header, one line per round (under a tqdm progress bar with ETA on a
terminal), and a summary saying where the outputs are.

Everything goes to stdout; errors go to stderr. Nothing here reads flags: `main` passes
plain values. Importing this module is cheap (no TensorFlow), so `quiet_native_logs` can run
before TensorFlow is imported.
"""

from __future__ import annotations

import csv
import math
import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Optional, TextIO

from tff_robust.common.run_settings import LoopSettings, ProcessSettings


def requested_verbosity(argv: Sequence[str]) -> int:
  """absl's ``--verbosity`` / ``-v`` as written on the command line (0 when absent)."""
  value = "0"
  args = list(argv[1:])
  for i, arg in enumerate(args):
    for prefix in ("--verbosity", "-verbosity", "--v", "-v"):
      if arg == prefix and i + 1 < len(args):
        value = args[i + 1]
      elif arg.startswith(prefix + "="):
        value = arg.split("=", 1)[1]
  try:
    return int(value)
  except ValueError:
    return 0  # absl reports the bad value when it parses the flags


def quiet_native_logs(argv: Sequence[str]) -> None:
  """Silences TensorFlow's C++ start-up logs (CUDA factories, CPU features) unless
  ``--verbosity`` ≥ 1 is on the command line. Call before TensorFlow is imported."""
  if requested_verbosity(argv) >= 1:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
  else:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def configure_logging(verbosity: int, project_info: bool = False) -> None:
  """Library logs (TensorFlow's checkpoint assets, TFF's program state, absl) at WARNING by
  default; ``verbosity`` ≥ 1 brings their INFO lines back (≥ 2: DEBUG). ``project_info``
  keeps this project's own INFO lines (the tuning study's progress)."""
  import logging  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  level = logging.WARNING if verbosity < 1 else (logging.INFO if verbosity == 1 else logging.DEBUG)
  if verbosity < 1:  # absl's own verbosity: TensorFlow restores it (not the root level) after saving
    absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("tensorflow").setLevel(level)
  logger = logging.getLogger("tff_robust")
  logger.setLevel(min(level, logging.INFO) if project_info else level)
  if project_info and verbosity < 1 and not any(getattr(h, "plain", False) for h in logger.handlers):
    handler = logging.StreamHandler(sys.stdout)  # the project's lines as lines, without absl's prefix
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.plain = True
    logger.addHandler(handler)
    logger.propagate = False


def python_command(cwd: Optional[str] = None) -> str:
  """How to start this interpreter from the user's shell, for the commands a run prints: ``uv
  run python`` under ``uv run`` (with ``--project`` outside the project), ``python`` when that
  is this interpreter, else its full path."""
  project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  venv = os.environ.get("VIRTUAL_ENV")
  if ("UV_RUN_RECURSION_DEPTH" in os.environ and venv and os.path.exists(os.path.join(project, "pyproject.toml"))
      and os.path.realpath(venv) == os.path.realpath(sys.prefix)):
    here, top = os.path.realpath(cwd or os.getcwd()), os.path.realpath(project)
    inside = here == top or here.startswith(top + os.sep)
    return "uv run python" if inside else f"uv run --project {shlex.quote(project)} python"
  found = shutil.which("python")
  if found and os.path.abspath(found) == os.path.abspath(sys.executable):
    return "python"
  return shlex.quote(sys.executable)


# ---- header --------------------------------------------------------------------------------


def _fmt(v: float) -> str:
  return f"{v:.4g}"


def describe_robustness(process: ProcessSettings, loop: LoopSettings) -> str:
  """One line: the aggregator and the fault model (dropout, byzantine attack, guard)."""
  r = process.robust
  agg = r.aggregator
  if agg == "trimmed_mean":
    agg += f" ({_fmt(r.trim_fraction)} per end)"
  elif agg == "norm_clip":
    agg += f" (norm {_fmt(r.clip_norm)})" if r.clip_norm else " (adaptive norm)"
  elif agg == "multi_krum":
    agg += f" (f {r.byzantine_f}, " + (f"{r.multi_krum_select} averaged)" if r.multi_krum_select
                                       else "n − f averaged)")
  elif agg in ("krum", "bulyan"):
    agg += f" (f {r.byzantine_f})"
  elif agg == "geometric_median":
    agg += f" ({plural(r.rfa_iterations, 'Weiszfeld step')})"
  parts = [f"aggregator {agg}" + ("" if r.zeroing else ", no zeroing")]
  if loop.client_dropout_rate > 0:
    parts.append(f"client dropout {_fmt(loop.client_dropout_rate)}")
  if r.byzantine_attack != "none":
    parts.append(f"attack {r.byzantine_attack} on {_fmt(loop.byzantine_fraction)} of clients")
  else:
    parts.append("no attack")
  if loop.divergence_factor > 0:
    parts.append(f"divergence guard ×{_fmt(loop.divergence_factor)}")
  if loop.update_norm_guard > 0:
    parts.append(f"update-norm guard ×{_fmt(loop.update_norm_guard)} of the median of "
                 f"{plural(loop.update_norm_guard_window, 'accepted round')}")
  return ", ".join(parts)


def describe_training(process: ProcessSettings, loop: LoopSettings) -> str:
  """Rounds and local training: steps or epochs, batch, client lr and its schedule."""
  c = process.client
  local = (plural(c.local_steps, "local step") if c.local_steps > 0 else plural(c.local_epochs, "local epoch"))
  schedule = "" if c.lr_schedule == "constant" else f" {c.lr_schedule}"
  return f"{_rounds(loop.rounds)} of {local}, batch {c.batch_size}, client lr {_fmt(c.lr)}{schedule}"


def header(*, task: str, task_info: str, num_clients: int, per_round: int, process: ProcessSettings,
           loop: LoopSettings, method: str, workers: Sequence[str] = (), notes: Sequence[str] = ()) -> list[str]:
  """The lines printed before training (``process``: `ProcessConfig`, ``loop``: `LoopConfig`,
  ``method``: the methods' line, `algorithms.methods.registry.describe`)."""
  lines = [f"task     {task}: {task_info}".rstrip(": "),
           f"clients  {num_clients} in all, {per_round} per round; {describe_training(process, loop)}",
           f"method   {method}",
           f"robust   {describe_robustness(process, loop)}",
           f"output   {loop.output_dir}"]
  if workers:
    lines.append(f"workers  {', '.join(workers)}")
  lines += list(notes)
  return lines


# ---- rounds ----------------------------------------------------------------------------------


def round_events(metrics: Mapping[str, float]) -> list[str]:
  """The robustness events of a round, in words (empty for an uneventful round)."""
  events = []
  if metrics.get("skipped_round", 0) > 0:
    events.append("SKIPPED (no client survived)")
  if metrics.get("rejected_round", 0) > 0:
    guard = metrics.get("guard_loss")
    events.append("REJECTED" + (f" (guard loss {_fmt(guard)})" if guard is not None else ""))
  for key, word in (("dropped_clients", "dropped"), ("byzantine_clients", "byzantine"),
                    ("nonfinite_clients", "non-finite"), ("agg_nonfinite_count", "agg non-finite"),
                    ("agg_zeroed_count", "zeroed"), ("agg_clipped_count", "clipped")):
    n = metrics.get(key, 0.0)
    if n and n > 0:
      events.append(f"{word} {int(n)}")
  return events


def format_round(round_num: int, rounds: int, metrics: Mapping[str, float],
                 eta_seconds: Optional[float] = None) -> str:
  """``round  3/30  local train loss 0.212 acc 0.956  lr 0.05 steps 20  10 clients  1.2s  eta 0:33
  | test ...``: "local train" is the clients' own loss and accuracy over the round's local steps
  (example-weighted), "test" the aggregated model's on the test split."""
  width = len(str(rounds))
  parts = [f"round {round_num:>{width}}/{rounds}"]
  if "train_loss" in metrics:
    train = f"local train loss {metrics['train_loss']:.4f}"
    if "train_accuracy" in metrics:
      train += f" acc {metrics['train_accuracy']:.3f}"
    parts.append(train)
  if "client_lr" in metrics:
    parts.append(f"lr {metrics['client_lr']:.3g} steps {int(round(metrics.get('local_steps', 0)))}")
  if "num_clients" in metrics:
    parts.append(f"{int(metrics['num_clients'])} clients")
  if "dp_epsilon" in metrics:  # DP-FedAvg's user-level ε so far (at the run's δ)
    parts.append(f"ε {metrics['dp_epsilon']:.3g}")
  if "round_seconds" in metrics:
    parts.append(f"{metrics['round_seconds']:.1f}s")
  if eta_seconds is not None:
    parts.append(f"eta {format_seconds(eta_seconds)}")
  parts += round_events(metrics)
  if "test_loss" in metrics:
    test = f"test loss {metrics['test_loss']:.4f}"
    if "test_accuracy" in metrics:
      test += f" acc {metrics['test_accuracy']:.4f}"
    if "val_accuracy" in metrics:
      test += f"  val acc {metrics['val_accuracy']:.4f}"
    parts.append("| " + test)
  return "  ".join(parts)


def plural(n: int, noun: str) -> str:
  """``1 round``, ``2 rounds``."""
  return f"{n} {noun}" + ("" if n == 1 else "s")


def _rounds(n: int) -> str:
  return plural(n, "round")


def format_seconds(seconds: float) -> str:
  seconds = int(round(seconds))
  h, rest = divmod(seconds, 3600)
  m, s = divmod(rest, 60)
  return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunConsole:
  """The loop's progress callbacks (`loop.TrainingLoop.run(progress=...)`): the header once
  the start round is known, then a line per round, under a tqdm bar when ``out`` is a terminal."""

  def __init__(self, header_lines: Sequence[str], rounds: int, out: Optional[TextIO] = None,
               earlier_rounds: int = 0):
    self.header_lines = list(header_lines)
    self.rounds = rounds
    self.out = sys.stdout if out is None else out  # the stdout of now, not of the import
    self.earlier_rounds = earlier_rounds  # rounds an earlier start recorded (metrics.csv)
    self.first_round = 0
    self.last_round = 0
    self._bar = None
    self._t0 = time.monotonic()
    self._done_here = 0

  def _print(self, line: str) -> None:
    if self._bar is not None:
      self._bar.write(line, file=self.out)
    else:
      print(line, file=self.out, flush=True)

  def start(self, resumed_round: int) -> None:
    """Prints the header (with the round a run resumes from) and opens the bar."""
    self.first_round = self.last_round = resumed_round
    lines = list(self.header_lines)
    if resumed_round:
      lines.append(f"resumed  from round {resumed_round} (its checkpoint); "
                   f"{_rounds(max(0, self.rounds - resumed_round))} to go")
    elif self.earlier_rounds:
      lines.append(f"start    round 1: no checkpoint yet (an earlier start stopped before its first; "
                   f"its {_rounds(self.earlier_rounds)} are trained again)")
    for line in lines:
      print(line, file=self.out, flush=True)
    self._t0 = time.monotonic()
    if self.out.isatty() and self.rounds > resumed_round:
      from tqdm import tqdm  # pylint: disable=g-import-not-at-top
      self._bar = tqdm(total=self.rounds, initial=resumed_round, file=self.out, unit="round",
                       dynamic_ncols=True, leave=False)

  def round(self, round_num: int, metrics: Mapping[str, float]) -> None:
    """One line for the round just finished (its metrics as the loop records them)."""
    self._done_here += 1
    self.last_round = round_num
    per_round = (time.monotonic() - self._t0) / self._done_here
    eta = per_round * (self.rounds - round_num) if round_num < self.rounds else None
    self._print(format_round(round_num, self.rounds, metrics, eta))
    if self._bar is not None:
      self._bar.update(round_num - self._bar.n)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None


# ---- summary ---------------------------------------------------------------------------------


def read_metric(output_dir: str, column: str, up_to_round: Optional[int] = None) -> list[tuple[int, float]]:
  """``(round, value)`` of every row of ``metrics.csv`` that has ``column`` (the last row per round)."""
  path = os.path.join(output_dir, "metrics.csv")
  if not os.path.exists(path):
    return []
  values: dict[int, float] = {}
  with open(path, newline="") as f:
    for row in csv.DictReader(f):
      try:
        r, v = int(float(row["round"])), float(row.get(column) or "nan")
      except (KeyError, ValueError):
        continue
      if math.isfinite(v) and (up_to_round is None or r <= up_to_round):
        values[r] = v
  return sorted(values.items())


def summary(*, output_dir: str, final: Mapping[str, float], last_round: int, wall_seconds: float,
            rounds_this_session: int, plots: Sequence[tuple[str, str]] = (),
            python: Optional[str] = None) -> list[str]:
  """The lines printed after training: final and best test metrics, wall time, outputs, plot
  (``plots``: ``(label, file name)`` of the run's further plots, a method's own;
  ``python``: how to start Python, default `python_command`)."""
  python = python or python_command()
  lines = []
  acc = final.get("test_accuracy")
  if acc is not None:
    text = f"final    test accuracy {acc:.4f}"
    if "test_loss" in final:
      text += f", loss {final['test_loss']:.4f}"
    text += f" (round {last_round})"
    history = read_metric(output_dir, "test_accuracy", last_round)
    if history:
      best_round, best = max(history, key=lambda rv: (rv[1], -rv[0]))
      text += f"; best {best:.4f} at round {best_round}"
    lines.append(text)
  elif final:
    lines.append("final    " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(final.items())))
  if "dp_epsilon" in final:
    lines.append(f"privacy  user-level (ε, δ) = ({final['dp_epsilon']:.4g}, {final.get('dp_delta', math.nan):.3g}) "
                 f"after {_rounds(last_round)} (DP-FedAvg; the model sequence, not the clients' diagnostics)")
  lines.append(f"time     {format_seconds(wall_seconds)} wall, {_rounds(rounds_this_session)} trained now")
  j = lambda *p: os.path.join(output_dir, *p)  # noqa: E731
  lines += [f"metrics  {j('metrics.csv')} (one row per round)",
            f"final    {j('final_metrics.json')}",
            f"tboard   tensorboard --logdir {shlex.quote(j('tensorboard'))}",
            f"ckpts    {j('checkpoints')} (run the same command again to resume or extend --rounds)",
            f"hparams  {j('hparams.cfg')} (reuse with --flagfile)"]
  run = shlex.quote(f"run={output_dir}")
  lines.append(f"plot     {python} -m tff_robust.plot {shlex.quote(j('curves.png'))} {run} "
               "--metrics=train_loss,test_accuracy")
  for label, name in plots:
    lines.append(f"plot {label}  {python} -m tff_robust.plot {shlex.quote(j(name))} {run}")
  if os.path.exists(j("clients.csv")):  # --client_metrics
    lines.insert(lines.index(f"final    {j('final_metrics.json')}"),
                 f"clients  {j('clients.csv')} (one row per round per client)")
    lines.append(f"plot     {python} -m tff_robust.plot {shlex.quote(j('clients.png'))} {run} "
                 "--clients=weight_given")
  return lines
