"""One TFF `LearningProcess`: generalized FedAvg (seed 004, Algorithm 2) with RM/ER/WD
client work (seed 000 §3.1) and the adaptive hyper-parameter policy (seed 000 §3.2) in
its server state.

A round: the server fixes the round's client learning rate and step count (a
schedule, or a sample h_t ~ P(·|ψ_t)), broadcasts them with w_t; each client
trains (`client_work`); deltas are aggregated with weights (`aggregation`);
the server optimizer applies the pseudo-gradient −Δ_t (`server_opt`); with AH
the loss of w_{t+1} gives the reward that updates ψ (`reinforce`, eq. 7).
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_robust import aggregation
from tff_robust import client_work
from tff_robust import evaluation
from tff_robust import fedex as fedex_lib
from tff_robust import reinforce
from tff_robust import schedules
from tff_robust import seeding
from tff_robust import server_opt
from tff_robust.config import ProcessConfig

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
    next_with_client_states: with ``--rm_client_state=persist``, a computation
      ``(state, client_inputs) -> (LearningProcessOutput, θ@CLIENTS)``; ``None`` otherwise.
    trainer: the `client_work.ClientTrainer` (describes the client input).
    after_rejection: ``(previous_state, rejected_state) -> state`` for a round the
      training loop's divergence guard rejects (see `build_process`).
  """

  def __init__(self, initialize_fn, next_fn, get_model_weights, set_model_weights, *,
               next_with_client_states, trainer: client_work.ClientTrainer, after_rejection,
               get_hparams_fn=None, set_hparams_fn=None):
    super().__init__(initialize_fn, next_fn, get_model_weights, set_model_weights,
                     get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)
    self.next_with_client_states = next_with_client_states
    self.after_rejection = after_rejection
    self.trainer = trainer
    self.client_input_type = trainer.input_type()


def fedex_client(config: ProcessConfig) -> client_work.FedExClient:
  """The k FedEx configurations, drawn around the centre (seed 002)."""
  fc, ccfg = config.fedex, config.client
  space = fc.space or fedex_lib.SearchSpace()
  options = fc.options or fedex_lib.FedExOptions(seed=config.seed)
  if config.ah is not None:
    clash = {"learning_rate", "local_steps", "local_epochs"} & set(space.names)
    if clash:
      raise ValueError(f"--ah tunes the round's learning rate and local steps; FedEx must not also "
                       f"tune {sorted(clash)} (set --fedex_{sorted(clash)[0]}=none)")
  if ccfg.local_steps > 0 and "local_epochs" in space.names:
    raise ValueError("FedEx tunes local_epochs but --local_steps > 0: tune local_steps instead "
                     "(--fedex_local_epochs=none --fedex_local_steps=...) or use --local_steps=0")
  if ccfg.local_steps == 0 and "local_steps" in space.names:
    raise ValueError("FedEx tunes local_steps but --local_steps=0 (epochs): tune local_epochs instead")
  if "dropout" in space.names:
    raise ValueError("--fedex_dropout is not supported: dropout rates are fixed in the Keras model")
  center = dict(fc.center) if fc.center else space.midpoint()
  if not fc.center:
    defaults = {"learning_rate": ccfg.lr, "batch_size": ccfg.batch_size, "prox_mu": ccfg.wd_mu,
                "local_steps": ccfg.local_steps, "local_epochs": ccfg.local_epochs}
    for name in space.names:
      spec = space.spec(name)
      value = defaults.get(name)
      if value is None:
        continue
      if isinstance(spec, tuple) and value in spec:
        center[name] = value
      elif isinstance(spec, fedex_lib.Range) and spec.low <= value <= spec.high:
        center[name] = value
  configs = fedex_lib.sample_configs(space, center, options.radius, options.k, options.seed)
  return client_work.FedExClient(space=space, options=options, configs=configs)


def build_process(spec: client_work.ModelSpec, config: ProcessConfig, *,
                  rm_client_state: str = "reset",
                  server_val: Optional[tuple[np.ndarray, np.ndarray]] = None,
                  total_examples: Optional[int] = None) -> RobustProcess:
  """Builds the learning process for ``spec`` (model, loss, data spec) and ``config``.

  Args:
    spec: model builder, loss, accuracy and the element spec of client data.
    config: client, server, weighting and AH configuration.
    rm_client_state: ``persist`` (θ^i_{t+1} ← θ^i_t per client, Algorithm 1) or
      ``reset`` (fresh θ each round).
    server_val: server-held validation arrays ``(x, y)`` (AH with ``loss_source=server``).
    total_examples: N, the examples of all K clients (``aggregation_norm="all"`` only).
  """
  if config.aggregation_norm == "all" and not (total_examples and total_examples > 0):
    raise ValueError("aggregation_norm='all' (Algorithm 1 line 13) needs total_examples = N > 0")
  ccfg, scfg = config.client, config.server
  w0 = initial_weights(spec.model_fn, config.seed)
  weights_type = ModelWeights(
      trainable=[tff.TensorType(v.dtype, v.shape) for v in w0.trainable],
      non_trainable=[tff.TensorType(v.dtype, v.shape) for v in w0.non_trainable])
  trainable_specs = _tensor_specs(w0.trainable)

  optimizer = server_opt.build_server_optimizer(
      scfg.opt, learning_rate=scfg.lr, momentum=scfg.momentum, beta1=scfg.beta1,
      beta2=scfg.beta2, tau=scfg.tau)
  rob = config.robust
  agg_process = aggregation.build_aggregator(
      rob.aggregator, trim_fraction=rob.trim_fraction, clip_norm=rob.clip_norm,
      zeroing=rob.zeroing, zeroing_norm=rob.zeroing_norm).create(
      tff.types.to_type([tff.TensorType(s.dtype.as_numpy_dtype, s.shape) for s in trainable_specs]),
      tff.TensorType(np.float32))

  ah = config.ah
  policy = ah.policy_config() if ah else None
  client_loss = ah is not None and ah.loss_source == "clients"
  if ah is not None and ah.loss_source == "server" and server_val is None:
    raise ValueError("--ah with --ah_loss_source=server needs a server validation set (server_val)")
  fx = fedex_client(config) if config.fedex is not None else None
  trainer = client_work.ClientTrainer(
      spec, ccfg, config.weighting, has_val=config.needs_client_val,
      theta_in=rm_client_state == "persist", seed=config.seed,
      pre_eval_batches=ah.client_eval_batches if client_loss else 0, fedex=fx,
      attack=(None if rob.byzantine_attack == "none"
              else (rob.byzantine_attack, rob.byzantine_scale, rob.byzantine_sigma)))

  def server_loss(weights) -> tf.Tensor:
    """L(w) on the server-held validation set (seed 000 §3.3, first scheme)."""
    model, loss_fn = spec.model_fn(), spec.loss_fn()

    @tf.function  # orders the weight assignment before the evaluation
    def run(trainable, non_trainable):
      evaluation.assign_weights(model, trainable, non_trainable)
      data = tf.data.Dataset.from_tensor_slices(server_val).batch(256)
      loss_sum, _, _, count = evaluation.evaluate(model, data, loss_fn, None)
      return loss_sum / tf.maximum(count, 1.0)

    return run(list(weights.trainable), list(weights.non_trainable))

  # ---- server-side TF computations -------------------------------------------------
  if policy is not None:
    grid_points = reinforce.normalized_grid(policy)
    grid_values = reinforce.grid_values(policy)
    policy_bounds = reinforce.bounds(policy)

  @tff.tensorflow.computation
  def server_init():
    weights = ModelWeights(trainable=[tf.constant(v) for v in w0.trainable],
                           non_trainable=[tf.constant(v) for v in w0.non_trainable])
    state = collections.OrderedDict(
        model=weights, opt=optimizer.initialize(trainable_specs), round=tf.constant(0, tf.int32))
    if policy is not None:
      ah_state = tf.nest.map_structure(tf.constant, reinforce.initial_state(policy))
      if not client_loss:  # L_1 <- Loss(w_1), Algorithm 1 line 2
        ah_state = ah_state._replace(last_loss=server_loss(weights))
      state["ah"] = ah_state
    if fx is not None:
      rows = len(fx.space.names) if fx.options.product_space else None
      state["fedex"] = collections.OrderedDict(
          theta=tf.constant(fedex_lib.initial_theta(fx.k, rows), tf.float32),
          baseline_num=tf.constant(0.0), baseline_den=tf.constant(0.0))
    return state

  state_type = server_init.type_signature.result

  @tff.tensorflow.computation(state_type)
  def round_hparams(state):
    """The round's client lr and local steps (schedules of seed 004 / seed 000's FA)."""
    t = state["round"] + 1
    if policy is not None:  # h_t ~ P(.|ψ_t), seeded by (seed, t)
      seed = tf.stack([tf.constant(config.seed, tf.int64), tf.cast(t, tf.int64)])
      index, sampled = reinforce.sample(state["ah"], grid_points, seed)
      h = tf.gather(tf.constant(grid_values), index)
      return collections.OrderedDict(
          lr=tf.cast(h[0], tf.float32), steps=tf.cast(tf.round(h[1]), tf.int32), ah=sampled)
    lr = schedules.client_lr(t, ccfg.lr, ccfg.lr_schedule, ccfg.lr_decay_rate, ccfg.lr_decay_every)
    if ccfg.local_steps > 0:
      steps = schedules.local_steps(t, ccfg.local_steps, ccfg.steps_decay_rate,
                                    ccfg.steps_decay_every, ccfg.min_local_steps)
    else:  # local_epochs passes over the data; no step count is broadcast
      steps = tf.constant(0, tf.int32)
    return collections.OrderedDict(lr=tf.cast(lr, tf.float32), steps=tf.cast(steps, tf.int32))

  hparams_type = round_hparams.type_signature.result

  @tff.tensorflow.computation(state_type, hparams_type)
  def make_broadcast(state, hparams):
    out = collections.OrderedDict(model=state["model"], lr=hparams["lr"], steps=hparams["steps"])
    if fx is not None:
      out["fedex_theta"] = state["fedex"]["theta"]
    return out

  client_update = trainer.build(make_broadcast.type_signature.result)
  client_out_type = client_update.type_signature.result
  metrics_type = client_out_type["metrics"]

  agg_result_type = agg_process.next.type_signature.result

  @tff.tensorflow.computation(state_type, hparams_type, agg_result_type.result.member,
                              metrics_type, agg_result_type.measurements.member)
  def server_update(state, hparams, mean_delta, sums, measurements):
    """x_{t+1} = SERVEROPT(x_t, −Δ_t); skipped when no client update survived."""
    trainable = list(state["model"].trainable)
    excluded = sums["nonfinite"] + tf.cast(measurements["nonfinite_count"], tf.float32)
    any_update = sums["num_clients"] - excluded > 0
    pseudo_grad = [-d for d in mean_delta]
    opt_in = state["opt"]
    if scfg.lr_decay != 1.0:  # eta_t = eta gamma^t, the per-round server lr decay (seed 002's arms)
      opt_in = collections.OrderedDict(opt_in)
      opt_in[server_opt.LEARNING_RATE_KEY] = tf.constant(scfg.lr, tf.float32) * tf.pow(
          tf.constant(scfg.lr_decay, tf.float32), tf.cast(state["round"], tf.float32))
    opt_state, new_trainable = optimizer.next(opt_in, trainable, pseudo_grad)
    new_trainable = [tf.where(any_update, n, o) for n, o in zip(new_trainable, trainable)]
    opt_state = tf.nest.map_structure(lambda n, o: tf.where(any_update, n, o), opt_state, state["opt"])
    new_weights = ModelWeights(trainable=new_trainable, non_trainable=list(state["model"].non_trainable))
    new_state = collections.OrderedDict(model=new_weights, opt=opt_state, round=state["round"] + 1)
    ah_metrics = collections.OrderedDict()
    if policy is not None:
      if client_loss:
        # Clients evaluated w_t before training: this is L_t, the reward of h_{t-1}
        # (one round late). Update ψ with the previous round's score, then keep h_t's.
        loss = tf.math.divide_no_nan(sums["pre_loss_sum"], sums["pre_count"])
        updated, r = reinforce.observe_loss(state["ah"], loss, policy.hyper_lr, policy_bounds,
                                            policy.min_reward, policy.baseline)
        sampled = hparams["ah"]
        ah_state = updated._replace(last_index=sampled.last_index, last_score=sampled.last_score)
      else:
        # L_{t+1} of the aggregate model on the server's validation set; r_t = (L_t - L_{t+1}) / L_t.
        loss = server_loss(new_weights)
        ah_state, r = reinforce.observe_loss(hparams["ah"], loss, policy.hyper_lr, policy_bounds,
                                             policy.min_reward, policy.baseline)
      new_state["ah"] = ah_state
      ah_metrics = reinforce.policy_metrics(policy, ah_state)
      ah_metrics["loss"] = loss
    count = tf.maximum(sums["count"], 1.0)
    metrics = collections.OrderedDict(
        train_loss=sums["loss_sum"] / count,
        train_accuracy=sums["correct"] / tf.maximum(sums["predictions"], 1.0),
        client_lr=hparams["lr"], local_steps=hparams["steps"],
        num_clients=sums["num_clients"], nonfinite_clients=sums["nonfinite"],
        examples_trained=sums["count"],
        update_norm=tf.linalg.global_norm(mean_delta),
        client_drift=sums["drift_sum"] / tf.maximum(sums["num_clients"] - sums["nonfinite"], 1.0))
    rm_keys = sorted((k for k in sums if k.startswith("rm_term")), key=lambda k: int(k[7:-4]))
    if rm_keys:  # eq. 1 per example (sum form): total and per matching layer j
      metrics["rm_loss"] = tf.add_n([sums[k] for k in rm_keys]) / count
      for key in rm_keys:
        metrics[f"rm_loss_{key[7:-4]}"] = sums[key] / count
    if fx is not None:  # θ ← θ ⊙ exp(−η_t ∇̃), normalised (seed 002)
      f = state["fedex"]
      theta, num, den, fx_metrics = fedex_lib.server_update(
          f["theta"], f["baseline_num"], f["baseline_den"], sums["fedex_loss"], sums["fedex_count"],
          sums["fedex_total"], tf.cast(state["round"] + 1, tf.float32), fx.options)
      new_state["fedex"] = collections.OrderedDict(theta=theta, baseline_num=num, baseline_den=den)
      for key, value in fx_metrics.items():
        metrics[f"fedex_{key}"] = tf.cast(value, tf.float32)
      metrics["fedex_theta_max"] = tf.reduce_max(theta)
    for key, value in measurements.items():
      metrics[f"agg_{key}"] = tf.cast(value, tf.float32)
    for key, value in ah_metrics.items():
      metrics[f"ah_{key}"] = tf.cast(value, tf.float32)
    if config.needs_client_val:
      metrics["client_val_accuracy"] = tf.math.divide_no_nan(sums["val_correct"], sums["val_predictions"])
    return new_state, metrics

  if config.aggregation_norm == "all":
    client_out = client_out_type
    inv_total = np.float32(1.0 / float(total_examples))

    @tff.tensorflow.computation(client_out["delta"], client_out["metrics"])
    def kept_examples(delta, metrics):
      """n_k of a client whose update reaches the aggregate (finite), else 0."""
      finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(d)) for d in delta]))
      finite = tf.logical_and(finite, tf.equal(metrics["nonfinite"], 0.0))
      return tf.where(finite, tf.cast(metrics["num_examples"], tf.float32), tf.constant(0.0))

    @tff.tensorflow.computation(agg_result_type.result.member, np.float32)
    def scale_to_all(mean_delta, kept):
      """Algorithm 1 line 13 (seed 000): the weighted mean over S_t times Σ_{S_t} n_k / N."""
      return [d * kept * inv_total for d in mean_delta]

  # ---- federated computations ------------------------------------------------------
  agg_state_type = agg_process.initialize.type_signature.result.member

  full_state_type = tff.StructWithPythonType(
      [("core", state_type), ("agg", agg_state_type)], collections.OrderedDict)

  @tff.federated_computation
  def initialize_fn():
    core = tff.federated_eval(server_init, tff.SERVER)
    agg = agg_process.initialize()
    return tff.federated_zip(collections.OrderedDict(core=core, agg=agg))

  def _round(state, client_inputs):
    core, agg_state = state.core, state.agg
    hparams = tff.federated_map(round_hparams, core)
    broadcast = tff.federated_broadcast(tff.federated_map(make_broadcast, (core, hparams)))
    outputs = tff.federated_map(client_update, (broadcast, client_inputs))
    agg_output = agg_process.next(agg_state, outputs.delta, outputs.weight)
    sums = tff.federated_sum(outputs.metrics)
    mean_delta = agg_output.result
    if config.aggregation_norm == "all":  # Σ_{S_t} (n_k / N) Δ_k = (Σ_{S_t} n_k / N) · weighted mean
      kept = tff.federated_sum(tff.federated_map(kept_examples, (outputs.delta, outputs.metrics)))
      mean_delta = tff.federated_map(scale_to_all, (mean_delta, kept))
    updated = tff.federated_map(
        server_update, (core, hparams, mean_delta, sums, agg_output.measurements))
    new_core, metrics = updated[0], updated[1]
    new_state = tff.federated_zip(collections.OrderedDict(core=new_core, agg=agg_output.state))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics), outputs

  server_state_type = tff.FederatedType(full_state_type, tff.SERVER)
  clients_type = tff.FederatedType(trainer.input_type(), tff.CLIENTS)

  @tff.federated_computation(server_state_type, clients_type)
  def next_fn(state, client_inputs):
    output, _ = _round(state, client_inputs)
    return output

  next_with_client_states = None
  if trainer.theta_in:
    @tff.federated_computation(server_state_type, clients_type)
    def next_with_client_states(state, client_inputs):
      output, outputs = _round(state, client_inputs)
      return output, outputs.theta

  @tff.tensorflow.computation(full_state_type)
  def get_model_weights(state):
    return state["core"]["model"]

  @tff.tensorflow.computation(full_state_type, weights_type)
  def set_model_weights(state, weights):
    core = collections.OrderedDict(state["core"].items())
    core["model"] = weights
    return collections.OrderedDict(core=core, agg=state["agg"])

  @tff.tensorflow.computation(full_state_type, full_state_type)
  def after_rejection(previous, rejected):
    """The state after a round the divergence guard rejected: ``previous``'s model, optimizer
    and aggregator state, but the round counter of ``rejected`` (the next round draws a new
    h_t and schedule step) and, with AH, the policy ψ that learnt from the rejected h_t's
    reward, L_t kept at the kept model's loss (server loss source; the clients' source
    measured L_t on the kept model already)."""
    core = collections.OrderedDict(previous["core"].items())
    core["round"] = rejected["core"]["round"]
    if policy is not None:
      ah = reinforce.PolicyState(*rejected["core"]["ah"])
      if not client_loss:
        ah = ah._replace(last_loss=reinforce.PolicyState(*previous["core"]["ah"]).last_loss)
      core["ah"] = ah
    return collections.OrderedDict(core=core, agg=previous["agg"])

  @tff.tensorflow.computation(full_state_type)
  def get_hparams(state):
    return optimizer.get_hparams(state["core"]["opt"])

  @tff.tensorflow.computation(full_state_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    core = collections.OrderedDict(state["core"].items())
    core["opt"] = optimizer.set_hparams(state["core"]["opt"], hparams)
    return collections.OrderedDict(core=core, agg=state["agg"])

  return RobustProcess(initialize_fn, next_fn, get_model_weights, set_model_weights,
                       next_with_client_states=next_with_client_states, trainer=trainer,
                       after_rejection=after_rejection,
                       get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)
