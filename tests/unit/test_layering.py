"""The package's floor plan, read from its imports (no module is run): each module imports only
modules of its own layer or of the layers below it, and no import circle closes anywhere.

Imports under `if TYPE_CHECKING:` are left out: they are type hints, not dependencies.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import ckptspec
from ckptspec.formats.detect import KINDS

PACKAGE = Path(ckptspec.__file__).parent

LAYERS: list[tuple[str, set[str]]] = [
    (
        "foundations",
        {"_version", "_exceptions", "_exit", "_filetypes", "_pointer", "_crc32", "_crc32c", "_pool", "_storage", "_scan", "_atomic", "_page_cache",
         "_interrupts", "_printable", "_sidecars", "_pickle_policy", "_framework_records", "_json_form", "_json_text", "_dataclass"},
    ),  # fmt: skip
    ("documents", {"_document_values", "_yaml_block", "_yaml_events", "_yaml", "_plain", "_models", "_migrations", "_jsonschema", "_documents", "_records"}),
    ("readers", {"formats"}),
    ("saves", {"_commit"}),
    ("views", {"_views"}),
    ("checks", {"checks"}),
    (
        "validation and reports",
        {"_result", "_discover", "signing", "_validate", "_pickled_config", "_manifests", "_adopt_hf", "adopt", "diff", "report", "lineage", "_dask", "_forked_pool", "registry"},
    ),
    ("adapters", {"adapters", "replay", "_replay_keras", "torch", "lightning", "tensorflow", "keras", "transformers", "accelerate"}),
    ("command line", {"cli", "__main__"}),
]
"""Lowest first: what each top-level module or package of `ckptspec` is part of."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """The `ckptspec` modules the module at `path` imports, anywhere in it but under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hints = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test) for node in ast.walk(branch)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            found |= {f"{target}.{alias.name}" for alias in node.names} | {target}
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {other for other in _imported(path, name) if other in modules and other != name} for name, path in modules.items()}


def _layer(module: str) -> int | None:
    """The index of `module`'s layer; None for the package's own `__init__`, which names the public API lazily."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return next(index for index, (_, members) in enumerate(LAYERS) if parts[1] in members)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    unplaced = [module for module in _graph() if len(module.split(".")) > 1 and not any(module.split(".")[1] in members for _, members in LAYERS)]
    assert unplaced == [], f"add these to a layer in LAYERS: {unplaced}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{module} ({LAYERS[own][0]}) imports {other} ({LAYERS[theirs][0]})"
        for module, imported in sorted(_graph().items())
        if (own := _layer(module)) is not None
        for other in sorted(imported)
        if (theirs := _layer(other)) is not None and theirs > own
    ]
    assert upward == []


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_the_document_models_import_no_reader() -> None:
    graph = _graph()
    models = [module for module in graph if module.startswith("ckptspec._models")]
    assert models and not any(other.startswith("ckptspec.formats") for module in models for other in graph[module])


def test_the_checks_find_an_upward_import_and_a_circle() -> None:
    graph = {"ckptspec._storage": {"ckptspec.formats.detect"}, "ckptspec.formats.detect": {"ckptspec.formats.torchzip"}, "ckptspec.formats.torchzip": {"ckptspec.formats.detect"}}
    assert _layer("ckptspec.formats.detect") > _layer("ckptspec._storage")  # type: ignore[operator]
    assert _circles(graph) == [["ckptspec.formats.detect", "ckptspec.formats.torchzip"]]


def test_every_kind_names_an_inspector_and_a_view_builder_that_exist() -> None:
    for kind, known in KINDS.items():
        for package, reference in (("ckptspec.formats", known.inspector), ("ckptspec._views", known.view)):
            module, function = reference.split(":")
            assert callable(getattr(importlib.import_module(f"{package}.{module}"), function)), f"{kind}: {reference}"
