"""The tree reads like the pipeline (docs/DESIGN.md "Layout"): every import, at module level or inside a
function, goes from a stage to the same stage or a lower one, and no modules import each other in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tracekit"

# Lower stages first. A module may import only from its own stage or an earlier one.
STAGES = [
    ("version", "errors", "flags", "settings", "native"),
    ("data",),
    ("capture",),  # target side: stdlib + torch only (checked below)
    ("parse",),
    ("analysis",),
    ("compare", "whatif"),
    ("render",),
    ("export",),
    ("orchestrate",),
    ("scale",),
    ("api",),
    ("commands",),  # the table of commands and their modules; they import no tracekit.cli
    ("cli", "__main__", "__init__"),
]
RANK = {name: i for i, names in enumerate(STAGES) for name in names}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path, mods: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tracekit.x import name` also names tracekit.x.name, a module when x is a package
            named = {f"{node.module}.{a.name}" for a in node.names}
            out.update(named)
            # The package face `tracekit` runs before any of its modules: importing a module through it
            # (`from tracekit import api`) is no dependency on the face; importing a name of it is.
            if node.module != "tracekit" or not named <= set(mods):
                out.add(node.module)
    return {m for m in out if m == "tracekit" or m.startswith("tracekit.")}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        graph[name] = {m for m in _imports(path, mods) if m in mods and m != name}
    return graph


def test_every_module_belongs_to_a_stage():
    unknown = sorted({_stage(m) for m in _modules()} - set(RANK))
    assert not unknown, f"add these to STAGES (and docs/DESIGN.md's layout): {unknown}"


def test_no_import_from_a_lower_stage_to_a_higher_one():
    bad = []
    for mod, deps in _graph().items():
        for dep in deps:
            if RANK[_stage(dep)] > RANK[_stage(mod)]:
                bad.append(f"{mod} imports {dep}")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ importing its own submodules is no cycle of code; a submodule importing the
    # package face back is. Tarjan's strongly connected components over the whole graph:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_every_command_of_the_table_is_a_function_of_its_module():
    """tracekit.cli registers the rows of tracekit.commands.COMMANDS (imported by name, so the import
    graph above does not see them): each names a module of the commands stage that defines it, and every
    command module is in the table."""
    from tracekit.commands import COMMANDS

    mods = _modules()
    for name, row in COMMANDS.items():
        assert row.name == name and _stage(row.module) == "commands" and row.module in mods, row
        body = ast.parse(mods[row.module].read_text()).body
        defined = {node.name for node in body if isinstance(node, ast.FunctionDef)}
        assert name in defined, f"{row.module} defines no function {name}"
    helpers = {"tracekit.commands", "tracekit.commands.flags"}
    listed = {row.module for row in COMMANDS.values()}
    assert {m for m in mods if _stage(m) == "commands"} - helpers == listed


def test_the_capture_side_imports_only_itself():
    bad = [
        f"{mod} imports {dep}"
        for mod, deps in _graph().items()
        if _stage(mod) == "capture"
        for dep in deps
        if _stage(dep) not in ("capture", "version")
    ]
    assert not bad, bad


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "split these into named steps:\n" + "\n".join(long)
