"""The methods' registry: the --algorithm choices, the components a configuration runs and their
order (the client hooks' and the saved state's), the console's method line and the run name."""

import pytest
import tensorflow as tf

from helpers import toy
from tff_robust.algorithms.config import ProcessConfig, RobustConfig, ServerConfig
from tff_robust.algorithms.methods import registry
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.algorithms.methods.er import ERConfig
from tff_robust.algorithms.methods.fedex.space import FedExConfig, FedExOptions, SearchSpace
from tff_robust.algorithms.methods.method import BuildContext
from tff_robust.algorithms.methods.rm import matching
from tff_robust.algorithms.methods.rm.options import RMConfig
from tff_robust.algorithms.methods.wd import WDConfig

SPECS = [tf.TensorSpec(v.shape, v.dtype) for v in toy.model_fn().trainable_variables]
FEDEX = FedExConfig(space=SearchSpace(learning_rate=None, local_epochs=None, prox_mu=(0.0, 0.1)),
                    options=FedExOptions(k=3))


def _keys(config):
  parts = registry.components(BuildContext(toy.SPEC, config, SPECS, 5, None))
  return [c.key for c in parts.client], [s.key for s in parts.server]


def test_the_algorithm_choices_are_the_registrys_by_name_methods():
  assert registry.algorithm_names() == ("fedavg", "scaffold")
  assert registry.Selection().algorithm == "fedavg"
  with pytest.raises(ValueError, match=r"--algorithm='nope' is not valid: choose one of fedavg, scaffold"):
    ProcessConfig(algorithm="nope")


def test_components_run_in_hook_order_and_state_order():
  """Client hooks: RM, ER, the proximal term (FedEx draws μ), FedEx, AH's pre-evaluation, the
  attack; server entries: ah, fedex (the order old checkpoints hold)."""
  config = ProcessConfig(methods=(RMConfig(weight=0.1), ERConfig(h_min=0.5)),
                         ah=AHConfig(loss_source="clients"), fedex=FEDEX,
                         robust=RobustConfig(byzantine_attack="sign_flip"))
  assert _keys(config) == (["rm", "er", "prox", "fedex", "ah", "attack"], ["ah", "fedex"])
  scaffold = ProcessConfig(algorithm="scaffold", ah=AHConfig(loss_source="clients"), fedex=FEDEX)
  assert _keys(scaffold) == (["prox", "scaffold", "fedex", "ah"], ["ah", "fedex", "scaffold"])
  assert _keys(ProcessConfig()) == ([], [])


def test_the_console_line_and_the_run_name_come_from_the_methods():
  config = ProcessConfig(methods=(RMConfig(weight=0.1), ERConfig(h_min=0.5), WDConfig(mu=0.01)),
                         ah=AHConfig(), fedex=FEDEX, server=ServerConfig(opt="sgdm"), weighting="uniform")
  assert registry.describe(config) == ("server sgdm (lr 1, momentum 0.9), RM weight 0.1 (θ persist), "
                                       "ER H_min 0.5, WD μ 0.01, AH (loss from server), FedEx (k 3), "
                                       "weights uniform")
  assert registry.run_name_parts(config) == ["rm", "wd", "ah", "fedex"]
  assert registry.describe(ProcessConfig(algorithm="scaffold")) == "SCAFFOLD, server sgd (lr 1), no RM, AH or FedEx"
  assert registry.run_name_parts(ProcessConfig(algorithm="scaffold")) == []


def test_a_server_sample_is_asked_for_by_ah_with_the_server_loss_only():
  assert registry.server_val_examples(ProcessConfig(ah=AHConfig(val_examples=300))) == 300
  assert registry.server_val_examples(ProcessConfig(ah=AHConfig(loss_source="clients"))) == 0
  assert registry.server_val_examples(ProcessConfig()) == 0


def test_the_methods_without_a_switch_hold_their_options_in_the_process_config():
  """RM's, ER's and WD's options live in their modules and are held in ``ProcessConfig.methods``:
  one per class, defaults left out and ordered, so equal configurations compare equal."""
  assert registry.held_option_classes() == (RMConfig, ERConfig, WDConfig)
  config = ProcessConfig(methods=(WDConfig(mu=0.01), RMConfig(weight=0.1), ERConfig()))
  assert config.methods == (RMConfig(weight=0.1), WDConfig(mu=0.01))  # by class: er, rm, wd modules
  assert config == ProcessConfig().with_options(RMConfig(weight=0.1), WDConfig(mu=0.01))
  assert config.options_of(ERConfig) == ERConfig() and config.options_of(RMConfig).weight == 0.1
  assert config.with_options(RMConfig()).methods == (WDConfig(mu=0.01),)
  assert [m.name for m in registry.running(config)] == ["rm", "wd", "fedavg"]
  with pytest.raises(ValueError, match="two options of one class"):
    ProcessConfig(methods=(RMConfig(weight=0.1), RMConfig(weight=0.2)))
  with pytest.raises(ValueError, match="holds AHConfig, not the options of a method without a switch"):
    ProcessConfig(methods=(AHConfig(window=3),))


def test_rm_refuses_scaffold_and_checks_the_tasks_model():
  with pytest.raises(ValueError, match=r"--rm_weight=0.1 is not valid: must be 0 with --algorithm=scaffold"):
    ProcessConfig(algorithm="scaffold", methods=(RMConfig(weight=0.1),))
  model_fn = lambda: tf.keras.Sequential([tf.keras.Input((4, 1)), tf.keras.layers.LSTM(3),
                                          tf.keras.layers.Dense(2)])
  registry.check_model(ProcessConfig(), model_fn)  # RM off: nothing is asked of the model
  with pytest.raises(matching.UnsupportedLayerError):
    registry.check_model(ProcessConfig(methods=(RMConfig(weight=0.1),)), model_fn)
