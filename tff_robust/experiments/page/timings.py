"""The results page's Table 4 and round-time section, from the benches' JSON records
(``ROOT/bench/client_time.json``, ``round_time.json``): every time with its spread, every time
ratio with its spread over repetitions, the CPU ratio and the operation-count ratio beside it.

Two formats are read: the current benches' (`bench/client_time.py`, `bench/round_time.py`:
medians with interquartile ranges, each repetition's ratios, CPU and op-count ratios) and the
older one (median, std and ratio only), whose missing figures the page calls "not recorded".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tff_robust.common import markdown

NOT_RECORDED = "not recorded"
# A bench task whose row of the seed's Table 4 is named otherwise than its upper-case name.
SEED_TASK = {"speech_commands": "KWS"}


def spread(cell: Mapping, digits: int = 3) -> str:
  """``median [q1, q3]``, ``median (IQR w)`` or ``median (sd s)``: what the record holds."""
  med = f"{cell['median']:.{digits}f}"
  if "q1" in cell and "q3" in cell:
    return f"{med} [{cell['q1']:.{digits}f}, {cell['q3']:.{digits}f}]"
  if "iqr" in cell:
    return f"{med} (IQR {cell['iqr']:.{digits}f})"
  return f"{med} (sd {cell['std']:.{digits}f})" if "std" in cell else med


def ratio(value: float, by_repetition: Sequence[float] = ()) -> str:
  """``×1.59`` with each repetition's ratio beside it (``reps ×1.55, ×1.62``) when recorded."""
  reps = f" (reps {', '.join(f'×{r:.2f}' for r in by_repetition)})" if len(by_repetition) > 1 else ""
  return f"×{value:.2f}{reps}"


def _times(key: str, cell: Mapping) -> str:
  return f"×{cell[key]:.2f}" if key in cell else NOT_RECORDED


def table4_lines(ct: Mapping, methods: Sequence[str], seed: Mapping[str, Mapping[str, float]],
                 seed_keys: Mapping[str, str]) -> list[str]:
  """Table 4: one line per task and method (``methods``: the JSON's labels, FA first); ``seed``:
  the seed's seconds per task (upper case, or `SEED_TASK`'s name) and method key; ``seed_keys``:
  label -> method key."""
  header = ["task", "method", "s / round", "time × FA", "CPU × FA", "ops × FA", "seed (TitanXP): s, × FA"]
  body = []
  for task, per in ct["tasks"].items():
    theirs = seed.get(SEED_TASK.get(task, task.upper()), {})
    for label in methods:
      cell = per[label]
      key = seed_keys[label]
      body.append([task, label, spread(cell), ratio(cell["ratio_to_fa"], cell.get("ratio_to_fa_by_repetition", ())),
                   _times("cpu_ratio_to_fa", cell), _times("ops_ratio_to_fa", cell),
                   f"{theirs[key]:.2f} ×{theirs[key] / theirs['fa']:.2f}" if key in theirs else "not reported"])
  return [_client_time_text(ct), ""] + markdown.table(header, body) + [""]


def _client_time_text(ct: Mapping) -> str:
  reps = ct.get("repetitions")
  how = (f"{reps} repetitions of {ct['rounds']} rounds after {ct.get('warmup', 0)} discarded, pooled"
         if reps else f"{ct['rounds']} rounds")
  return (f"Seconds per round with one client doing {ct['steps']} SGD steps of batch {ct['batch_size']}, "
          f"median over {how}, all methods interleaved in one process (`{ct['command']}`). Spread: "
          "[q1, q3] or the interquartile range (IQR) of the rounds, or their sd in an older record; "
          "time × FA is the ratio of medians, with each repetition's ratio beside it; CPU × FA the "
          "ratio of CPU seconds (the process and its TFF worker: it moves less with the machine's "
          "load); ops × FA the ratio of one local step's floating-point operations (TF's per-op "
          "statistics). Two methods with the same ops × FA do the same arithmetic per step: read a gap "
          "between their time ratios against the spread beside them.")


def round_time_lines(rt: Mapping) -> list[str]:
  """The round-time comparison: pooled medians and ratios, then each repetition with its spread."""
  med = rt["median_seconds"]
  lines = [f"One round of {rt['clients']} clients × {rt['steps']} steps of batch {rt['batch_size']} on "
           f"{rt['task']} (`{rt['command']}`), median of {rt['rounds']} rounds"
           + (f" a repetition after {rt.get('warmup', 0)} discarded, {len(rt['repetitions'])} repetitions "
              "pooled" if rt.get("repetitions") else "")
           + f": tff_robust {med['tff_robust']:.3f} s, TFF's `build_weighted_fed_avg` "
           f"{med['tff_fedavg']:.3f} s, a plain TF loop {med['plain_tf']:.3f} s; ratios of the medians "
           f"{rt['ratio_to_tff_fedavg']:.2f}× and {rt['ratio_to_plain_tf']:.2f}×. The three do the same "
           "SGD work (the same clients, steps, batch and model), so their operation-count ratio is 1 "
           "by construction (not measured).", ""]
  reps = rt.get("repetitions")
  if not reps:
    return lines + ["This record is of an older bench: it holds no quartiles, repetitions or CPU "
                    "ratios (not recorded).", ""]
  names = ("tff_robust", "tff_fedavg", "plain_tf")
  header = (["repetition"] + [f"{n}: s [q1, q3]" for n in names]
            + [f"tff_robust / {d}: medians; round by round [q1, q3]; CPU" for d in names[1:]])
  body = []
  for i, rep in enumerate(reps, 1):
    secs, ratios = rep["seconds"], rep["ratios"]
    body.append([str(i)] + [spread(secs[n]) for n in names]
                + [f"×{r['median_ratio']:.2f}; ×{r['paired']:.2f} [{r['paired_q1']:.2f}, "
                   f"{r['paired_q3']:.2f}]; CPU ×{r['cpu_ratio']:.2f}"
                   for r in (ratios[d] for d in names[1:])])
  return lines + markdown.table(header, body) + [""]
