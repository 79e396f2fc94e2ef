"""The seeds' methods as TFF computations: one `LearningProcess` (`process`) built from the server
side (`server`: the server optimizers of seed 004 in `server_opt`, the learning-rate `schedules`,
the AH policy of seed 000 in `reinforce`, FedEx of seed 002 in `fedex` over a `search_space`), the
client side (`client_work`: the local objective with representation matching of seed 000 in
`matching`, entropy and weight-divergence `regularizers`; its input type in `client_input`), the
`aggregation` (weighted means, robust aggregators, the non-finite guard), byzantine `attacks`,
`evaluation` and the configs that describe all of it (`config`).

May import: tff_robust.common and the task contract (tff_robust.tasks.base). Never the simulation driver, the runtime, tuning or the
experiment runner."""
