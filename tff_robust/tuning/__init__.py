"""Hyper-parameter tuning studies of seed 002: arms trained by the simulation driver (`arms`),
evaluated on the clients' own data (`federated_eval`), chosen by random search or successive
halving (`sha`) in an Optuna-backed `study`.

May import: tff_robust.common, tff_robust.algorithms, tff_robust.simulation and the task
contract (tff_robust.tasks.base). Never the experiment
runner or the entry points."""
