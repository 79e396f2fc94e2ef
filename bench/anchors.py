"""The anchor every round-time benchmark is set against: TFF's own weighted FedAvg of a task's
Keras model (`tff.learning.algorithms.build_weighted_fed_avg`), client SGD at ``lr``, server SGD
at 1."""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff


def tff_fedavg(task, input_spec, lr: float) -> tff.learning.templates.LearningProcess:
  """TFF's `build_weighted_fed_avg` of ``task``'s model on batches of ``input_spec``."""
  def model_fn():
    return tff.learning.models.from_keras_model(
        task.model_fn(), loss=task.loss_fn(), input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
