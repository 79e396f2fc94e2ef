"""``python -m tff_robust.experiments.page``: the results page (see `results`)."""

import sys

from tff_robust.experiments.page import results

if __name__ == "__main__":
  sys.exit(results.main())
