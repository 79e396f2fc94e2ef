"""docs/flags.md is what `python -m tff_robust.flags.reference` renders, and it lists exactly the
project's flags that `python -m tff_robust.main --helpfull` shows (no tracing: flags only)."""

import os
import re
import subprocess
import sys

from helpers.paths import ROOT

PAGE = os.path.join(ROOT, "docs", "flags.md")


def _run(*args: str) -> str:
  proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout


def _page() -> str:
  with open(PAGE, encoding="utf-8") as f:
    return f.read()


def helpfull_project_flags() -> set[str]:
  """The flags `--helpfull` lists under the project's module (`tff_robust.flags.definitions`)."""
  sections = re.split(r"^(\S+):\n", _run("tff_robust.main", "--helpfull"), flags=re.M)
  bodies = [body for header, body in zip(sections[1::2], sections[2::2]) if header.endswith("definitions")]
  assert len(bodies) == 1, [h for h in sections[1::2]]
  return set(re.findall(r"^  --(?:\[no\])?([a-z0-9_]+):", bodies[0], flags=re.M))


def test_committed_page_is_the_generated_reference():
  assert _page() == _run("tff_robust.flags.reference"), (
      "docs/flags.md is stale: uv run python -m tff_robust.flags.reference > docs/flags.md")


def test_page_lists_the_flags_helpfull_shows():
  main_part = _page().split("## `python -m tff_robust.tune`", 1)[0]
  documented = set(re.findall(r"^\| `--([a-z0-9_]+)` \|", main_part, flags=re.M))
  defined = helpfull_project_flags()
  assert len(defined) > 50
  assert documented == defined, (sorted(defined - documented), sorted(documented - defined))
