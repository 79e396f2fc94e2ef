"""The seeds' methods as TFF computations: one `LearningProcess` (`process`; for a task,
`process_for_task.build_process_for_task`, the public entry point) built from server
components (`server`: the server optimizers of seed 004 in `server_opt`, the learning-rate
`schedules`, the AH policy of seed 000 in `reinforce`, FedEx of seed 002 in `fedex` over a
`search_space`) and client components (`client`: the interface; representation matching of seed
000 in `matching_client` over `matching`, entropy and proximal terms in `regularizers`, FedEx's
sampling in `fedex`, byzantine `attacks`), composed by `client_work`'s trainer as `methods` says;
the client input type in `client_input`, the `aggregation` (weighted means, robust aggregators,
the non-finite guard), `evaluation` and the configs that describe all of it (`config`).

May import: tff_robust.common and the task contract (tff_robust.tasks.base). Never the simulation driver, the runtime, tuning or the
experiment runner."""
