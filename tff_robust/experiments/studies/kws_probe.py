"""Where a federated model fails: its head or its features. For each run directory, the global
model of its last checkpoint is evaluated three ways on the task's test split:

- its own accuracy, and how its argmax predictions spread over the classes;
- a linear probe: a fresh softmax layer trained (Adam, full batch) on the model's penultimate
  activations a_{M-1} of ``--probe_train`` pooled training examples, then tested on the test
  split's a_{M-1}. High probe accuracy with low model accuracy means the features still separate
  the classes and the failure is in the top layer;
- the same probe on the same architecture at its initial weights (``--init_seed``), the floor
  the features have to beat.

    uv run python -m tff_robust.experiments.studies.kws_probe docs/runs/kws_rm_check/fa_s0 docs/runs/kws_rm_check/rm_authors_s0

Each run is read with its own ``hparams.cfg`` (its task and data must be where it recorded them;
``--data_dir`` overrides). Prints a markdown table; ``--json_out`` also writes it.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags as absl_flags

from tff_robust.common import console, strict_json

console.quiet_native_logs(sys.argv)

FLAGS = absl_flags.FLAGS
absl_flags.DEFINE_integer("probe_train", 6000, "pooled training examples the probe is fitted on")
absl_flags.DEFINE_integer("probe_steps", 300, "full-batch Adam steps of the probe")
absl_flags.DEFINE_integer("init_seed", 0, "seed of the initial-weights baseline")
absl_flags.DEFINE_string("json_out", None, "also write the table's numbers here")
HELP = ("--help", "-help", "--helpshort", "-helpshort", "-h", "-?")


def exit_with_help_if_asked(argv: list[str]) -> None:
  """``--help`` prints this study's usage and exits 0 (absl's exits 1)."""
  if any(a.split("=", 1)[0] in HELP for a in argv[1:]):
    print(__doc__.strip() + "\n\nflags:\n" + FLAGS.module_help(__name__))
    sys.exit(0)


if __name__ == "__main__":
  exit_with_help_if_asked(sys.argv)  # before TensorFlow is imported (7 CPU-s)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tff_robust import tasks  # noqa: E402
from tff_robust.flags import definitions  # noqa: E402
from tff_robust.runtime.context import disown_default_context  # noqa: E402

definitions.define_flags()


def features(model: tf.keras.Sequential, ds: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
  body = tf.keras.Sequential(model.layers[:-1])
  xs, ys = [], []
  for x, y in ds.batch(256):
    xs.append(body(x, training=False).numpy())
    ys.append(y.numpy())
  return np.concatenate(xs), np.concatenate(ys)


def probe(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
          num_classes: int, steps: int) -> float:
  """Test accuracy of a softmax layer fitted on standardised features (full-batch Adam)."""
  mean, std = train[0].mean(0), train[0].std(0) + 1e-6
  x_tr, x_te = (train[0] - mean) / std, (test[0] - mean) / std
  tf.keras.utils.set_random_seed(0)
  head = tf.keras.Sequential([tf.keras.Input((x_tr.shape[1],)), tf.keras.layers.Dense(num_classes)])
  head.compile(tf.keras.optimizers.Adam(0.01),
               tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
  head.fit(x_tr, train[1], batch_size=len(x_tr), epochs=steps, verbose=0)
  return float(head.evaluate(x_te, test[1], verbose=0)[1])


def global_model(run_dir: str, task) -> tf.keras.Sequential:
  """The global model of ``run_dir``'s last checkpoint: the first run of saved leaves whose
  shapes are the model's weights (the process state leads with its model weights; the server
  optimizers' slots, which share those shapes, come after them)."""
  root = os.path.join(run_dir, "checkpoints")
  last = max(os.listdir(root), key=lambda d: int(d.rsplit("_", 1)[1]))
  leaves = tf.nest.flatten(tf.saved_model.load(os.path.join(root, last))())
  model = task.model_fn()
  want = [tuple(v.shape) for v in model.weights]
  shapes = [tuple(getattr(x, "shape", ())) for x in leaves]
  start = next(i for i in range(len(leaves)) if shapes[i:i + len(want)] == want)
  model.set_weights([np.asarray(x) for x in leaves[start:start + len(want)]])
  print(f"{run_dir}: {last}", file=sys.stderr)
  return model


def main(argv: list[str]) -> None:
  rows, override = [], FLAGS.data_dir if FLAGS["data_dir"].present else None
  json_out, train_n, steps, init_seed = FLAGS.json_out, FLAGS.probe_train, FLAGS.probe_steps, FLAGS.init_seed
  for run_dir in argv[1:]:  # each run re-parses the flags from its own record
    FLAGS.unparse_flags()
    FLAGS([argv[0], f"--flagfile={os.path.join(run_dir, 'hparams.cfg')}", f"--root_output_dir="
           f"{os.path.dirname(os.path.abspath(run_dir))}"] + ([f"--data_dir={override}"] if override else []))
    config = definitions.parse()
    task = tasks.load_task(config.task, config.task_options)
    pooled = task.train.create_tf_dataset_from_all_clients().shuffle(100_000, seed=0)
    train_set = pooled.take(train_n)
    model = global_model(run_dir, task)
    test_x, test_y = features(model, task.test)
    preds = np.argmax(model.predict(task.test.batch(256), verbose=0), 1)
    acc = float(np.mean(preds == test_y))
    share = np.bincount(preds, minlength=task.num_classes) / len(preds)
    fitted = probe(features(model, train_set), (test_x, test_y), task.num_classes, steps)
    tf.keras.utils.set_random_seed(init_seed)
    fresh = task.model_fn()
    floor = probe(features(fresh, train_set), features(fresh, task.test), task.num_classes, steps)
    rows.append({"run": os.path.basename(os.path.normpath(run_dir)), "model_acc": acc,
                 "top_class_share": float(share.max()), "classes_predicted": int((share > 0).sum()),
                 "probe_acc": fitted, "probe_acc_init": floor})
  print("| run | model test acc | largest predicted-class share | classes predicted | probe test acc "
        "(a_{M-1}) | probe at initial weights |")
  print("| --- | --- | --- | --- | --- | --- |")
  for r in rows:
    print(f"| {r['run']} | {100 * r['model_acc']:.1f} | {100 * r['top_class_share']:.1f} | "
          f"{r['classes_predicted']} | {100 * r['probe_acc']:.1f} | {100 * r['probe_acc_init']:.1f} |")
  if json_out:
    strict_json.write(json_out, rows)


def parse_argv(argv: list[str]) -> list[str]:
  """absl's parsing, but ``--help`` prints this study's usage and exits 0 (absl's exits 1) and a
  bad flag exits 2 with one line."""
  exit_with_help_if_asked(argv)
  try:
    return FLAGS(argv)
  except absl_flags.Error as e:
    print(f"error: {e} (see --help)", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  disown_default_context()  # runs no federated computation: no TFF worker, no exit traceback
  app.run(main, flags_parser=parse_argv)
