"""The suite's shared runtime (`tff_rt`) compiles without TFF's static Grappler pass; programs
keep TFF's compile. Both must compute the same rounds."""

import numpy as np
from tensorflow_federated.python.core.backends.native import compiler

from tff_robust.algorithms import process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig, RobustConfig, ServerConfig
from tff_robust.runtime import context

from helpers.toy import SPEC, datasets, make_clients


def test_programs_compile_as_tff_and_the_suite_without_static_grappler(tff_rt):
  assert context._context_kwargs()["compiler_fn"] is compiler.desugar_and_transform_to_native  # pylint: disable=protected-access
  assert tff_rt.static_grappler is False


def test_rounds_without_static_grappler_equal_tffs_compile(tff_rt):
  """Three rounds of client SGD and server Yogi with the coordinate-wise median (sort, gather,
  sqrt, the optimizer's slots) on unequal clients, under each compile: the same weights (bit for
  bit when measured; the bound allows a rewrite's last-bit rounding)."""
  cfg = ProcessConfig(client=ClientConfig(lr=0.1, local_steps=4, batch_size=8),
                      server=ServerConfig(opt="yogi", lr=0.05),
                      robust=RobustConfig(aggregator="median"), seed=3)
  learning = process.build_process(SPEC, cfg)
  data = datasets(make_clients(sizes=(13, 20, 7, 30)))

  def three_rounds():
    state = learning.initialize()
    losses = []
    for _ in range(3):
      out = learning.next(state, data)
      state = out.state
      losses.append(float(out.metrics["train_loss"]))
    return [np.asarray(v) for v in learning.get_model_weights(state).trainable], losses

  suite_weights, suite_losses = three_rounds()  # tff_rt: no static Grappler
  with context.tff_runtime():  # TFF's compile, as the programs run
    tff_weights, tff_losses = three_rounds()
  assert np.all(np.isfinite(suite_losses)) and suite_losses[-1] < suite_losses[0]
  np.testing.assert_allclose(suite_losses, tff_losses, rtol=1e-6)
  for got, want in zip(suite_weights, tff_weights):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
