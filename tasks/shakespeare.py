"""Federated Shakespeare next-character prediction (715 roles as clients; seed 004).

The task of Reddi et al. (seed 004, Shakespeare): TFF's federated Shakespeare
as TFF's loader ``tff.simulation.datasets.shakespeare.load_data`` returns it,
from ``<data_dir>/shakespeare.sqlite`` (``data_dir`` defaults to TFF's cache
``~/.tff``). That loader downloads when the file is absent; this module never
lets it: it raises `DataMissingError` first.

Preprocessing is TFF's baseline (``baselines.shakespeare
.char_prediction_preprocessing``): each snippet becomes character ids
(``0`` = pad, ``1..86`` = TFF's 86-character vocabulary, ``87`` = OOV,
``88`` = BOS, ``89`` = EOS), wrapped in BOS/EOS, padded to a multiple of 81 and
cut into 81-id chunks; an element is ``(x, y) = (chunk[:-1], chunk[1:])``, two
int64 ``[80]`` sequences.

The model is TFF's baseline (McMahan et al. 2017): Embedding(90, 8, mask_zero)
-> LSTM 256 -> LSTM 256 -> Dense 90 logits at every position. Accuracy
(`accuracy_fn`) counts predictions only where the target is a real character,
i.e. not pad, OOV, BOS or EOS.

``--num_clients`` caps the training clients as for ``emnist_cr``: ``0`` (the
default, ``DEFAULT_NUM_CLIENTS``), or at least 715, keeps all of them; otherwise
a ``--seed``-determined random sample.
The test set is every role's test snippets pooled.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.shakespeare import char_prediction_models
from tensorflow_federated.python.simulation.baselines.shakespeare import char_prediction_preprocessing

from tff_robust import tasks
from tff_robust.tasks import base
from tff_robust.tasks import tff_sqlite
from tff_robust.tasks.base import Task, TaskOptions

NAME = "shakespeare"
DATA_SOURCES = ("tff",)
MODELS = ("lstm",)
PARTITIONS = ("natural",)
DEFAULT_NUM_CLIENTS = 0  # all 715 roles
SEQUENCE_LENGTH = 80
VOCAB_SIZE = len(char_prediction_preprocessing.CHAR_VOCAB) + 4  # 90: chars + pad, OOV, BOS, EOS.
PAD, OOV, BOS, EOS = char_prediction_preprocessing.get_special_tokens()
SQLITE_NAME = "shakespeare.sqlite"  # What TFF's loader decompresses shakespeare.sqlite.lzma to.


def sqlite_path(data_dir: str | None) -> str:
  """Where TFF's loader looks for the Shakespeare database for cache dir ``data_dir``."""
  return tff_sqlite.sqlite_path(data_dir, SQLITE_NAME)


def create_lstm() -> tf.keras.Model:
  """TFF's Shakespeare character model: [batch, 80] ids -> [batch, 80, 90] logits."""
  model = char_prediction_models.create_recurrent_model(
      vocab_size=VOCAB_SIZE, sequence_length=SEQUENCE_LENGTH)
  model.build((None, SEQUENCE_LENGTH))
  return model


def masked_accuracy(y_true: tf.Tensor, logits: tf.Tensor,
                    masked_tokens: tuple[int, ...] = (PAD, OOV, BOS, EOS)) -> tuple[tf.Tensor, tf.Tensor]:
  """Top-1 accuracy counts excluding padding, OOV, BOS and EOS targets."""
  return base.masked_accuracy(y_true, logits, masked_tokens)


def to_sequences(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """TFF's baseline preprocessing, unbatched: snippets -> ``(x[80], y[80])`` int64 pairs."""
  preprocess = tff_sqlite.unbatched_baseline(char_prediction_preprocessing.create_preprocess_fn,
                                             SEQUENCE_LENGTH)
  return preprocess(dataset)


def load_client_data(data_dir: str | None) -> tuple[tff.simulation.datasets.ClientData,
                                                      tff.simulation.datasets.ClientData]:
  """TFF's ``(train, test)`` Shakespeare ClientData from an existing file; never downloads."""
  return tff_sqlite.load(sqlite_path(data_dir), "Federated Shakespeare", "shakespeare")


def build_task(options: TaskOptions) -> Task:
  """Builds Shakespeare from TFF's on-disk federated Shakespeare."""
  options = tasks.resolve_options(NAME, options)
  data = tff_sqlite.train_and_pooled_test(*load_client_data(options.data_dir), options.num_clients,
                                          options.seed, to_sequences)
  return Task(
      name=NAME,
      train=data.train,
      test=data.test,
      model_fn=create_lstm,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=masked_accuracy,
      num_classes=VOCAB_SIZE,
      info=(f"Federated Shakespeare from {sqlite_path(options.data_dir)}: {data.num_train} of "
            f"{data.num_all} roles for training, all roles' test snippets pooled; sequences of "
            f"{SEQUENCE_LENGTH} characters; model lstm (accuracy excludes pad/OOV/BOS/EOS targets)."))
