"""Stack Overflow next-word prediction (one client per user; seed 004, Stack Overflow NWP).

Data: TFF's federated Stack Overflow and its word counts, see
`tasks.stackoverflow` for the files and where they are looked up. The
vocabulary is the ``VOCAB_SIZE`` = 10,000 most frequent words.

Preprocessing is TFF's baseline (``baselines.stackoverflow
.word_prediction_preprocessing``): a post's first 20 words become ids
(``0`` = pad, ``1..10000`` = words, ``10001`` = OOV, ``10002`` = BOS,
``10003`` = EOS), BOS is prepended and EOS appended when the post is shorter
than 20 words, the result is padded to 21 ids; an element is ``(x, y) =
(ids[:-1], ids[1:])``, two int64 ``[20]`` sequences.

The model is TFF's baseline (Reddi et al.): Embedding(10004, 96, mask_zero) ->
LSTM 670 -> Dense 96 -> Dense 10004 logits at every position. Accuracy
(`accuracy_fn`) counts predictions only where the target is a real in-vocabulary
word, i.e. not pad, OOV, BOS or EOS.

Train: the ``train`` split; ``--num_clients`` caps the users as for
``emnist_cr`` (``0``, the default ``DEFAULT_NUM_CLIENTS``, = all 342,477).
Test: up to 10 posts from each of 1,000 ``--seed``-sampled ``test`` users;
validation likewise from ``heldout`` users (see `tasks.stackoverflow.eval_sample`).
"""

from __future__ import annotations

import functools

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from tff_robust import tasks
from tff_robust.tasks import base
from tff_robust.tasks import stackoverflow as so
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.base import Task, TaskOptions

NAME = "stackoverflow_nwp"
DATA_SOURCES = ("tff",)
MODELS = ("lstm",)
PARTITIONS = ("natural",)
DEFAULT_NUM_CLIENTS = 0  # all users
VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE  # 10,000
SEQUENCE_LENGTH = tff.simulation.baselines.stackoverflow.DEFAULT_SEQUENCE_LENGTH  # 20
NUM_OOV_BUCKETS = 1


def special_tokens(vocab_size: int = VOCAB_SIZE) -> tuple[int, int, int, int]:
  """``(pad, oov, bos, eos)`` ids of TFF's preprocessing for a ``vocab_size``-word vocabulary."""
  t = word_prediction_preprocessing.get_special_tokens(vocab_size, NUM_OOV_BUCKETS)
  return t.padding, t.out_of_vocab[0], t.beginning_of_sentence, t.end_of_sentence


def extended_vocab_size(vocab_size: int = VOCAB_SIZE) -> int:
  """Number of ids the model predicts: words + pad + OOV + BOS + EOS."""
  return vocab_size + 3 + NUM_OOV_BUCKETS


def create_lstm(vocab_size: int = VOCAB_SIZE) -> tf.keras.Model:
  """TFF's Stack Overflow NWP model: [batch, time] ids -> [batch, time, vocab + 4] logits."""
  return word_prediction_models.create_recurrent_model(vocab_size=extended_vocab_size(vocab_size))


def make_accuracy_fn(vocab_size: int = VOCAB_SIZE):
  """Top-1 accuracy counts over positions whose target is an in-vocabulary word."""
  return functools.partial(base.masked_accuracy,
                           masked_tokens=tuple(int(t) for t in special_tokens(vocab_size)))


def make_preprocess(vocab: list[str]):
  """TFF's baseline preprocessing, unbatched: posts -> ``(x[20], y[20])`` int64 pairs."""
  return tff_sqlite.unbatched_baseline(word_prediction_preprocessing.create_preprocess_fn, vocab,
                                       sequence_length=SEQUENCE_LENGTH,
                                       num_out_of_vocab_buckets=NUM_OOV_BUCKETS)


def build_task(options: TaskOptions) -> Task:
  """Builds Stack Overflow NWP from TFF's on-disk Stack Overflow and word counts."""
  options = tasks.resolve_options(NAME, options)
  vocab = so.load_word_vocab(options.data_dir, VOCAB_SIZE)
  splits = so.load_splits(options.data_dir, options.num_clients, options.seed, make_preprocess(vocab))
  return Task(
      name=NAME,
      train=splits.train,
      test=splits.test,
      validation=splits.validation,
      model_fn=lambda: create_lstm(len(vocab)),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=make_accuracy_fn(len(vocab)),
      num_classes=extended_vocab_size(len(vocab)),
      info=(f"Stack Overflow NWP from {splits.info}; {len(vocab)}-word vocabulary, sequences of "
            f"{SEQUENCE_LENGTH}; model lstm (accuracy excludes pad/OOV/BOS/EOS targets)."))
