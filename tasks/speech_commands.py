"""Keyword spotting on Speech Commands' ten keywords (seed 000, Sec. 5, KWS task).

Ten classes, in TFDS' label order: ``KEYWORDS`` = down, go, left, no, off, on,
right, stop, up, yes. Silence and unknown words are dropped.

Data sources:

* ``folder`` (default): a local folder in the Speech Commands layout,
  ``<data_dir>/<word>/<speaker>_nohash_<n>.wav`` (16 kHz mono PCM), e.g. the
  extracted ``speech_commands_v0.02.tar.gz`` or a corpus made offline by
  ``python -m tff_robust.tasks.espeak_corpus DIR`` (see there). Other folders (other words,
  ``_background_noise_``) are ignored. Split: if ``testing_list.txt`` or
  ``validation_list.txt`` exist (both datasets ship them) they name the test and
  validation files (paths relative to the folder); otherwise the dataset's own
  convention assigns whole speakers: the SHA-1 of the speaker id modulo 2**27,
  scaled to [0, 100), below ``VALIDATION_PERCENT`` (10) is validation, below
  ``VALIDATION_PERCENT + TEST_PERCENT`` (20) is test, the rest train.
* ``tfds``: TFDS ``speech_commands`` (its train / validation / test splits),
  read from ``data_dir`` and never downloaded. TFDS does not keep speaker ids,
  so only the ``iid`` and ``one_class`` partitions are available with it.

Partitions of the training clips among ``--num_clients`` clients (default
``DEFAULT_NUM_CLIENTS`` = 10, as in seed 000):

* ``natural`` (default, ``folder`` only): whole speakers per client. With
  ``--num_clients=0`` (or at least the number of training speakers) every
  speaker is a client; with fewer clients, speakers are dealt round-robin in a
  ``--seed``-shuffled order, so every clip is used.
* ``iid`` and ``one_class`` (seed 000's non-iid split), from `tff_robust.tasks.partition`.

Input: a 32x32x1 float32 log-mel spectrogram of the clip (time x mel):

1. the waveform in [-1, 1] is cut or zero-padded to 1 s (16,000 samples; long
   clips keep their centre second);
2. ``tfio.audio.spectrogram``: magnitude STFT with a 1024-sample (64 ms) Hann
   window, hop ``FRAME_STEP`` = 500 samples (31.25 ms), FFT length 1024, end
   padded, so ceil(16000 / 500) = 32 frames x 513 bins;
3. ``tfio.audio.melscale``: 32 mel bands between 20 Hz and 8 kHz;
4. ``log(mel + 1e-6)``, then per-clip standardisation
   (``tf.image.per_image_standardization``: zero mean, unit variance).

Features are computed once when the task is built and held as float16
(2 KiB per clip); the client datasets cast them to float32.

A folder with a manifest ``corpus.json`` (``MANIFEST``, written by
``tasks.espeak_corpus``) is summarised in the task's ``info`` (builder version,
speakers x repeats, fingerprint) and handed on as ``Task.data_manifest`` (a
run writes it to ``data.json``). Its features are cached in
``<data_dir>/.features_<key>.npz``, where the key hashes the corpus fingerprint,
the feature parameters above, tensorflow-io's version and the split's file list;
a cache whose key differs is ignored (and a new one written, atomically).

Model ``cnn``: seed 000's KWS network, four 3x3 'same' conv layers with 64 maps
(relu) with 2x2 max pooling after each pair, then Dense 1024 relu and Dense 10
logits (4,317,002 parameters).
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_io as tfio

from tff_robust import tasks
from tff_robust.tasks import partition as partition_lib
from tff_robust.tasks.base import DataMissingError, Task, TaskOptions, sparse_accuracy

NAME = "speech_commands"
DATA_SOURCES = ("folder", "tfds")
MODELS = ("cnn",)
PARTITIONS = ("natural", "iid", "one_class")
DEFAULT_NUM_CLIENTS = 10  # seed 000
KEYWORDS = ("down", "go", "left", "no", "off", "on", "right", "stop", "up", "yes")
NUM_CLASSES = len(KEYWORDS)

SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE  # 1 s
FRAME_LENGTH = 1024  # 64 ms Hann window
FRAME_STEP = 500  # 31.25 ms hop -> 32 frames per second
FFT_LENGTH = 1024
NUM_MELS = 32
MEL_FMIN = 20.0
MEL_FMAX = 8000.0
LOG_OFFSET = 1e-6
FEATURE_SHAPE = (CLIP_SAMPLES // FRAME_STEP, NUM_MELS, 1)  # (32, 32, 1)

VALIDATION_PERCENT = 10.0
TEST_PERCENT = 10.0
_MAX_NUM_WAVS_PER_CLASS = 2**27 - 1  # Speech Commands' split-hash modulus - 1.
TESTING_LIST = "testing_list.txt"
VALIDATION_LIST = "validation_list.txt"
MANIFEST = "corpus.json"  # written by tasks.espeak_corpus
_TFDS_DEFAULT_DIR = os.path.join("~", "tensorflow_datasets")
_SPLITS = ("train", "validation", "test")


def create_cnn() -> tf.keras.Sequential:
  """Seed 000's KWS CNN on 32x32x1 log-mel inputs, 10 logits."""
  conv = lambda: tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu")
  return tf.keras.Sequential([
      tf.keras.Input(shape=FEATURE_SHAPE),
      conv(),
      conv(),
      tf.keras.layers.MaxPooling2D(2),
      conv(),
      conv(),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(1024, activation="relu"),
      tf.keras.layers.Dense(NUM_CLASSES),
  ], name="kws_cnn")


def fit_clip(audio: tf.Tensor) -> tf.Tensor:
  """A 1-D waveform cut to its centre second or zero-padded at the end to ``CLIP_SAMPLES``."""
  audio = tf.reshape(audio, [-1])
  n = tf.shape(audio)[0]
  start = tf.maximum(n - CLIP_SAMPLES, 0) // 2
  audio = audio[start:start + CLIP_SAMPLES]
  audio = tf.pad(audio, [[0, CLIP_SAMPLES - tf.shape(audio)[0]]])
  return tf.ensure_shape(audio, [CLIP_SAMPLES])


def log_mel(audio: tf.Tensor) -> tf.Tensor:
  """Float waveform in [-1, 1] at 16 kHz -> standardised log-mel spectrogram [32, 32, 1]."""
  audio = fit_clip(tf.cast(audio, tf.float32))
  spec = tfio.audio.spectrogram(audio, nfft=FFT_LENGTH, window=FRAME_LENGTH, stride=FRAME_STEP)
  mel = tfio.audio.melscale(spec, rate=SAMPLE_RATE, mels=NUM_MELS, fmin=MEL_FMIN, fmax=MEL_FMAX)
  features = tf.math.log(mel + LOG_OFFSET)[..., tf.newaxis]
  return tf.ensure_shape(tf.image.per_image_standardization(features), FEATURE_SHAPE)


def _features(examples: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
  """``(waveform, label)`` pairs -> float16 log-mel features ``[n, 32, 32, 1]`` and int32 labels."""
  xs, ys = [], []
  for x, y in examples.map(lambda a, y: (log_mel(a), y),
                           num_parallel_calls=tf.data.AUTOTUNE).batch(512):
    xs.append(x.numpy().astype(np.float16))
    ys.append(y.numpy().astype(np.int32))
  if not xs:
    return np.zeros((0,) + FEATURE_SHAPE, np.float16), np.zeros([0], np.int32)
  return np.concatenate(xs), np.concatenate(ys)


def speaker_of(filename: str) -> str:
  """Speaker id of ``<speaker>_nohash_<n>.wav``."""
  return os.path.basename(filename).split("_nohash_")[0]


def hash_split(filename: str, validation_percent: float = VALIDATION_PERCENT,
               test_percent: float = TEST_PERCENT) -> str:
  """Speech Commands' split of a file by the SHA-1 of its speaker: 'train' | 'validation' | 'test'."""
  digest = int(hashlib.sha1(speaker_of(filename).encode("utf-8")).hexdigest(), 16)
  percent = (digest % (_MAX_NUM_WAVS_PER_CLASS + 1)) * (100.0 / _MAX_NUM_WAVS_PER_CLASS)
  if percent < validation_percent:
    return "validation"
  if percent < validation_percent + test_percent:
    return "test"
  return "train"


def scan_folder(folder: str) -> dict[str, list[tuple[str, int, str]]]:
  """Keyword clips of a Speech Commands folder by split: ``(relpath, label, speaker)`` lists."""
  if not folder or not os.path.isdir(folder):
    raise DataMissingError(
        f"The Speech Commands folder {folder!r} does not exist. Pass --data_dir=DIR holding "
        f"<word>/<speaker>_nohash_<n>.wav files: extract speech_commands_v0.02.tar.gz there, or build "
        f"an offline corpus with `python -m tff_robust.tasks.espeak_corpus DIR --speakers 24` (needs espeak-ng).")
  lists = {}
  for split, name in (("test", TESTING_LIST), ("validation", VALIDATION_LIST)):
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      with open(path) as f:
        lists[split] = {line.strip() for line in f if line.strip()}
  use_lists = bool(lists)
  clips: dict[str, list[tuple[str, int, str]]] = {s: [] for s in _SPLITS}
  for label, word in enumerate(KEYWORDS):
    word_dir = os.path.join(folder, word)
    if not os.path.isdir(word_dir):
      continue
    for wav in sorted(os.listdir(word_dir)):
      if not wav.endswith(".wav"):
        continue
      rel = f"{word}/{wav}"
      if use_lists:
        split = ("test" if rel in lists.get("test", ()) else
                 "validation" if rel in lists.get("validation", ()) else "train")
      else:
        split = hash_split(wav)
      clips[split].append((rel, label, speaker_of(wav)))
  if not clips["train"]:
    raise DataMissingError(
        f"No training clips of the keywords {', '.join(KEYWORDS)} in {folder}: expected "
        f"{os.path.join(folder, '<word>', '<speaker>_nohash_<n>.wav')}. Extract "
        f"speech_commands_v0.02.tar.gz there or build a corpus with `python -m tff_robust.tasks.espeak_corpus "
        f"{folder} --speakers 24`.")
  return clips


def _decode_wav(path: tf.Tensor) -> tf.Tensor:
  audio, rate = tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1)
  with tf.control_dependencies([tf.debugging.assert_equal(
      rate, SAMPLE_RATE, message="Speech Commands clips must be 16 kHz WAV files")]):
    return tf.identity(audio[:, 0])


def read_manifest(folder: str) -> dict | None:
  """The folder's ``corpus.json`` (see `tasks.espeak_corpus`), or None when it has none."""
  path = os.path.join(folder, MANIFEST)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def corpus_summary(manifest: dict) -> str:
  """E.g. ``espeak corpus v2 (1000 speakers x 3 repeats, fingerprint 0123abcd)``, and
  ``, effects medium`` before the parenthesis' end when the corpus has `espeak_effects`."""
  params = manifest.get("parameters", {})
  effects = params.get("effects")
  return (f"espeak corpus v{manifest.get('version', '?')} ({params.get('num_speakers', '?')} "
          f"speakers x {params.get('repeats', '?')} repeats, fingerprint "
          f"{str(manifest.get('fingerprint', '?'))[:8]}"
          f"{', effects ' + str(effects.get('name', '?')) if effects else ''})")


def feature_key(fingerprint: str, clips: dict[str, list[tuple[str, int, str]]]) -> str:
  """SHA-256 naming the features of a corpus: its fingerprint, the feature parameters, the split."""
  params = [SAMPLE_RATE, CLIP_SAMPLES, FRAME_LENGTH, FRAME_STEP, FFT_LENGTH, NUM_MELS, MEL_FMIN,
            MEL_FMAX, LOG_OFFSET, list(KEYWORDS), tfio.__version__]
  lists = {split: [[rel, label] for rel, label, _ in items] for split, items in sorted(clips.items())}
  text = json.dumps({"fingerprint": fingerprint, "features": params, "clips": lists}, sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()


def feature_cache_path(folder: str, key: str) -> str:
  return os.path.join(folder, f".features_{key[:16]}.npz")


def _read_cache(path: str, key: str) -> dict | None:
  """The cached features at ``path`` if it holds ``key``; None otherwise."""
  try:
    with np.load(path, allow_pickle=False) as z:
      if str(z["key"]) != key:
        return None
      return {s: (z[f"{s}_x"], z[f"{s}_y"], z[f"{s}_speakers"]) for s in _SPLITS}
  except (OSError, KeyError, ValueError):
    return None


def _write_cache(path: str, key: str, data: dict) -> None:
  """Writes the features atomically (a temporary file renamed); a read-only folder is skipped."""
  arrays = {"key": np.array(key)}
  for s, (x, y, speakers) in data.items():
    arrays.update({f"{s}_x": x, f"{s}_y": y, f"{s}_speakers": speakers})
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      np.savez(f, **arrays)
    os.replace(tmp, path)
  except OSError:
    if os.path.exists(tmp):
      os.remove(tmp)


def load_folder(folder: str, cache: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """Features of a Speech Commands folder: split -> ``(x float16 [n,32,32,1], y int32, speakers)``.

  With ``cache`` and a manifest in the folder, features come from (or go to) the feature cache.
  """
  clips = scan_folder(folder)
  manifest = read_manifest(folder) if cache else None
  path = key = None
  if manifest and manifest.get("fingerprint"):
    key = feature_key(str(manifest["fingerprint"]), clips)
    path = feature_cache_path(folder, key)
    cached = _read_cache(path, key)
    if cached is not None:
      return cached
  out = {}
  for split, items in clips.items():
    paths = tf.constant([os.path.join(folder, rel) for rel, _, _ in items] or [""], tf.string)
    labels = tf.constant([label for _, label, _ in items] or [0], tf.int32)
    examples = tf.data.Dataset.from_tensor_slices((paths, labels)).take(len(items))
    x, y = _features(examples.map(lambda p, y: (_decode_wav(p), y),
                                  num_parallel_calls=tf.data.AUTOTUNE))
    out[split] = (x, y, np.array([speaker for _, _, speaker in items], dtype=str))
  if path:
    _write_cache(path, key, out)
  return out


def load_tfds(data_dir: str | None) -> dict[str, tuple[np.ndarray, np.ndarray, None]]:
  """Features of TFDS speech_commands (never downloads): split -> ``(x, y, None)``, keywords only."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  where = data_dir or _TFDS_DEFAULT_DIR
  try:
    splits = tfds.load("speech_commands", split=list(_SPLITS), data_dir=data_dir, download=False,
                       as_supervised=True)
  except AssertionError as e:  # TFDS signals absent data with an AssertionError.
    raise DataMissingError(
        f"speech_commands is not prepared under {os.path.join(where, 'speech_commands')}. On a "
        f"machine with network run `tfds.builder('speech_commands', data_dir={where!r})"
        f".download_and_prepare()` and copy the directory here, or pass --data_dir pointing at a TFDS "
        f"data directory that holds speech_commands/ (or use --data_source=folder).") from e
  out = {}
  for split, ds in zip(_SPLITS, splits):
    ds = ds.filter(lambda audio, label: label < NUM_CLASSES)  # drop _silence_ and _unknown_
    x, y = _features(ds.map(lambda audio, label: (tf.cast(audio, tf.float32) / 32768.0, label)))
    out[split] = (x, y, None)
  return out


def speaker_parts(speakers: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
  """The ``natural`` partition: whole speakers per client (see the module docstring)."""
  names = np.unique(speakers)
  if num_clients == 0 or num_clients >= names.size:
    groups = [[name] for name in names]
  else:
    order = np.random.default_rng(seed).permutation(names.size)
    groups = [[names[i] for i in order[k::num_clients]] for k in range(num_clients)]
  return [np.flatnonzero(np.isin(speakers, g)).astype(np.int64) for g in groups]


def validate_options(options: TaskOptions) -> None:
  """Checks resolved options that need no data."""
  if options.partition == "natural" and options.data_source == "tfds":
    raise ValueError("--partition='natural' is not valid for task 'speech_commands' with "
                     "--data_source='tfds': TFDS keeps no speaker ids; choose --partition=iid or "
                     "one_class, or --data_source=folder.")
  if options.partition == "one_class" and options.num_clients < NUM_CLASSES:
    raise ValueError(f"--num_clients={options.num_clients} is not valid for task 'speech_commands' "
                     f"with --partition='one_class': it needs at least {NUM_CLASSES} clients.")


def _to_float(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  return tf.cast(x, tf.float32), y


def build_task(options: TaskOptions) -> Task:
  """Builds the KWS task: clients from the chosen partition, pooled test (and validation) clips."""
  options = tasks.resolve_options(NAME, options)
  manifest = None
  if options.data_source == "folder":
    if not options.data_dir:
      raise DataMissingError(
          "--data_source=folder needs --data_dir=DIR holding <word>/<speaker>_nohash_<n>.wav files: "
          "extract speech_commands_v0.02.tar.gz there, or build an offline corpus with "
          "`python -m tff_robust.tasks.espeak_corpus DIR --speakers 24` (needs espeak-ng).")
    data = load_folder(options.data_dir)
    manifest = read_manifest(options.data_dir)
  else:
    data = load_tfds(options.data_dir)
  x_train, y_train, speakers = data["train"]
  if options.partition == "natural":
    parts = speaker_parts(speakers, options.num_clients, options.seed)
  else:
    parts = partition_lib.partition(y_train, options.num_clients, options.partition,
                                    alpha=options.dirichlet_alpha, seed=options.seed)
  train = partition_lib.client_data_from_arrays(x_train, y_train, parts, _to_float)
  x_test, y_test, _ = data["test"]
  x_val, y_val, _ = data["validation"]
  if y_test.size == 0:
    raise ValueError(f"The {options.data_source} data in {options.data_dir} has no test clips.")
  test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(_to_float)
  validation = (tf.data.Dataset.from_tensor_slices((x_val, y_val)).map(_to_float)
                if y_val.size else None)
  return Task(
      name=NAME,
      train=train,
      test=test,
      validation=validation,
      model_fn=create_cnn,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      accuracy_fn=sparse_accuracy,
      num_classes=NUM_CLASSES,
      info=(f"Speech Commands keywords via {options.data_source}"
            f"{' ' + options.data_dir if options.data_dir else ''}: {y_train.size} train clips "
            f"{options.partition} over {len(parts)} clients (seed {options.seed}), {y_val.size} "
            f"validation, {y_test.size} test"
            f"{'; ' + corpus_summary(manifest) if manifest else ''}; 32x32 log-mel input; model cnn."),
      data_manifest=manifest)
