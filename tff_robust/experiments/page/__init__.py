"""The results page (docs/results.md): `results` runs or finds every run the page needs and writes
it; its sections' parts are the `plan` (seeds, rounds and runs per section, the benchmarks'
records), the seeds' own numbers (`seeds`), the verdicts on the seeds' orderings (`verdicts`),
where each of the paper's tables and figures is (`coverage`), Fig. 3 (`fig3`), the horizon
sections (`horizon`), Table 3's diagnosis (`clients`, `collapses`, `rescue`) and its cell at 200
rounds (`kws200`), its C = 0.5 rows (`kws_half`), seed 004 (`fedopt`), issue 50's DP and
Byzantine tables (`robust`), the timing tables (`timings`) and the runs without a recorded
commit (`commits`).
``python -m tff_robust.experiments.page`` is the command.

May import: tff_robust.common, tff_robust.runtime, tff_robust.plot, tff_robust.flags (the papers'
names) and the experiment runner (tff_robust.experiments); the training stack only through the
programs it starts. Nothing in the library imports the page.
"""
