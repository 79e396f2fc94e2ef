"""Representation-matching client training by hand (seed 000 eq. 2 with θ's own Adam), in eager
TF on the toy model: what the TFF client computation and the refine evaluation must equal."""

import numpy as np
import tensorflow as tf

from tff_robust.algorithms import regularizers
from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.config import ProcessConfig
from tff_robust.algorithms.methods.er import ERConfig
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.algorithms.methods.wd import WDConfig

from helpers import toy


def manual_rm_client(w0, theta0, x, y, config: ProcessConfig):
  """Eq. 2 (+ ER, WD) by hand in eager TF: SGD on w^i for CE + λ L_M^norm (+ ER, WD), and
  textbook Adam (fresh moments, lr = rm_theta_lr) on θ^i for eq. 1's sum form."""
  cfg, rm = config.client, config.options_of(RMConfig)
  h_min, mu = config.options_of(ERConfig).h_min, config.options_of(WDConfig).mu
  model, frozen = toy.model_fn(), toy.model_fn()
  for v, w in zip(model.trainable_variables, w0):
    v.assign(w)
  for v, w in zip(frozen.trainable_variables, w0):
    v.assign(w)
  matcher = matching.RepresentationMatcher(model, seed=3, top_source=rm.top_source, form=rm.layers)
  for v, t in zip(matcher.theta, theta0):
    v.assign(t)
  units = matcher.term_units
  m = [np.zeros(v.shape, np.float32) for v in matcher.theta]
  s2 = [np.zeros(v.shape, np.float32) for v in matcher.theta]
  b1, b2, eps = 0.9, 0.999, 1e-7
  loss = toy.loss_fn()
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(cfg.batch_size).take(cfg.local_steps)
  for t, (xb, yb) in enumerate(ds, start=1):
    _, facts, _ = matcher.forward(frozen, xb, training=False, record_argmax=False)
    with tf.GradientTape(persistent=True) as tape:
      logits, acts, arg = matcher.forward(model, xb, training=True, record_argmax=True)
      recs = matcher.reconstructions(acts, arg)
      terms = [tf.reduce_sum(tf.square(r - a)) / xb.shape[0] for r, a in zip(recs, facts[:-1])]
      if rm.normalize == "unit":
        matched = sum(term / u for term, u in zip(terms, units))
      else:
        matched = sum(terms)
      total = loss(yb, logits) + rm.weight * matched
      if h_min > 0:
        total += regularizers.entropy_regularizer(logits, h_min)
      if mu > 0:
        total += mu * regularizers.weight_divergence(model.trainable_variables, w0)
      theta_loss = sum(terms)
    w_grads = tape.gradient(total, model.trainable_variables)
    theta_grads = tape.gradient(theta_loss, matcher.theta)
    for v, g in zip(model.trainable_variables, w_grads):
      v.assign_sub(cfg.lr * g)
    for k, (v, g) in enumerate(zip(matcher.theta, theta_grads)):
      g = g.numpy()
      m[k] = b1 * m[k] + (1 - b1) * g
      s2[k] = b2 * s2[k] + (1 - b2) * g * g
      m_hat, s_hat = m[k] / (1 - b1 ** t), s2[k] / (1 - b2 ** t)
      v.assign_sub(rm.theta_lr * m_hat / (np.sqrt(s_hat) + eps))
  return ([v.numpy() - w for v, w in zip(model.trainable_variables, w0)],
          [v.numpy() for v in matcher.theta])
