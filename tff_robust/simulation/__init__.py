"""The simulation driver: runs a `LearningProcess` round after round (`loop`), by role — which
clients take part (`selection`), their input and validation split (`client_data`), per-client
matching state θ^i (`client_states`), the divergence guard (`guard`), checkpoints and exact resume
(`checkpoints`), metrics out (`releases`), and TFF's program coroutines from synchronous code
(`program_io`).

May import: tff_robust.common, tff_robust.algorithms and the task contract (tff_robust.tasks.base).
Never the runtime, tuning or the
experiment runner."""
