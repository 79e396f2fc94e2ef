"""The studies that chose the flagfiles' settings, each a command
(``python -m tff_robust.experiments.studies.NAME``) whose record is under docs/runs/:
`ah_options` (variants of FA+AH / FA+RM / FA+RM+AH / SCAFFOLD through the experiment runner, and
the rule that picks one on validation data), `rm_large_step` (one round at each lr from one common
state), `ah_reward_by_lr` (eq. 7's advantage per sampled lr in finished runs), `rm_curves` (FA
against FA+RM per round), `kws_rm_check` and `kws_probe` (the keyword corpus: FA's lr, the RM
weight, a linear probe of the features) and `kws_features` (the corpus's acoustic effects).

May import: tff_robust.common, algorithms, simulation, runtime, tasks, flags, plot and the
experiment runner (tff_robust.experiments); nothing in the library imports a study.
"""
