"""The README's flag table lists exactly the flags `python -m tff_robust.main --helpfull` shows."""

import os
import re
import subprocess
import sys

from helpers.paths import ROOT


def readme_flag_table() -> set[str]:
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  table = text.split("### Flags", 1)[1].split("\n#", 1)[0]
  names = set()
  for line in table.splitlines():
    if line.startswith("| `--"):
      first_column = line.split("|")[1]
      names |= set(re.findall(r"`--([a-z0-9_]+)`", first_column))
  return names


def helpfull_project_flags() -> set[str]:
  proc = subprocess.run([sys.executable, "-m", "tff_robust.main", "--helpfull"], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  sections = re.split(r"^(\S+):\n", proc.stdout, flags=re.M)
  bodies = [body for header, body in zip(sections[1::2], sections[2::2]) if header.endswith("definitions")]
  assert len(bodies) == 1, [h for h in sections[1::2]]
  return set(re.findall(r"^  --(?:\[no\])?([a-z0-9_]+):", bodies[0], flags=re.M))


def test_readme_flag_table_matches_helpfull():
  documented, defined = readme_flag_table(), helpfull_project_flags()
  assert len(defined) > 50
  assert not defined - documented, f"flags missing from the README's table: {sorted(defined - documented)}"
  assert not documented - defined, f"README rows for flags that do not exist: {sorted(documented - defined)}"
