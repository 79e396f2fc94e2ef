"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Algorithm 1 with option II control variates): ``--algorithm=scaffold``.

The server keeps a control variate c, each client i its own c_i (0 at first). A round: client i
receives x = w_t and c, and takes K local steps

    y ← y − η_l (g_i(y) − c_i + c)                              (Algorithm 1, line 10)

then  c_i⁺ = c_i − c + (x − y_i) / (K η_l)                      (line 12, option II)

and sends Δy_i = y_i − x (the trainer's Δ^i) and Δc_i = c_i⁺ − c_i. The server steps

    x ← x + η_g Δx,   c ← c + (|S|/N) Δc = c + (1/N) Σ_{i∈S} Δc_i   (lines 16-17)

with Δx, Δc the means over the round's clients S and N the task's clients; c stays the mean of
all N c_i. `ScaffoldClient` and `ScaffoldServer` are the two halves.

How it meets the rest of the project (choices):
- Client state: c_i is per-client state (`client.StateSpec`), always persisted by the driver's
  store whatever ``--rm_client_state`` says (that flag is RM's θ^i only), checkpointed with the
  round and restored on resume. A dropped (non-finite) client keeps its c_i and sends Δc_i = 0;
  a round the divergence guard rejects stores no c_i and keeps the server's c.
- Server optimizer: x ← SERVEROPT(x, −Δx). ``--server_opt=sgd`` with ``--server_lr`` = η_g is the
  paper's step; the others (momentum, adaptive) are allowed as generalized-FedAvg variants that
  the paper does not analyse. c's update does not go through the optimizer.
- Δx is the project's weighted mean (``--weighting``, default n_k); ``--weighting=uniform`` is the
  paper's plain mean. Δc is always the plain sum over the round's finite clients, divided by N
  (a robust ``--aggregator`` applies to Δx only).
- K is the number of SGD steps the client took (``--local_steps``, or the epochs' batches), η_l
  the rate it trained with (the schedule's, AH's or FedEx's draw). The correction acts on the
  gradient of the whole local objective (ER and the proximal term included), before FedEx's
  heavy-ball, if any.
- RM is refused (``--rm_weight`` must be 0; the check is RM's, `methods.rm.check`, so that this
  module names no other method's options): RM's term pulls w^i towards the frozen w_t through
  per-client matching layers θ^i trained alongside; c_i would then estimate a drift that mixes the
  task's gradient with RM's and θ^i's moving target, a combination neither paper defines or
  tests, and both methods address the same client drift.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tff_robust.algorithms import server_state
from tff_robust.algorithms.client import Component, LocalResult, LocalRun, StateSpec, Step, all_finite
from tff_robust.algorithms.methods.method import BuildContext, Built, Description, Method

if TYPE_CHECKING:
  from tff_robust.algorithms.server import Round

KEY = "scaffold"


class ScaffoldReport(NamedTuple):
  delta_c: list  # Δc_i = c_i⁺ − c_i (zeros when the client's round is dropped)


class ScaffoldClient(Component):
  """Client half: the corrected gradient g − c_i + c, then c_i⁺ (option II) and Δc_i."""

  key = KEY

  def __init__(self, trainable_specs):
    specs = tuple(tf.TensorSpec(s.shape, s.dtype) for s in trainable_specs)
    self.state = StateSpec(specs, lambda: [np.zeros(s.shape, s.dtype.as_numpy_dtype) for s in specs])

  def gradients(self, run: LocalRun, grads: list, step: Step) -> list:
    c_i, c = run.state[self.key], run.broadcast.extras[self.key]
    return [g - a + b for g, a, b in zip(grads, c_i, c)]

  def after_loop(self, run: LocalRun, result: LocalResult) -> tuple[list, ScaffoldReport]:
    """c_i⁺ = c_i − c + (x − y_i)/(K η_l) = c_i − c − Δy_i/(K η_l); kept only for a finite round
    that took a step."""
    c_i, c = run.state[self.key], run.broadcast.extras[self.key]
    steps = result.train.steps_sum
    k_lr = steps * tf.cast(run.hp.learning_rate, tf.float32)
    new = [a - b - d / tf.maximum(k_lr, 1e-30) for a, b, d in zip(c_i, c, result.delta)]
    keep = tf.logical_and(tf.logical_and(result.finite, steps > 0), all_finite(new))
    new = [tf.where(keep, n, a) for n, a in zip(new, c_i)]
    return new, ScaffoldReport([n - a for n, a in zip(new, c_i)])


class ScaffoldServer:
  """Server half (a `server.ServerComponent`): c, broadcast with w_t; c ← c + (1/N) Σ Δc_i."""

  key = KEY

  def __init__(self, trainable_specs, num_clients: int):
    self.specs = list(trainable_specs)
    self.num_clients = num_clients

  @classmethod
  def control(cls, state) -> Optional[list]:
    """The server's control variate c of a process' full server state, or None without SCAFFOLD."""
    return server_state.entry(state, cls.key)

  def initial_state(self, weights) -> list:
    return [tf.zeros(s.shape, s.dtype) for s in self.specs]

  def broadcast(self, entry) -> list:
    """c, which every client's correction uses."""
    return entry

  def update(self, entry, round_: "Round") -> tuple[list, collections.OrderedDict]:
    delta_c = round_.reports[self.key].delta_c  # Σ_{i∈S} Δc_i
    new = [c + d / float(self.num_clients) for c, d in zip(entry, delta_c)]
    return new, collections.OrderedDict(c_norm=tf.linalg.global_norm(new))


def build(ctx: BuildContext) -> Built:
  """The client and server components of ``--algorithm=scaffold``."""
  if not ctx.num_clients or ctx.num_clients < 1:
    raise ValueError("--algorithm=scaffold needs N, the task's number of clients "
                     "(build_process(num_clients=...))")
  return Built(client=[ScaffoldClient(ctx.trainable_specs)],
               server=[ScaffoldServer(ctx.trainable_specs, ctx.num_clients)])


METHOD = Method(KEY, runs=lambda config: config.algorithm == KEY, build=build,
                describe=lambda config: Description(console="SCAFFOLD"), by_name=True)
