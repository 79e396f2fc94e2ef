"""The seeds' experiments: tables of cells (`tables`), each cell x seed a run of
`tff_robust.main` (`runs`), started as child processes (`scheduler`), summarised in the seed's
layout (`report`); ``python -m tff_robust.experiments`` is the command line (`__main__`). The
studies that chose settings (`studies`) and the results page (`page`) are sub-packages built on
this runner, each with its own imports (their `__init__`s say which); the runner imports neither.
`kws_study` names the keyword study's runs for both (the study writes them, the page reads them);
`planned` holds the studies the runner plans run by run (``--table=rmah_kws200``), which the page
reads through the same plan.

This layer starts programs and reads their outputs; it imports TensorFlow only on demand: a
data-source check, and `preflight`, which checks every run about to start (main's flag parsing,
each task's data) before the first one starts. The names below are its public API, each loaded
from its module on first use, so that ``python -m tff_robust.experiments[.page]`` starts without
anything heavy imported.

May import: tff_robust.common, tff_robust.runtime.children, tff_robust.plot, tff_robust.flags (to
find flagfiles; `preflight` parses runs with main's definitions) and tff_robust.tasks (on demand);
the training stack only through the programs it starts.
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {
    "report": ("DASH", "Summary", "format_cell", "notes_for", "plot_fig3", "read_values", "summarize",
               "to_markdown", "write_table"),
    "runs": ("BUSY", "CONFLICT", "DONE", "PENDING", "Overrides", "Run",
             "check_data_sources", "main_task", "parse_data_sources", "plan"),
    "planned": ("PLANNED", "KWS200", "kws200_runs"),
    "scheduler": ("INTERRUPTED", "STOP_TIMEOUT", "RunResult", "Terminated", "interruptible", "run_all",
                  "run_to_exit_code"),
    "tables": ("ACCURACY", "MSE", "SECONDS", "RMAH_METHODS", "RMAH_ROWS", "RMAH_TASKS", "FEDOPT_OPTS",
               "TABLES", "Axis", "Cell", "Metric", "Table", "build_table", "rmah_cell", "fedopt_cell",
               "select", "tuned_overlay", "overlay_values", "FLAGS_DIR", "expand_args", "flag_values", "flagfile_path"),
}
_MODULE_OF = {name: module for module, names in _API.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
  """A public name (or one of the runner's modules), imported on first use."""
  if name in _API:
    return importlib.import_module(f"{__name__}.{name}")
  if name in _MODULE_OF:
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
