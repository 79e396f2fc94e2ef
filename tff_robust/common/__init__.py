"""Leaf helpers every layer may use: dataclass fields that are also flags (`options`), seeds
derived from (run seed, round, client) (`seeding`), the seed-paired difference (`paired`), what a
round's metrics row says about the round (`round_rows`), the terminal progress display
(`console`, with the shape of a configuration it reads in `run_settings`) and Markdown tables
(`markdown`).

May import: nothing of tff_robust (TensorFlow only where a helper needs it)."""
