"""bench/client_time.py's operation counts (Table 4's ops ratio): TF's per-op statistics over the
ops a traced step runs, checked on a step small enough to count by hand."""

import os
import sys

import tensorflow as tf

from helpers.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import client_time  # noqa: E402  pylint: disable=g-import-not-at-top

from tff_robust.algorithms import client_work  # noqa: E402
from tff_robust.algorithms.config import ProcessConfig  # noqa: E402
from tff_robust.algorithms.methods.rm.options import RMConfig  # noqa: E402


def test_graph_flops_counts_the_ops_the_outputs_need():
  @tf.function
  def f(x, w):
    tf.matmul(tf.transpose(x), x)  # nothing uses it: the runtime prunes it
    return tf.matmul(x, w)

  graph = f.get_concrete_function(tf.TensorSpec([4, 3]), tf.TensorSpec([3, 5])).graph
  assert client_time.graph_flops(graph) == 2 * 4 * 3 * 5


def test_step_flops_of_a_dense_layer_by_hand():
  """Dense(6 → 2) + softmax CE at batch 8: forward 2·8·6·2 (MatMul), the weight gradient
  x^T·g (2·6·8·2) and no gradient for the input; with RM (authors' layers) the frozen forward
  and f_0 = Linear(2 → 6) forward, its input gradient (g·θ^T) and θ's gradient add 4 more."""
  model_fn = lambda: tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(2)])
  spec = client_work.ModelSpec(model_fn, lambda: tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True), None, (tf.TensorSpec([6]), tf.TensorSpec([], tf.int32)))  # one example
  matmul = 2 * 8 * 6 * 2
  fa = client_time.step_flops(spec, ProcessConfig(), 8)
  assert matmul * 2 <= fa < matmul * 2 + 200   # + the element-wise ops of the loss
  rm = client_time.step_flops(spec, ProcessConfig(methods=(RMConfig(weight=1e-4, normalize="sum"),)), 8)
  assert 4 * matmul <= rm - fa < 4 * matmul + 400
