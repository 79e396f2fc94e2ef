"""Running `tff.program`'s coroutines (release and program-state managers) from the
synchronous training loop, also inside a running event loop (Colab, Jupyter)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any


def run_sync(coro: Coroutine) -> Any:
  """Runs a coroutine to completion, also inside a running event loop (Colab)."""
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(coro)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    return pool.submit(asyncio.run, coro).result()
