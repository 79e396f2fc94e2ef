"""docs/flags.md is what `python -m tff_robust.flags.reference` renders, and it lists exactly the
project's flags that `python -m tff_robust.main --helpfull` shows (no tracing: flags only).

Both come from one new interpreter (each start imports TensorFlow and TFF, 7-8 CPU-s): it prints
main's ``--helpfull`` (`main.run_argv`: the command's text, but for the four help flags `app.run`
adds to absl's own section) while only main's flags are defined, then `reference.main()`, which
defines tune's too. Not this process: every pytest worker has defined tune's flags in the same
module (`helpers.flag_parse`), and both texts list a module's flags. The programs' start-up and
exit are other tests' (test_cli's default run for main)."""

import functools
import os
import re
import subprocess
import sys

from helpers.paths import ROOT

PAGE = os.path.join(ROOT, "docs", "flags.md")
BETWEEN = "----- the reference -----"
BOTH = f"""
import sys
from tff_robust import main
code = main.run_argv(["main", "--helpfull"])
print({BETWEEN!r}, flush=True)
from tff_robust.flags import reference
reference.main()
sys.exit(code)
"""


@functools.lru_cache(maxsize=None)
def _helpfull_and_reference() -> tuple[str, str]:
  """``main --helpfull``'s stdout and the reference's, from one new interpreter."""
  proc = subprocess.run([sys.executable, "-c", BOTH], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  helpfull, reference = proc.stdout.split(BETWEEN + "\n")
  return helpfull, reference


def _page() -> str:
  with open(PAGE, encoding="utf-8") as f:
    return f.read()


def helpfull_project_flags() -> set[str]:
  """The flags `--helpfull` lists under the project's module (`tff_robust.flags.definitions`)."""
  sections = re.split(r"^(\S+):\n", _helpfull_and_reference()[0], flags=re.M)
  bodies = [body for header, body in zip(sections[1::2], sections[2::2]) if header.endswith("definitions")]
  assert len(bodies) == 1, [h for h in sections[1::2]]
  return set(re.findall(r"^  --(?:\[no\])?([a-z0-9_]+):", bodies[0], flags=re.M))


def test_committed_page_is_the_generated_reference():
  assert _page() == _helpfull_and_reference()[1], (
      "docs/flags.md is stale: uv run python -m tff_robust.flags.reference > docs/flags.md")


def test_page_lists_the_flags_helpfull_shows():
  main_part = _page().split("## `python -m tff_robust.tune`", 1)[0]
  documented = set(re.findall(r"^\| `--([a-z0-9_]+)` \|", main_part, flags=re.M))
  defined = helpfull_project_flags()
  assert len(defined) > 50
  assert documented == defined, (sorted(defined - documented), sorted(documented - defined))
