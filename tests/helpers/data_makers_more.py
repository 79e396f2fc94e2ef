"""Writers of tiny data files in the on-disk formats of the CIFAR-10 (TFDS), CIFAR-100,
Shakespeare, Stack Overflow and Speech Commands loaders.

Plain functions, one per format; each returns the path it wrote. The SQLite
files use TFF's SqlClientData schema (see `data_makers._write_tff_sqlite`) with
the tf.Example feature names each TFF loader parses.
"""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import tensorflow as tf

from helpers import data_makers


def _int64(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in np.ravel(values)]))


def _bytes(value: str | bytes) -> tf.train.Feature:
  value = value.encode("utf-8") if isinstance(value, str) else value
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _example(**features: tf.train.Feature) -> bytes:
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def make_cifar100_sqlite(directory: str, num_train_clients: int = 3, num_test_clients: int = 2,
                         examples_per_client: int = 5, seed: int = 0) -> tuple[str, dict]:
  """Writes ``<directory>/cifar100.sqlite`` as TFF's federated CIFAR-100 loader expects it.

  Features ``image`` (32*32*3 int64 in [0, 255]), ``label`` (0..99) and
  ``coarse_label`` (``label // 5``); splits ``train`` / ``test``, client ids
  ``"0"``, ``"1"``, ... Returns the path and ``{(split, client): (images uint8
  [n, 32, 32, 3], labels)}`` for checks.
  """
  rng = np.random.default_rng(seed)
  os.makedirs(directory, exist_ok=True)
  rows, written = [], {}
  for split, n_clients in (("train", num_train_clients), ("test", num_test_clients)):
    for k in range(n_clients):
      images = rng.integers(0, 256, size=(examples_per_client, 32, 32, 3), dtype=np.uint8)
      labels = rng.integers(0, 100, size=examples_per_client)
      written[(split, str(k))] = (images, labels)
      for image, label in zip(images, labels):
        rows.append((split, str(k), _example(
            image=_int64(image), label=_int64([label]), coarse_label=_int64([label // 5]))))
  path = os.path.join(directory, "cifar100.sqlite")
  data_makers._write_tff_sqlite(path, rows)  # pylint: disable=protected-access
  return path, written


SHAKESPEARE_LINES = (
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,",
    "Or to take arms against a sea of troubles",
    "And by opposing end them. To die: to sleep;",
    "No more; and by a sleep to say we end the heart-ache and the thousand natural shocks "
    "that flesh is heir to, 'tis a consummation devoutly to be wish'd.",
)


def make_shakespeare_sqlite(directory: str, num_clients: int = 3) -> tuple[str, dict]:
  """Writes ``<directory>/shakespeare.sqlite`` as TFF's federated Shakespeare loader expects it.

  Feature ``snippets`` (bytes); splits ``train`` / ``test``; client ids
  ``ROLE_0``, ... Every client has two train snippets and one test snippet
  drawn from `SHAKESPEARE_LINES`. Returns the path and ``{(split, client):
  [snippets]}``.
  """
  os.makedirs(directory, exist_ok=True)
  rows, written = [], {}
  lines = SHAKESPEARE_LINES
  for k in range(num_clients):
    client = f"ROLE_{k}"
    for split, picks in (("train", [lines[k % len(lines)], lines[(k + 5) % len(lines)]]),
                         ("test", [lines[(k + 2) % len(lines)]])):
      written[(split, client)] = picks
      rows += [(split, client, _example(snippets=_bytes(s))) for s in picks]
  path = os.path.join(directory, "shakespeare.sqlite")
  data_makers._write_tff_sqlite(path, rows)  # pylint: disable=protected-access
  return path, written


STACKOVERFLOW_WORDS = ("the", "i", "to", "a", "is", "in", "python", "how", "java", "list", "do",
                       "you", "array", "string", "function", "?", ".", "error", "code", "use")
STACKOVERFLOW_TAGS = {"python": 900, "java": 800, "javascript": 700, "c++": 600, "arrays": 500,
                      "string": 400, "list": 300}


def make_stackoverflow_sqlite(directory: str, clients_per_split: int = 3, posts_per_client: int = 4,
                              seed: int = 0) -> tuple[str, dict]:
  """Writes ``<directory>/stackoverflow.sqlite`` as TFF's federated Stack Overflow loader expects it.

  Features ``creation_date``, ``score`` (int64), ``tags`` ('|'-separated),
  ``title``, ``tokens`` (space-separated), ``type``; splits ``train``,
  ``heldout``, ``test``; client ids ``"<split>_<k>"``. Posts mix words of
  `STACKOVERFLOW_WORDS` with out-of-vocabulary words. Returns the path and
  ``{(split, client): [(tokens, title, tags)]}``.
  """
  rng = np.random.default_rng(seed)
  os.makedirs(directory, exist_ok=True)
  pool = list(STACKOVERFLOW_WORDS) + ["zzunknown", "qqrare"]
  tags = list(STACKOVERFLOW_TAGS) + ["rare-tag"]
  rows, written = [], {}
  for split in ("train", "heldout", "test"):
    for k in range(clients_per_split):
      client = f"{split}_{k}"
      posts = []
      for _ in range(posts_per_client):
        n = int(rng.integers(3, 30))  # some longer than the 20-word NWP window
        tokens = " ".join(pool[i] for i in rng.integers(0, len(pool), size=n))
        title = " ".join(pool[i] for i in rng.integers(0, len(pool), size=4))
        post_tags = "|".join(tags[i] for i in rng.choice(len(tags), size=2, replace=False))
        posts.append((tokens, title, post_tags))
        rows.append((split, client, _example(
            creation_date=_bytes("2010-01-08 09:34:05 UTC"), score=_int64([3]), tags=_bytes(post_tags),
            title=_bytes(title), tokens=_bytes(tokens), type=_bytes("question"))))
      written[(split, client)] = posts
  path = os.path.join(directory, "stackoverflow.sqlite")
  data_makers._write_tff_sqlite(path, rows)  # pylint: disable=protected-access
  return path, written


def make_stackoverflow_counts(directory: str, as_archives: bool = False) -> tuple[str, str]:
  """Writes ``stackoverflow.word_count`` and ``stackoverflow.tag_count`` into ``directory``.

  The word file has ``word count`` lines for `STACKOVERFLOW_WORDS`, most
  frequent first; the tag file is the JSON object `STACKOVERFLOW_TAGS` written
  in alphabetical order (readers must sort it by count). With ``as_archives`` each is
  written as ``<name>.tar.bz2`` holding the file, as TFF downloads them.
  """
  os.makedirs(directory, exist_ok=True)
  words = "".join(f"{w} {1000 - 10 * i}\n" for i, w in enumerate(STACKOVERFLOW_WORDS))
  tags = json.dumps(dict(sorted(STACKOVERFLOW_TAGS.items())))  # alphabetical, not by count
  paths = []
  for name, text in (("stackoverflow.word_count", words), ("stackoverflow.tag_count", tags)):
    if as_archives:
      path = os.path.join(directory, name + ".tar.bz2")
      data = text.encode("utf-8")
      with tarfile.open(path, "w:bz2") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
      path = os.path.join(directory, name)
      with open(path, "w") as f:
        f.write(text)
    paths.append(path)
  return tuple(paths)


def make_espeak_folder(directory: str, num_speakers: int = 24, repeats: int = 2, seed: int = 0):
  """Builds a Speech Commands-layout corpus with espeak-ng (`tasks.espeak_corpus.build_corpus`)."""
  from tff_robust.tasks import espeak_corpus  # pylint: disable=g-import-not-at-top
  return espeak_corpus.build_corpus(directory, num_speakers, repeats, seed=seed)


def make_cifar10_tfds(directory: str, per_class: int = 10, test_per_class: int = 3, seed: int = 0) -> str:
  """A prepared TFDS ``cifar10`` under ``directory``, built by TFDS's own CIFAR-10 builder.

  The builder reads the CIFAR binary batches (one label byte, then 3072 CHW pixel bytes per
  record); we write small ones and point its download step at them, so nothing is fetched.
  """
  from unittest import mock  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  raw = os.path.join(directory, "_cifar10_raw")
  batches = os.path.join(raw, "cifar-10-batches-bin")
  os.makedirs(batches, exist_ok=True)

  def records(n_per_class: int) -> bytes:
    labels = np.repeat(np.arange(10, dtype=np.uint8), n_per_class)
    pixels = rng.integers(0, 256, (labels.size, 3072), dtype=np.uint8)
    pixels[:, :1024] = np.clip(pixels[:, :1024] // 2 + 12 * labels[:, None], 0, 255)  # a class cue
    return np.concatenate([labels[:, None], pixels], axis=1).tobytes()

  with open(os.path.join(batches, "batches.meta.txt"), "w") as f:
    f.write("\n".join(["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                       "ship", "truck"]) + "\n")
  for i in range(1, 6):
    with open(os.path.join(batches, f"data_batch_{i}.bin"), "wb") as f:
      f.write(records(per_class // 5 + (i <= per_class % 5)))
  with open(os.path.join(batches, "test_batch.bin"), "wb") as f:
    f.write(records(test_per_class))
  builder = tfds.builder("cifar10", data_dir=directory)
  with mock.patch.object(tfds.download.DownloadManager, "download_and_extract", return_value=raw):
    builder.download_and_prepare()
  return directory
