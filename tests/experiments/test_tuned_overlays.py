"""A Table 1 cell's own overlay (flags/rmah_<task>_<row>_<method>.cfg): appended after the method's
flagfiles when it exists, left out with ``tuned=False`` (the study's runs), and described on the
results page from its flags."""

from tff_robust import experiments as ex
from tff_robust.experiments import tables
from tff_robust.experiments.page import tuned


def test_an_overlay_is_appended_last_when_it_exists(tmp_path, monkeypatch):
  monkeypatch.setattr(tables, "FLAGS_DIR", str(tmp_path))
  plain = ex.rmah_cell("mnist", "c0.5_iid", "fa_wd")
  assert plain.flagfiles == ("rmah_common.cfg", "rmah_mnist.cfg", "rmah_fa.cfg", "rmah_fa_wd.cfg")
  (tmp_path / "rmah_mnist_c0.5_iid_fa_wd.cfg").write_text("--client_lr=0.3\n")
  cell = ex.rmah_cell("mnist", "c0.5_iid", "fa_wd")
  assert cell.flagfiles == plain.flagfiles + ("rmah_mnist_c0.5_iid_fa_wd.cfg",)
  assert ex.rmah_cell("mnist", "c0.5_iid", "fa_wd", tuned=False).flagfiles == plain.flagfiles
  assert ex.rmah_cell("mnist", "c0.5_iid", "fa").flagfiles == ("rmah_common.cfg", "rmah_mnist.cfg", "rmah_fa.cfg")


def test_fa_rm_runs_fas_overlay_and_ah_keeps_its_own_rule(tmp_path, monkeypatch):
  """FA+RM takes FA's tuned schedule (FA+RM − FA is RM alone); the AH methods keep their files
  (AH's start was checked against the tuned point on validation and kept); FA+WD without its own
  overlay keeps the flagfiles' schedule."""
  monkeypatch.setattr(tables, "FLAGS_DIR", str(tmp_path))
  before = {m: ex.rmah_cell("mnist", "c0.5_iid", m) for m in ("fa_ah", "fa_rm_ah")}
  (tmp_path / "rmah_mnist_c0.5_iid_fa.cfg").write_text("# chosen\n--client_lr=0.3\n--local_steps=2\n")
  rm = ex.rmah_cell("mnist", "c0.5_iid", "fa_rm")
  assert rm.flagfiles == ("rmah_common.cfg", "rmah_mnist.cfg", "rmah_fa.cfg", "rmah_fa_rm.cfg",
                          "rmah_mnist_c0.5_iid_fa.cfg")
  assert ex.rmah_cell("mnist", "c0.5_iid", "fa_rm", tuned=False).flagfiles == rm.flagfiles[:-1]
  assert ex.overlay_values("mnist", "c0.5_iid", "fa_rm") == {"client_lr": "0.3", "local_steps": "2"}
  assert {m: ex.rmah_cell("mnist", "c0.5_iid", m) for m in before} == before
  assert ex.rmah_cell("mnist", "c0.5_iid", "fa_wd").flagfiles[-1] == "rmah_fa_wd.cfg"


def test_the_page_describes_each_overlay():
  assert tuned.describe({"client_lr": "0.3", "local_steps": "20", "client_lr_schedule": "constant",
                         "local_steps_decay_rate": "1.0"}) == "lr 0.3, 20 steps, constant"
  assert tuned.describe({"client_lr": "0.1", "local_steps": "50", "client_lr_schedule": "expdecay",
                         "client_lr_decay_every": "20", "wd_mu": "0.05"}) == \
      "lr 0.1, 50 steps, lr ×0.5, steps ×0.75 every 20 rounds, μ 0.05"
  assert tuned.describe({"client_lr": "0.3", "local_steps": "1"}).startswith("lr 0.3, 1 step, ")


def test_the_page_table_lists_the_committed_overlays():
  lines = tuned.tuned_lines("mnist")
  found = [r for r, *_ in ex.RMAH_ROWS if ex.tuned_overlay("mnist", r, "fa")]
  assert (lines == []) == (found == [])
  for r in found:
    with open(ex.flagfile_path(f"rmah_mnist_{r}_fa.cfg")) as f:
      lr = next(line.split("=")[1].strip() for line in f if line.startswith("--client_lr="))
    assert any(f"lr {lr}," in line for line in lines)
