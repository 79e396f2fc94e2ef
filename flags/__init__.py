"""The command line: flag definitions (`definitions`), the record that binds a run directory to
its flags (`record`), the generated reference (`reference`) and the flagfiles (``*.cfg``).

May import: tff_robust.common, algorithms, simulation, runtime, tasks and tuning (to turn flags
into their configs); never the experiment runner or the commands."""
