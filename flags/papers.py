"""The papers the project follows, by the prefix of the names it gives their settings: flagfiles
(``rmah_common.cfg``), tables (``rmah_table1``) and run folders (``rmah_mnist_c1.0_iid_fa_s0``).

Before these names the project numbered the papers (``seed000_`` ...); `legacy_name` and
`current_name` translate, so a flagfile named the earlier way is still found and a run folder made
before the rename is still resumed (the README's table maps each prefix to its paper).

May import: nothing.
"""

from __future__ import annotations

from typing import Optional

# (prefix, earlier prefix, paper)
PAPERS = (
    ("rmah", "seed000", "Robust Federated Learning through Representation Matching and Adaptive "
                        "Hyper-parameters (RM, ER, AH, the WD baseline)"),
    ("fedex", "seed002", "Khodak et al., Federated Hyperparameter Tuning: Challenges, Baselines, and "
                         "Connections to Weight-Sharing (FedEx, RS/SHA)"),
    ("fedavg_keras", "seed003", "Panda and Marrero, Communication-Efficient Learning of Deep Networks "
                                "on Decentralized Data (accuracy weighting, Keras models)"),
    ("fedopt", "seed004", "Reddi et al., Adaptive Federated Optimization (FedAdagrad/Adam/Yogi, "
                          "FedAvgM, lr schedules)"),
)


def legacy_name(name: str) -> Optional[str]:
  """``name`` with its paper's prefix as it was numbered (``rmah_fa.cfg`` -> ``seed000_fa.cfg``),
  or None when it starts with no paper's prefix."""
  for prefix, earlier, _ in PAPERS:
    if name.startswith(prefix + "_"):
      return earlier + name[len(prefix):]
  return None


def current_name(name: str) -> str:
  """``name`` with a numbered prefix as it is named now (``seed000_fa.cfg`` -> ``rmah_fa.cfg``);
  any other name unchanged."""
  for prefix, earlier, _ in PAPERS:
    if name.startswith(earlier + "_"):
      return prefix + name[len(earlier):]
  return name
