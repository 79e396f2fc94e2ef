"""The seeds' methods as TFF computations: one `LearningProcess` (`process`; for a task,
`process_for_task.build_process_for_task`, the public entry point) built from server
components (`server`: the interface and the server optimizers of seed 004 in `server_opt`, the
learning-rate `schedules`) and client components (`client`: the interface; byzantine `attacks`),
composed by `client_work`'s trainer; what a round sends in `round_protocol`, the saved state's
container in `server_state`. Each method (RM, ER, WD, AH, FedEx, SCAFFOLD) is one module or
sub-package of `methods/`, listed once in `methods.registry`. The client input type in
`client_input`, the `aggregation` (weighted means, robust aggregators, the non-finite guard),
`evaluation`, the search spaces' grammar (`search_space`) and the configs (`config`).

May import: tff_robust.common and the task contract (tff_robust.tasks.base). Never the simulation driver, the runtime, tuning or the
experiment runner."""

from tff_robust.algorithms.methods import registry as _registry  # noqa: E402,F401 (installs the methods' checks)
