"""The package's layers, read from the source: each sub-package imports only the layers its
`__init__` docstring allows (algorithms never the simulation driver, tuning, the runtime or the
experiment runner; nothing but themselves imports the studies or the results page), and no module
grows past the size one reads at once."""

import ast
import os

import pytest

from helpers.paths import ROOT

PACKAGE = os.path.join(ROOT, "tff_robust")
# What each layer may import of tff_robust (besides itself); top-level modules are the commands.
ALLOWED = {
    "common": set(),
    "algorithms": {"common", "tasks"},
    "simulation": {"common", "algorithms", "tasks"},
    "runtime": {"common"},
    "tuning": {"common", "algorithms", "simulation", "tasks"},
    "experiments": {"common", "runtime", "plot", "flags", "tasks"},
    # Sub-packages of experiments/ with rules of their own; no other layer may import them.
    "experiments/studies": {"common", "algorithms", "simulation", "runtime", "tasks", "flags", "plot",
                            "experiments"},
    "experiments/page": {"common", "runtime", "plot", "flags", "experiments"},
    # The repository's folders outside tff_robust/: tasks/ and flags/ install as
    # tff_robust.tasks and tff_robust.flags; bench/ uses the library and is never imported by it.
    "tasks": {"common"},
    "flags": {"common", "algorithms", "simulation", "runtime", "tasks", "tuning"},
    "bench": {"common", "algorithms", "simulation", "runtime", "tasks", "tuning", "experiments",
              "flags", "plot"},
}
OUTSIDE = ("tasks", "flags", "bench")  # folders at the repository's root
SUBPACKAGES = {"experiments": ("studies", "page")}
MAX_LINES = 420


def _folder(layer: str) -> str:
  return os.path.join(ROOT, layer) if layer in OUTSIDE else os.path.join(PACKAGE, *layer.split("/"))


def _modules():
  """Every module of each layer, its sub-folders' included (`algorithms/methods/`), but for
  the sub-packages with rules of their own (`SUBPACKAGES`), which are layers themselves."""
  for layer in sorted(ALLOWED):
    folder = _folder(layer)
    own = {os.path.join(folder, sub) for sub in SUBPACKAGES.get(layer, ())}
    for here, dirs, files in os.walk(folder):
      dirs[:] = sorted(d for d in dirs if os.path.join(here, d) not in own and d != "__pycache__")
      if here != folder and not os.path.exists(os.path.join(here, "__init__.py")):
        continue  # data folders (experiments/page's templates), not modules
      for name in sorted(files):
        if name.endswith(".py"):
          yield layer, os.path.join(here, name)


def _imported_parts(path: str) -> set[str]:
  """The layer under tff_robust of every import in the module (function bodies included): its
  first name, or ``first/sub`` for a sub-package with rules of its own (`SUBPACKAGES`)."""
  parts = set()
  for node in ast.walk(ast.parse(open(path).read())):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    for name in names:
      if name.startswith("tff_robust."):
        first, *rest = name.split(".")[1:]
        sub = rest[0] if rest and rest[0] in SUBPACKAGES.get(first, ()) else None
        parts.add(f"{first}/{sub}" if sub else first)
  return parts


@pytest.mark.parametrize("layer,path", list(_modules()), ids=lambda v: os.path.relpath(str(v), ROOT))
def test_a_layer_imports_only_what_it_may(layer, path):
  foreign = _imported_parts(path) - ALLOWED[layer] - {layer}
  assert not foreign, f"{os.path.relpath(path, ROOT)} imports tff_robust.{sorted(foreign)}"


def test_the_rule_sees_a_forbidden_import(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from tff_robust.simulation import loop\nfrom tff_robust import tune\n"
                 "from tff_robust.experiments import studies\nimport tff_robust.experiments.page.plan\n"
                 "from tff_robust.experiments.runs import plan\n")
  assert _imported_parts(str(bad)) == {"simulation", "tune", "experiments/studies", "experiments/page",
                                       "experiments"}


def test_every_layer_says_what_it_may_import():
  for layer in ALLOWED:
    if layer == "bench":  # scripts, not a package
      continue
    doc = ast.get_docstring(ast.parse(open(os.path.join(_folder(layer), "__init__.py")).read()))
    assert doc and "May import:" in doc, layer


def test_nothing_in_the_library_imports_the_benchmarks():
  scripts = {n[:-3] for n in os.listdir(_folder("bench")) if n.endswith(".py")}
  for layer in ALLOWED:
    if layer == "bench":
      continue
    for name in os.listdir(_folder(layer)):
      if name.endswith(".py"):
        tree = ast.parse(open(os.path.join(_folder(layer), name)).read())
        tops = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        tops |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        assert not tops & (scripts | {"bench"}), f"{layer}/{name} imports {sorted(tops & scripts)}"


def test_no_module_is_longer_than_one_reads_at_once():
  long = {}
  for folder, _, files in (w for top in ("tff_robust", "tasks", "flags", "bench")
                           for w in os.walk(os.path.join(ROOT, top))):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        n = sum(1 for _ in open(path))
        if n > MAX_LINES:
          long[os.path.relpath(path, ROOT)] = n
  assert not long, long
