"""Stack Overflow tag prediction by logistic regression (seed 004, Stack Overflow LR).

Data: TFF's federated Stack Overflow, its word counts and tag counts, see
`tasks.stackoverflow` for the files and where they are looked up. Vocabularies:
the ``WORD_VOCAB_SIZE`` = 10,000 most frequent words and ``TAG_VOCAB_SIZE`` =
500 most frequent tags.

Preprocessing is TFF's baseline (``baselines.stackoverflow
.tag_prediction_preprocessing``): ``x`` is the normalised bag of words of the
post's tokens and title (each vocabulary word's count divided by the number of
in-vocabulary words; out-of-vocabulary words are dropped), float32
``[10000]``; ``y`` is the
multi-hot vector of the post's in-vocabulary tags, float32 ``[500]``.

Model: one Dense layer 10,000 -> 500 (multi-label logistic regression) that
outputs logits; loss: sigmoid cross-entropy averaged over tags and examples
(``BinaryCrossentropy(from_logits=True)``; TFF's baseline sums over the batch
instead, so its learning rates correspond to ours divided by the batch size).

Accuracy: Reddi et al. report recall@5 for this task, so `recall_at_5` is the
accuracy function: ``correct`` = number of true tags among each example's 5
highest logits, ``count`` = number of true tags (micro-averaged recall@5, as
``tf.keras.metrics.Recall(top_k=5)``).

Train/test/validation users as in ``stackoverflow_nwp``.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import tag_prediction_preprocessing

from tff_robust import tasks
from tff_robust.tasks import stackoverflow as so
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.base import Task, TaskOptions

NAME = "stackoverflow_lr"
DATA_SOURCES = ("tff",)
MODELS = ("logistic",)
PARTITIONS = ("natural",)
DEFAULT_NUM_CLIENTS = 0  # all users
WORD_VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE  # 10,000
TAG_VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_TAG_VOCAB_SIZE  # 500
TOP_K = 5


def create_logistic(word_vocab_size: int = WORD_VOCAB_SIZE,
                    tag_vocab_size: int = TAG_VOCAB_SIZE) -> tf.keras.Sequential:
  """Multi-label logistic regression: bag of words -> one logit per tag."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=(word_vocab_size,)),
      tf.keras.layers.Dense(tag_vocab_size),
  ], name="stackoverflow_lr")


def recall_at_5(y_true: tf.Tensor, logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """``(true tags among the top-5 logits, true tags)`` summed over the batch."""
  y_true = tf.cast(y_true, tf.float32)
  k = tf.minimum(TOP_K, tf.shape(logits)[-1])
  top = tf.math.top_k(logits, k=k).indices
  hits = tf.gather(y_true, top, batch_dims=1)
  return tf.reduce_sum(hits), tf.reduce_sum(y_true)


def make_preprocess(word_vocab: list[str], tag_vocab: list[str]):
  """TFF's baseline preprocessing, unbatched: posts -> ``(bag[words], tags[tags])`` float32."""
  return tff_sqlite.unbatched_baseline(tag_prediction_preprocessing.create_preprocess_fn,
                                       word_vocab, tag_vocab)


def build_task(options: TaskOptions) -> Task:
  """Builds Stack Overflow LR from TFF's on-disk Stack Overflow, word and tag counts."""
  options = tasks.resolve_options(NAME, options)
  word_vocab = so.load_word_vocab(options.data_dir, WORD_VOCAB_SIZE)
  tag_vocab = so.load_tag_vocab(options.data_dir, TAG_VOCAB_SIZE)
  splits = so.load_splits(options.data_dir, options.num_clients, options.seed,
                          make_preprocess(word_vocab, tag_vocab))
  return Task(
      name=NAME,
      train=splits.train,
      test=splits.test,
      validation=splits.validation,
      model_fn=lambda: create_logistic(len(word_vocab), len(tag_vocab)),
      loss_fn=lambda: tf.keras.losses.BinaryCrossentropy(from_logits=True),
      accuracy_fn=recall_at_5,
      num_classes=len(tag_vocab),
      info=(f"Stack Overflow LR from {splits.info}; {len(word_vocab)} words -> "
            f"{len(tag_vocab)} tags; model logistic; accuracy = recall@5."))
