"""The README stays a guide: short, with the set-up commands a fresh machine needs, and every
relative link of it and of the docs pages it leads to pointing at a file (and heading) that
exists. The flag reference it links is checked in `test_flags_reference.py`."""

import os
import re

import pytest

from helpers.paths import ROOT

# The pages whose links are checked (others' generated pages, e.g. docs/results.md, have their own tests).
PAGES = ("README.md", "docs/methods.md", "docs/experiments.md", "docs/running.md", "docs/flags.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


def slug(heading: str) -> str:
  """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
  return {slug(m) for m in re.findall(r"^#+ (.+)$", _read(path), flags=re.M)}


def test_readme_is_a_few_hundred_lines():
  assert len(_read("README.md").splitlines()) <= 300


def test_readme_keeps_the_set_up_commands():
  readme = _read("README.md")
  for command in ("pip install uv && uv run python -m tff_robust.main", "uv run pytest ",
                  "pip install --no-deps -r requirements.txt && pip install --no-deps -e .",
                  "uv sync --compile-bytecode"):
    assert command in readme, command


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
  broken = []
  for target in LINK.findall(_read(page)):
    if re.match(r"[a-z]+:", target):
      continue
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
    if not os.path.exists(os.path.join(ROOT, resolved)):
      broken.append(target)
    elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
      broken.append(target)
  assert not broken, f"{page}: {broken}"


def test_slug_follows_github():
  assert slug("Seed 004: adaptive server optimizers on Synthetic(1, 1)") == (
      "seed-004-adaptive-server-optimizers-on-synthetic1-1")
  assert slug("Representation matching's arithmetic") == "representation-matchings-arithmetic"


def flag_table_examples() -> list[str]:
  """The example column of the README's table of robustness and privacy flags."""
  readme = _read("README.md")
  table = readme.split("The robustness and privacy flags", 1)[1].split("\n\n", 2)[1]
  return [re.findall(r"`([^`]+)`", row.split(" | ")[1])[0] for row in table.splitlines()[2:]]


def test_every_flag_example_of_the_readme_parses():
  """Each example is a valid command line of `main`: its flags parse (the paper setting filled in as
  `main` does), and the aggregator's assumption holds for the default task's 10 clients, as `main`
  checks before tracing."""
  from helpers.flag_parse import parse_main  # pylint: disable=g-import-not-at-top
  from tff_robust.simulation import loop  # pylint: disable=g-import-not-at-top
  examples = flag_table_examples()
  assert len(examples) == 8 and examples[0] == "--aggregator=geometric_median"
  for example in examples:
    config, _, _ = parse_main(*example.split())
    assert config.task == "mnist"
    loop.resolve_robust(config.process, config.loop, 10)  # raises when f breaks the rule's bound

