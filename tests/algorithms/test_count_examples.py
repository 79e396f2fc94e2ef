"""evaluation.count_examples: a client's n_k from tf.data's cardinality, else from one pass."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import evaluation


def examples(n: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (np.ones([n, 2], np.float32), np.arange(n, dtype=np.int32))).map(lambda x, y: (2.0 * x, y))


def test_known_and_unknown_cardinality_count_alike():
  data = examples(37)
  odd = data.filter(lambda x, y: y % 2 == 1)  # tf.data cannot know how many pass: one pass counts
  assert int(data.cardinality()) == 37
  assert int(odd.cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
  count = tf.function(evaluation.count_examples)
  assert float(count(data)) == 37.0 and float(count(odd)) == 18.0
  assert float(count(data.shuffle(8, seed=0))) == 37.0 and float(count(data.take(0))) == 0.0


def test_a_dataset_sent_to_the_worker_is_counted(tff_rt):
  @tff.tensorflow.computation(tff.SequenceType(tff.types.to_type((np.float32, [2]))))
  def count(data):
    return evaluation.count_examples(data), tf.data.experimental.cardinality(data)

  n, known = count(examples(23).map(lambda x, y: x))
  assert float(n) == 23.0
  assert int(known) == 23  # the worker knows it: no pass over the data
