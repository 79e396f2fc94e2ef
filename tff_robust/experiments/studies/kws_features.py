"""Must the keyword CNN *learn* features on the espeak corpus? A probe per acoustic setting.

For each setting of `tasks.espeak_effects` (``--settings``, preset names; ``--custom NAME=JSON``
adds others), a reduced corpus (``--speakers`` x ``--repeats``, Speech Commands' split by
speaker) is built under ``--work_dir`` (reused when its manifest is there) and turned into the
task's 32x32 log-mel features (`tasks.speech_commands.load_folder`). Then, on the project's
keyword CNN (`speech_commands.create_cnn`, features = its penultimate activation, Dense 1024):

(a) **random-init probe**: a ridge-regression classifier (one-hot targets, standardised features,
    ridge strength chosen on the validation split) on the features of the CNN at its initial
    weights, for each of ``--init_seeds``;
(b) **trained**: the same CNN trained centrally on the training split (Adam, plain Keras ``fit``,
    ``--epochs``), its validation and test accuracy, and the same probe on its trained features.

Rule (on the validation split): among the settings whose trained CNN reaches
``--min_trained`` validation accuracy and whose trained-feature probe reaches ``--min_probe``,
choose the one whose random-init probe (mean over seeds) is lowest; it meets the target when that
probe is at most ``--max_random``. Writes a markdown table (``--summary``) and the numbers
(``--json``), after each setting, so a stopped run keeps what it measured.

    nice -n 10 uv run python -m tff_robust.experiments.studies.kws_features  # every preset, weakest first
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from tff_robust.common import strict_json

SPLITS = ("train", "validation", "test")
RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)  # ridge strength / number of training examples


def ridge_probe(feats: dict[str, np.ndarray], labels: dict[str, np.ndarray],
                num_classes: int) -> dict[str, float]:
  """Validation and test accuracy of a ridge classifier on standardised features (+ bias); its
  strength (x the number of training examples, ``RIDGE_GRID``) is the best on validation."""
  mean, std = feats["train"].mean(0), feats["train"].std(0) + 1e-6
  design = {s: np.hstack([(feats[s] - mean) / std, np.ones((len(feats[s]), 1))]) for s in SPLITS}
  x = design["train"]
  eig, vec = np.linalg.eigh(x.T @ x)
  target = vec.T @ (x.T @ np.eye(num_classes)[labels["train"]])
  best = None
  for strength in RIDGE_GRID:
    weights = vec @ (target / (eig + strength * len(x))[:, None])
    acc = {s: float(np.mean(np.argmax(design[s] @ weights, 1) == labels[s])) for s in SPLITS[1:]}
    if best is None or acc["validation"] > best["validation"]:
      best = {**acc, "ridge": strength}
  return best


def penultimate(model, xs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The model's activation before its last layer, for each split."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  body = tf.keras.Model(model.inputs, model.layers[-2].output)
  return {s: body.predict(xs[s], batch_size=256, verbose=0) for s in SPLITS}


def build(folder: str, effects, args) -> float:
  """Builds the reduced corpus at ``folder`` unless it exists; seconds taken (0 if kept)."""
  from tff_robust.tasks import espeak_corpus  # pylint: disable=g-import-not-at-top
  if os.path.isfile(os.path.join(folder, "corpus.json")):
    return 0.0
  start = time.time()
  espeak_corpus.build_corpus(folder, args.speakers, args.repeats, workers=args.workers,
                             effects=effects)
  return time.time() - start


def measure(name: str, effects, args) -> dict[str, Any]:
  """Random-init probes and the centrally trained CNN on one setting's corpus."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_robust.tasks import speech_commands as sc  # pylint: disable=g-import-not-at-top
  folder = os.path.join(args.work_dir, name)
  seconds = build(folder, effects, args)
  manifest = sc.read_manifest(folder)
  data = sc.load_folder(folder)
  xs = {s: data[s][0].astype(np.float32) for s in SPLITS}
  ys = {s: data[s][1] for s in SPLITS}
  row: dict[str, Any] = {"setting": name, "effects": effects.to_json(),
                         "fingerprint": manifest["fingerprint"], "bytes": manifest["bytes"],
                         "build_seconds": round(seconds, 1),
                         "clips": {s: int(len(ys[s])) for s in SPLITS}, "random_init": []}
  for seed in args.init_seeds:
    tf.keras.utils.set_random_seed(seed)
    probe = ridge_probe(penultimate(sc.create_cnn(), xs), ys, sc.NUM_CLASSES)
    row["random_init"].append({"seed": seed, **probe})
    print(f"{name}: random init seed {seed}: probe {probe}", file=sys.stderr)
  tf.keras.utils.set_random_seed(args.train_seed)
  model = sc.create_cnn()
  model.compile(tf.keras.optimizers.Adam(args.lr),
                tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
  start = time.time()
  history = model.fit(xs["train"], ys["train"], batch_size=args.batch_size, epochs=args.epochs,
                      validation_data=(xs["validation"], ys["validation"]), verbose=2)
  row["trained"] = {
      "seed": args.train_seed, "epochs": args.epochs, "seconds": round(time.time() - start, 1),
      "val_acc_by_epoch": [round(float(a), 4) for a in history.history["val_accuracy"]],
      **{f"{s}_acc": float(model.evaluate(xs[s], ys[s], verbose=0)[1]) for s in SPLITS},
      "probe": ridge_probe(penultimate(model, xs), ys, sc.NUM_CLASSES)}
  print(f"{name}: trained {row['trained']}", file=sys.stderr)
  return row


def choose(rows: list[dict[str, Any]], args) -> dict[str, Any]:
  """The module docstring's rule, on validation numbers."""
  mean_random = lambda r: float(np.mean([p["validation"] for p in r["random_init"]]))
  eligible = [r for r in rows if r["trained"]["validation_acc"] >= args.min_trained
              and r["trained"]["probe"]["validation"] >= args.min_probe]
  if not eligible:
    return {"chosen": None, "meets_target": False}
  best = min(eligible, key=mean_random)
  return {"chosen": best["setting"], "random_init_probe_validation": mean_random(best),
          "meets_target": mean_random(best) <= args.max_random}


INTRO = """# Must the keyword CNN learn its features? Acoustic conditions for the espeak corpus

Written by `python -m tff_robust.experiments.studies.kws_features`. The espeak-ng corpus (`tasks/espeak_corpus.py`) speaks the
ten keywords cleanly and alike from one utterance to the next: a linear probe on the features of
the keyword CNN at its *random initial weights* already separates them
(docs/runs/kws_rm_check/probe.md), so federated training only has a head to average. `--effects`
(`tasks/espeak_effects.py`) makes each clip harder the ways real recordings are, every draw seeded
by the clip's id (parallel builds are byte-identical) and recorded under `parameters.effects` in
`corpus.json` (so in the fingerprint and in every run's `data.json`): background noise at a random
SNR (coloured 1/f^beta noise, or babble of 3-6 other espeak-ng speakers saying Speech Commands'
non-keyword words), reverberation by a synthetic room response (a direct path, then noise
decaying 60 dB over RT60), a time shift that may push part of the word out of the 1 s window, a
random band-pass and a random peak level. Off by default: the default build's clips and
fingerprint are unchanged (corpus version 2).

    python -m tff_robust.tasks.espeak_corpus DIR --effects=moderate   # or a JSON object of fields

Each setting below is a reduced corpus ({speakers} speakers x {repeats} repeat(s); speakers split
by Speech Commands' hash rule). *Random-init probe*: a ridge classifier (strength chosen on
validation) on the penultimate activation (Dense 1024) of `speech_commands.create_cnn` at its
initial weights, seeds {seeds}. *Trained*: the same CNN trained centrally on the training split
({epochs} epochs, Adam {lr}, batch {batch}, seed {train_seed}), its accuracy, and the same probe
on its trained features.
"""
NOTES = "<!-- notes: kept when the table is rewritten -->"


def options_table(rows: list[dict[str, Any]]) -> list[str]:
  """The effects of each setting: one row per setting."""
  span = lambda v, unit="": "-" if v is None else f"{v[0]:g} to {v[1]:g}{unit}"
  lines = ["| setting | SNR dB | babble share | overhang | reverb share | RT60 s | band-pass share "
           "| peak dBFS |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    e = r["effects"]
    babble = f"{e['babble_prob']:g}" if e["snr_db"] else "-"
    rt60 = span(e["rt60_s"]) if e["reverb_prob"] > 0 else "-"
    lines.append(f"| {r['setting']} | {span(e['snr_db'])} | {babble} | {e['overhang']:g} | "
                 f"{e['reverb_prob']:g} | {rt60} | {e['band_prob']:g} | {span(e['gain_db'])} |")
  return lines


def summary(rows: list[dict[str, Any]], verdict: dict[str, Any], args) -> str:
  pct = lambda v: f"{100 * v:.1f}"
  intro = INTRO.format(speakers=args.speakers, repeats=args.repeats, epochs=args.epochs, lr=args.lr,
                       batch=args.batch_size, train_seed=args.train_seed,
                       seeds=", ".join(map(str, args.init_seeds)))
  lines = [
      f"| setting | random-init probe, val (seeds {', '.join(map(str, args.init_seeds))}) | "
      "random-init probe, test | trained CNN, val | trained CNN, test | trained-feature probe, "
      "val | trained-feature probe, test | build s | MB |",
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    rand, t = r["random_init"], r["trained"]
    lines.append(
        f"| {r['setting']} | {' / '.join(pct(p['validation']) for p in rand)} | "
        f"{' / '.join(pct(p['test']) for p in rand)} | {pct(t['validation_acc'])} | "
        f"{pct(t['test_acc'])} | {pct(t['probe']['validation'])} | {pct(t['probe']['test'])} | "
        f"{r['build_seconds']:.0f} | {r['bytes'] / 1e6:.1f} |")
  rule = (f"Rule (validation split): among settings whose trained CNN reaches "
          f"{pct(args.min_trained)} % and whose trained-feature probe reaches "
          f"{pct(args.min_probe)} %, the lowest mean random-init probe; target: at most "
          f"{pct(args.max_random)} %.")
  chosen = (f"Chosen: **{verdict['chosen']}** (random-init probe "
            f"{pct(verdict['random_init_probe_validation'])} % on validation; target "
            f"{'met' if verdict['meets_target'] else 'not met'})." if verdict["chosen"]
            else "Chosen: none (no setting passes the trained thresholds).")
  return "\n".join([intro] + options_table(rows) + ["", "Accuracy, %:", ""] + lines
                   + ["", rule, chosen, "", NOTES]) + "\n"


def write(rows: list[dict[str, Any]], args) -> None:
  """The JSON record and the markdown summary (keeping the notes after ``NOTES``)."""
  verdict = choose(rows, args)
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  strict_json.write(args.json, {"args": vars(args), "rows": rows, "verdict": verdict})
  notes = ""
  if os.path.isfile(args.summary):
    with open(args.summary) as f:
      notes = f.read().partition(NOTES)[2].lstrip("\n")
  text = summary(rows, verdict, args)
  with open(args.summary, "w") as f:
    f.write(text + notes)
  print(text)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--settings", default=None, help="preset names (default: all)")
  parser.add_argument("--custom", action="append", default=[], help="NAME=JSON of Effects fields")
  parser.add_argument("--work_dir", default="/tmp/kws_features", help="scratch corpora")
  parser.add_argument("--speakers", type=int, default=200)
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--init_seeds", type=lambda s: [int(v) for v in s.split(",")], default=[0, 1])
  parser.add_argument("--train_seed", type=int, default=0)
  parser.add_argument("--epochs", type=int, default=8)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--lr", type=float, default=1e-3)
  parser.add_argument("--min_trained", type=float, default=0.80)
  parser.add_argument("--min_probe", type=float, default=0.85)
  parser.add_argument("--max_random", type=float, default=0.60)
  parser.add_argument("--summary", default="docs/runs/kws_features/summary.md")
  parser.add_argument("--json", default="docs/runs/kws_features/results.json")
  args = parser.parse_args(argv)
  from tff_robust.common import console  # pylint: disable=g-import-not-at-top
  console.quiet_native_logs(sys.argv)
  from tff_robust.tasks import espeak_effects  # pylint: disable=g-import-not-at-top
  names = args.settings.split(",") if args.settings is not None else espeak_effects.PRESETS
  settings = [(n, espeak_effects.parse(n)) for n in names if n]
  settings += [(c.split("=", 1)[0], espeak_effects.parse(c.split("=", 1)[1])) for c in args.custom]
  rows: list[dict[str, Any]] = []
  if os.path.isfile(args.json):  # resume: keep the settings already measured with these effects
    with open(args.json) as f:
      wanted = {n: e.to_json() for n, e in settings}
      rows = [r for r in json.load(f)["rows"] if wanted.get(r["setting"]) == r["effects"]]
  order = [n for n, _ in settings]
  for name, effects in settings:
    if not any(r["setting"] == name for r in rows):
      rows.append(measure(name, effects, args))
      rows.sort(key=lambda r: order.index(r["setting"]))
      write(rows, args)
  write(rows, args)
  return 0


if __name__ == "__main__":
  sys.exit(main())
