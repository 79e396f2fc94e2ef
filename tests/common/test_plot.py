"""A short offline run with AH writes its trajectory to the CSV; the plot command draws Fig. 3."""

import csv

import matplotlib.image
import numpy as np
import pytest

from tff_robust import plot
from tff_robust.algorithms import client_work, process
from tff_robust.algorithms.config import ClientConfig, ProcessConfig
from tff_robust.algorithms.methods.ah.options import AHConfig
from tff_robust.simulation import loop

from helpers import toy


def test_ah_run_trajectory_and_plot(tff_rt, tmp_path):
  task = toy.toy_task()
  spec = client_work.ModelSpec(task.model_fn, task.loss_fn, task.accuracy_fn,
                               task.train.element_type_structure)
  x, y = next(iter(task.test.batch(60)))
  ah = AHConfig(lr_grid=(0.01, 0.1, 0.3), steps_grid=(2, 4, 8), hyper_lr=0.5)
  p = process.build_process(spec, ProcessConfig(client=ClientConfig(local_steps=4, batch_size=16), ah=ah),
                            server_val=(x.numpy(), y.numpy()))
  runs = []
  for name, seed in (("iid", 1), ("non-iid", 2)):
    out = tmp_path / name
    loop.TrainingLoop(p, task, loop.LoopConfig(output_dir=str(out), rounds=5, clients_per_round=3,
                                               seed=seed)).run()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 5
    for row in rows:  # h_t on the grid, μ inside the grid's range
      assert float(row["client_lr"]) == pytest.approx(min((0.01, 0.1, 0.3), key=lambda v: abs(
          v - float(row["client_lr"]))), rel=1e-6)
      assert 0.01 - 1e-6 <= float(row["ah_lr_mu"]) <= 0.3 + 1e-6
      assert 2 - 1e-6 <= float(row["ah_steps_mu"]) <= 8 + 1e-6
    runs.append(f"toy/{name}={out}")
  png = tmp_path / "fig3.png"
  plot.main([str(png), *runs, "--title", "toy"])
  image = matplotlib.image.imread(png)
  assert image.shape[0] > 300 and image.shape[1] > 300
  assert np.std(image) > 0.01  # something was drawn


def test_plot_rejects_runs_without_ah(tmp_path):
  (tmp_path / "metrics.csv").write_text("round,train_loss\n1,0.5\n")
  with pytest.raises(ValueError, match="not made with --ah"):
    plot.plot_trajectories(str(tmp_path / "x.png"), [f"a={tmp_path}"])
  with pytest.raises(ValueError, match="LABEL=RUN_DIR"):
    plot.parse_run("no-equals-sign")


def test_a_label_keeps_its_colour_in_every_panel(tmp_path, monkeypatch):
  """Fig. 3's panels list their runs in different orders; "iid" is one colour in both."""
  for name in ("a", "b"):
    (tmp_path / name).mkdir()
    (tmp_path / name / "metrics.csv").write_text(
        "round,ah_lr_mu,ah_steps_mu,client_lr,local_steps\n1,0.1,20,0.1,20\n2,0.05,10,0.03,10\n")
  figures = []
  monkeypatch.setattr(plot, "save", lambda fig, out_png, title="": figures.append(fig) or out_png)
  plot.plot_trajectories(str(tmp_path / "x.png"), [
      f"MNIST/iid={tmp_path / 'a'}", f"MNIST/non-iid={tmp_path / 'b'}",
      f"KWS/non-iid={tmp_path / 'b'}", f"KWS/iid={tmp_path / 'a'}"])
  colours = [{line.get_label(): line.get_color() for line in ax.get_lines()}
             for ax in figures[0].axes]
  assert len(colours) == 4 and all(c == colours[0] for c in colours)
  assert colours[0]["iid"] != colours[0]["non-iid"]


def _clients_run(path):
  from tff_robust.simulation.client_metrics import ClientMetricsWriter  # pylint: disable=g-import-not-at-top
  path.mkdir()
  writer = ClientMetricsWriter(str(path))
  for t, norms in ((1, (1.0, 2.0, 6.0)), (2, (0.5, 1.5, 4.0))):
    rows = [dict(examples=10.0, local_loss=0.3, local_accuracy=0.9, update_norm=n, aggregation_weight=10.0,
                 nonfinite=0.0) for n in norms]
    writer.write(t, ["0", "1", "2"], [False, False, True], rows, None)
  return path


def test_clients_plot_draws_each_client_and_the_rounds_mean(tmp_path, monkeypatch):
  run = _clients_run(tmp_path / "run")
  rows = plot.read_clients(str(run))
  assert rows[2] == dict(round=1.0, client_id="2", byzantine=1.0, examples=10.0, local_loss=0.3,
                         local_accuracy=0.9, update_norm=6.0, aggregation_weight=10.0,
                         weight_given=pytest.approx(1 / 3), nonfinite=0.0)
  figures = []
  monkeypatch.setattr(plot, "save", lambda fig, out_png, title="": figures.append(fig) or out_png)
  plot.plot_clients(str(tmp_path / "x.png"), [f"krum={run}"], "update_norm")
  ax = figures[0].axes[0]
  mean = [line for line in ax.get_lines() if line.get_label() == "mean over clients"][0]
  assert list(mean.get_ydata()) == pytest.approx([3.0, 2.0])
  points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets())
  assert points == sorted([(1, 1.0), (1, 2.0), (1, 6.0), (2, 0.5), (2, 1.5), (2, 4.0)])
  crosses = [c for c in ax.collections if c.get_label().startswith("_")]  # the byzantine client's rounds
  assert [tuple(map(tuple, c.get_offsets())) for c in crosses] == [((1.0, 6.0), (2.0, 4.0))]
  with pytest.raises(ValueError, match=r"--clients: 'norm' is not a column of .*clients.csv; it has: byzantine"):
    plot.plot_clients(str(tmp_path / "x.png"), [f"krum={run}"], "norm")
  with pytest.raises(FileNotFoundError, match="not made with --client_metrics"):
    plot.read_clients(str(tmp_path))


def test_clients_plot_command(tmp_path):
  run = _clients_run(tmp_path / "run")
  png = tmp_path / "clients.png"
  plot.main([str(png), f"a={run}", f"b={run}", "--clients=weight_given"])
  assert matplotlib.image.imread(png).shape[1] > 600  # two panels
