"""``python -m tff_robust.experiments.page``: the results page (see `results`)."""

import sys

from tff_robust.common import interrupts
from tff_robust.experiments.page import results

if __name__ == "__main__":
  exit_code = results.main()
  if exit_code == 130:  # every run is stopped and said so: no teardown (`interrupts.exit_now`)
    interrupts.exit_now(exit_code)
  sys.exit(exit_code)
