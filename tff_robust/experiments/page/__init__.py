"""The results page (docs/results.md): `results` runs or finds every run the page needs and writes
it; its sections' parts are the `plan` (seeds, rounds and runs per section, the benchmarks'
records), the seeds' own numbers (`seeds`), the verdicts on the seeds' orderings (`verdicts`),
Fig. 3 (`fig3`), the horizon section (`horizon`) and the timing tables (`timings`).
``python -m tff_robust.experiments.page`` is the command.

May import: tff_robust.common, tff_robust.runtime, tff_robust.plot, tff_robust.flags (the papers'
names) and the experiment runner (tff_robust.experiments); the training stack only through the
programs it starts. Nothing in the library imports the page.
"""
