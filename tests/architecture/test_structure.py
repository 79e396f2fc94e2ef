"""The package's import graph has no cycle, and no function is longer than one reads at once;
both read from the source (`ast`), nothing is imported."""

import ast
import os

from helpers.paths import ROOT

# Folder -> the package it installs as (tasks/ and flags/ sit at the repository's root).
PACKAGES = {"tff_robust": "tff_robust", "tasks": "tff_robust.tasks", "flags": "tff_robust.flags"}
MAX_FUNCTION_LINES = 100
FUNCTION_FOLDERS = ("tff_robust", "tasks", "flags")


def _modules() -> dict[str, str]:
  """Dotted module name -> path, for every module of the package (a package is its ``__init__``)."""
  found = {}
  for folder, package in PACKAGES.items():
    top = os.path.join(ROOT, folder)
    for here, _, files in os.walk(top):
      rel = os.path.relpath(here, top)
      prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
      for name in files:
        if name.endswith(".py"):
          found[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(here, name)
  return found


def _runtime_nodes(tree: ast.AST):
  """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations never run) and
  ``if __name__ == "__main__":`` (they run when the file is the program, module ``__main__``,
  never when the module is imported)."""
  stack = [tree]
  while stack:
    node = stack.pop()
    if isinstance(node, ast.If) and ("TYPE_CHECKING" in ast.unparse(node.test)
                                     or ast.unparse(node.test) in ("__name__ == '__main__'",)):
      stack.extend(node.orelse)
      continue
    yield node
    stack.extend(ast.iter_child_nodes(node))


def _imports(module: str, path: str, modules: dict[str, str]) -> set[str]:
  """The project modules ``module`` imports when it runs (function bodies included): ``from a
  import b`` is module ``a.b`` when that is one, else ``a``."""
  is_package = path.endswith("__init__.py")
  out = set()
  for node in _runtime_nodes(ast.parse(open(path).read())):
    targets = []
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        base = ".".join(parts + ([base] if base else []))
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    for target in targets:
      while target and target not in modules:
        target = target.rpartition(".")[0]
      if target and target != module:
        out.add(target)
  return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components with more than one module (Tarjan's algorithm)."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_there_is_no_import_cycle_in_the_package():
  cycles = _cycles(_graph())
  assert cycles == []


def test_the_cycle_check_sees_a_cycle_and_skips_annotation_imports():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
  assert _cycles(graph) == [["a", "b", "c"]]
  tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  import x\nelse:\n  import y\n"
                   "def f():\n  import z\nif __name__ == '__main__':\n  import cli\n")
  names = {a.name for n in _runtime_nodes(tree) if isinstance(n, ast.Import) for a in n.names}
  assert names == {"y", "z"}


def test_the_configs_do_not_import_the_methods():
  """`algorithms.config` is below the methods: they import it, it names them only for annotations
  (and, lazily, the two options classes scripts still import from it)."""
  graph = _graph()
  eager = {m for m in graph["tff_robust.algorithms.config"] if m.startswith("tff_robust.algorithms.methods")}
  assert eager <= {"tff_robust.algorithms.methods.ah.options", "tff_robust.algorithms.methods.fedex.space"}
  assert "tff_robust.algorithms.methods.registry" not in graph["tff_robust.algorithms.config"]
def test_no_function_is_longer_than_one_reads_at_once():
  long = {}
  for folder in FUNCTION_FOLDERS:
    for here, _, files in os.walk(os.path.join(ROOT, folder)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(here, name)
          for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
              lines = node.end_lineno - node.lineno + 1
              if lines > MAX_FUNCTION_LINES:
                long[f"{os.path.relpath(path, ROOT)}:{node.name}"] = lines
  assert not long, long
