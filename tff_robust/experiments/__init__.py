"""The seeds' experiments: tables of cells (`tables`), each cell x seed a run of
`tff_robust.main` (`runs`), started as child processes (`scheduler`), summarised in the seed's
layout (`report`); ``python -m tff_robust.experiments`` is the command line (`__main__`). The
studies that chose settings (`studies`) and the results page (`page`) are sub-packages built on
this runner, each with its own imports (their `__init__`s say which); the runner imports neither.

This layer starts programs and reads their outputs; it imports no TensorFlow (a data-source
check loads `tff_robust.tasks` only when asked). The names below are its public API.

May import: tff_robust.common, tff_robust.runtime.children, tff_robust.plot, tff_robust.flags (to
find flagfiles) and tff_robust.tasks (a data-source check, on demand); the training stack only
through the programs it starts.
"""

from tff_robust.experiments.report import (DASH, Summary, format_cell, notes_for, plot_fig3,
                                           read_values, summarize, to_markdown, write_table)
from tff_robust.experiments.runs import (BUSY, CONFLICT, DONE, FLAGS_DIR, PENDING, Overrides, Run,
                                         check_data_sources, expand_args, flagfile_path, main_task,
                                         parse_data_sources, plan)
from tff_robust.experiments.scheduler import (INTERRUPTED, STOP_TIMEOUT, RunResult, Terminated,
                                              interruptible, run_all, run_to_exit_code)
from tff_robust.experiments.tables import (ACCURACY, MSE, SECONDS, RMAH_METHODS, RMAH_ROWS,
                                           RMAH_TASKS, FEDOPT_OPTS, TABLES, Axis, Cell, Metric,
                                           Table, build_table, rmah_cell, fedopt_cell, select)
