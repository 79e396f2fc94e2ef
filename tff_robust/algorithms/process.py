"""One TFF `LearningProcess`: generalized FedAvg (seed 004, Algorithm 2) with RM/ER/WD
client work (seed 000 §3.1) and the adaptive hyper-parameter policy (seed 000 §3.2) in
its server state.

A round: the server fixes the round's client learning rate and step count (a
schedule, or a sample h_t ~ P(·|ψ_t)), broadcasts them with w_t; each client
trains (`client_work`); deltas are aggregated with weights (`aggregation`);
the server optimizer applies the pseudo-gradient −Δ_t; with AH the loss of
w_{t+1} gives the reward that updates ψ (eq. 7); with FedEx θ takes its step.
The parts are client components (`client`) and server components (`server`), chosen and
ordered by `methods.registry`; the server's computations (`server_computations`), the client
work and the aggregation (``aggregation_norm="all"``: `all_clients_norm`) are built and typed
apart, and this module wires them, checking their types where they meet.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust.algorithms import aggregation
from tff_robust.algorithms import client_reports as client_reports_lib
from tff_robust.algorithms import client_work
from tff_robust.algorithms import privacy
from tff_robust.algorithms import all_clients_norm
from tff_robust.algorithms import server_computations
from tff_robust.algorithms import server
from tff_robust.algorithms import server_state
from tff_robust.algorithms.config import ProcessConfig
from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.methods.method import BuildContext
from tff_robust.common import seeding

ModelWeights = tff.learning.models.ModelWeights


def initial_weights(model_fn, seed: int) -> ModelWeights:
  """Model weights drawn by Keras' initialisers under ``seed`` (reproducible)."""
  with seeding.global_seed(seed):
    model = model_fn()
  return ModelWeights(
      trainable=[v.numpy() for v in model.trainable_variables],
      non_trainable=[v.numpy() for v in model.non_trainable_variables])


def _tensor_specs(values) -> list[tf.TensorSpec]:
  return [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for v in values]


class RobustProcess(tff.learning.templates.LearningProcess):
  """A `LearningProcess` that also exposes what the training loop needs.

  Attributes beyond the base class:
    client_input_type: the client-placed input of ``next``.
    next_with_client_states: when a client component keeps per-client state, a computation
      ``(state, client_inputs) -> (LearningProcessOutput, {key: state}@CLIENTS)``; else ``None``.
    next_with_client_reports: built with ``client_reports`` only, ``(state, client_inputs) ->
      `client_reports.ClientRound`: the round with each client's report and share; else None.
    trainer: the `client_work.ClientTrainer` (describes the client input and client state).
    after_rejection: ``(previous_state, rejected_state) -> state`` for a round the
      training loop's divergence guard rejects (see `build_process`).
  """

  def __init__(self, initialize_fn, next_fn, get_model_weights, set_model_weights, *,
               next_with_client_states, trainer: client_work.ClientTrainer, after_rejection,
               get_hparams_fn=None, set_hparams_fn=None, next_with_client_reports=None):
    super().__init__(initialize_fn, next_fn, get_model_weights, set_model_weights,
                     get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)
    self.next_with_client_states = next_with_client_states
    self.next_with_client_reports = next_with_client_reports
    self.after_rejection = after_rejection
    self.trainer = trainer
    self.client_input_type = trainer.input_type()


def build_process(spec: client_work.ModelSpec, config: ProcessConfig, *,
                  server_val: Optional[tuple[np.ndarray, np.ndarray]] = None,
                  total_examples: Optional[int] = None,
                  num_clients: Optional[int] = None, client_reports: bool = False) -> RobustProcess:
  """Builds the learning process for ``spec`` (model, loss, data spec) and ``config``.

  Type signatures (S: the server state, C: `client_input_type`, M: the round's metrics)::

    initialize: ( -> <core=<model, opt, round[, ah][, fedex]>, agg=...>@SERVER)
    next:       (<S@SERVER, {C}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER>)

  A round: h_t from the schedule or the AH policy; w_t, h_t and the server components'
  extras broadcast; client work (the client components); the aggregator's Δ_t; the server
  optimizer, then each server component's update. The parts are built and typed separately
  (`server_computations`, the trainer, the aggregation) and their types checked where they meet.

  Args:
    spec: model builder, loss, accuracy and the element spec of client data.
    config: client, server, weighting and the methods' configuration.
    server_val: a server-held validation sample ``(x, y)`` (AH with ``loss_source=server``).
    total_examples: N, the examples of all K clients (``aggregation_norm="all"`` only).
    num_clients: K, the task's clients (for a method that needs it, e.g. SCAFFOLD's |S|/N).
    client_reports: also build ``next_with_client_reports`` (`client_reports`; off: nothing of it
      is traced, and the aggregator is the same as without it).
  """
  if config.aggregation_norm == "all" and not (total_examples and total_examples > 0):
    raise ValueError("aggregation_norm='all' (Algorithm 1 line 13) needs total_examples = N > 0")
  w0 = initial_weights(spec.model_fn, config.seed)
  trainable_specs = _tensor_specs(w0.trainable)
  parts = registry.components(BuildContext(spec, config, trainable_specs, num_clients, server_val))
  trainer = client_work.ClientTrainer(spec, config.client, config.weighting, parts.client,
                                      has_val=config.weighting == "val_accuracy")
  opt = server.ServerOptimizer(config.server, trainable_specs)
  components = parts.server  # state order: the registry's (ah, fedex, the --algorithm's)
  before = server_computations.build_before(w0, opt, components, server.hparam_source(components, config.client))
  client_update = trainer.build(before.broadcast_type)
  server_computations.check_meet("make_broadcast", before.broadcast_type, "the client update",
                                 client_update.type_signature.parameter[0])
  client_out_type = client_update.type_signature.result
  aggregation = _aggregation(config, trainable_specs, client_out_type, total_examples, client_reports)
  agg_result_type = aggregation.process.next.type_signature.result
  update = server_computations.build_update(
      before, agg_result_type.result.member, client_out_type.report, agg_result_type.measurements.member,
      opt, components, trainer.components, trainer.has_val)
  round_fn = _round_fn(before, client_update, aggregation, update)
  return _learning_process(before, aggregation, round_fn, trainer, opt, components, w0,
                           client_out_type, client_reports)


class Aggregation(NamedTuple):
  """The round's aggregation of the clients' updates: ``process`` over their values, weighted,
  and ``client_value`` (``(Δ, TrainReport) -> value``; None: the value is Δ itself)."""

  process: tff.templates.AggregationProcess
  client_value: Optional[tff.Computation]


def _aggregation(config: ProcessConfig, trainable_specs: list[tf.TensorSpec], client_out_type: tff.Type,
                 total_examples: Optional[int], client_reports: bool) -> Aggregation:
  """The configured aggregator (robust, with DP), wrapped by `all_clients_norm` for
  ``aggregation_norm="all"``. Without byzantine clients every update is finite when it reaches the
  aggregator (the client work sends a non-finite one as a zero delta of weight 0), so its
  non-finite guard is skipped."""
  rob = config.robust
  factory = privacy.with_dp(aggregation.build_aggregator, config.dp)(
      rob.aggregator, trim_fraction=rob.trim_fraction, clip_norm=rob.clip_norm,
      zeroing=rob.zeroing, zeroing_norm=rob.zeroing_norm,
      check_nonfinite=rob.byzantine_attack != "none", byzantine_f=rob.byzantine_f or 0,
      multi_krum_select=rob.multi_krum_select, rfa_iterations=rob.rfa_iterations, rfa_nu=rob.rfa_nu,
      client_shares=client_reports)
  delta_type = tff.types.to_type([tff.TensorType(s.dtype.as_numpy_dtype, s.shape) for s in trainable_specs])
  server_computations.check_meet("the client update", client_out_type.delta, "the aggregator", delta_type)
  weight_type = server_computations.float32_type()
  if config.aggregation_norm != "all":
    return Aggregation(factory.create(delta_type, weight_type), None)
  wrapped = all_clients_norm.AllClientsNorm(factory, total_examples)
  return Aggregation(wrapped.create(all_clients_norm.value_type(delta_type), weight_type),
                     all_clients_norm.client_value(client_out_type.delta, client_out_type.report.train))


def _round_fn(before: server_computations.Before, client_update: tff.Computation, agg: Aggregation,
              update: tff.Computation) -> Callable:
  """The round, on federated values: ``(state, client_inputs) -> (LearningProcessOutput, client
  outputs, aggregator output)`` (the last two for the client states and reports)."""

  def round_(state, client_inputs):
    core, agg_state = getattr(state, server_state.CORE), getattr(state, server_state.AGG)
    hparams = tff.federated_map(before.round_hparams, core)
    broadcast = tff.federated_broadcast(tff.federated_map(before.make_broadcast, (core, hparams)))
    outputs = tff.federated_map(client_update, (broadcast, client_inputs))
    values = outputs.delta
    if agg.client_value is not None:
      values = tff.federated_map(agg.client_value, (outputs.delta, outputs.report.train))
    agg_output = agg.process.next(agg_state, values, outputs.weight)
    reports = tff.federated_sum(outputs.report)
    updated = tff.federated_map(update, (core, hparams, agg_output.result, reports, agg_output.measurements))
    new_state = tff.federated_zip(server_state.make(updated[0], agg_output.state))
    return tff.learning.templates.LearningProcessOutput(new_state, updated[1]), outputs, agg_output

  return round_


def _learning_process(before: server_computations.Before, agg: Aggregation, round_fn: Callable,
                      trainer: client_work.ClientTrainer, opt: server.ServerOptimizer, components,
                      w0: ModelWeights, client_out_type: tff.Type, client_reports: bool) -> RobustProcess:
  """The federated computations around ``round_fn`` and the state's accessors."""
  full_state_type = tff.StructWithPythonType(
      [(server_state.CORE, before.state_type),
       (server_state.AGG, agg.process.initialize.type_signature.result.member)], collections.OrderedDict)

  @tff.federated_computation
  def initialize_fn():
    core = tff.federated_eval(before.init, tff.SERVER)
    return tff.federated_zip(server_state.make(core, agg.process.initialize()))

  server_state_type = tff.FederatedType(full_state_type, tff.SERVER)
  clients_type = tff.FederatedType(trainer.input_type(), tff.CLIENTS)

  @tff.federated_computation(server_state_type, clients_type)
  def next_fn(state, client_inputs):
    return round_fn(state, client_inputs)[0]

  server_computations.check_meet("next", next_fn.type_signature.result.state, "next", server_state_type)
  next_with_client_states = None
  if trainer.stateful:
    @tff.federated_computation(server_state_type, clients_type)
    def next_with_client_states(state, client_inputs):
      output, outputs, _ = round_fn(state, client_inputs)
      return output, outputs.state

  next_with_client_reports = None
  if client_reports:
    next_with_client_reports = client_reports_lib.build(
        round_fn, server_state_type, clients_type, client_out_type,
        agg.process.next.type_signature.result, trainer.stateful)
  weights_type = ModelWeights(
      trainable=[tff.TensorType(v.dtype, v.shape) for v in w0.trainable],
      non_trainable=[tff.TensorType(v.dtype, v.shape) for v in w0.non_trainable])
  get_weights, set_weights, after_rejection, get_hparams, set_hparams = _state_accessors(
      full_state_type, weights_type, opt, components)
  return RobustProcess(initialize_fn, next_fn, get_weights, set_weights,
                       next_with_client_states=next_with_client_states, trainer=trainer,
                       after_rejection=after_rejection, get_hparams_fn=get_hparams,
                       set_hparams_fn=set_hparams, next_with_client_reports=next_with_client_reports)


def _state_accessors(full_state_type, weights_type, opt: server.ServerOptimizer, components) -> tuple:
  """get/set_model_weights, after_rejection, get/set_hparams (the server optimizer's) of the state."""
  core, replace_core = server_state.core, server_state.replace_core

  @tff.tensorflow.computation(full_state_type)
  def get_model_weights(state):
    return core(state)[server_state.MODEL]

  @tff.tensorflow.computation(full_state_type, weights_type)
  def set_model_weights(state, weights):
    return replace_core(state, **{server_state.MODEL: weights})

  @tff.tensorflow.computation(full_state_type, full_state_type)
  def after_rejection(previous, rejected):
    """The state after a round the divergence guard rejected: ``previous``'s model, optimizer
    and aggregator state, but the round counter of ``rejected`` (the next round draws a new
    h_t and schedule step) and what each component keeps of the rejected round (its
    ``after_rejection``: AH's policy ψ learnt from the rejected h_t's reward)."""
    entries = {server_state.ROUND: core(rejected)[server_state.ROUND]}
    for part in components:
      if hasattr(part, "after_rejection"):
        entries[part.key] = part.after_rejection(core(previous)[part.key], core(rejected)[part.key])
    return replace_core(previous, **entries)

  @tff.tensorflow.computation(full_state_type)
  def get_hparams(state):
    return opt.optimizer.get_hparams(core(state)[server_state.OPT])

  @tff.tensorflow.computation(full_state_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    return replace_core(state, **{server_state.OPT: opt.optimizer.set_hparams(core(state)[server_state.OPT], hparams)})

  return get_model_weights, set_model_weights, after_rejection, get_hparams, set_hparams
