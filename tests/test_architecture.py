"""Layers point down only: streamer -> engines -> kernels. Every import counts, at any depth of the file
(function-local and TYPE_CHECKING imports included), read from the source with `ast`."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("streamer", "engines", "kernels")
PROJECT = ("streamer", "engines", "kernels", "bench", "web_client", "tests")


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the three layers."""
    out = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(name: str, path: Path) -> set[str]:
    """Every module name `name` (in file `path`) imports, resolved to absolute dotted names; for
    `from X import Y`, X.Y where that is a module of ours, X otherwise."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                out.add(sub if sub in modules() else source)
    return out


@cache
def imports() -> dict[str, set[str]]:
    return {name: _imported(name, path) for name, path in modules().items()}


def _top(module: str) -> str:
    return module.split(".")[0]


def _violations(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{src} imports {dst}" for src, dsts in imports().items() if _top(src) == layer
                  for dst in dsts if _top(dst) in forbidden)


def test_kernels_import_nothing_from_the_project():
    bad = _violations("kernels", tuple(p for p in PROJECT if p != "kernels"))
    assert not bad, bad


def test_engines_import_neither_streamer_nor_bench():
    bad = _violations("engines", ("streamer", "bench"))
    assert not bad, bad


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself), Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def project_cycles() -> list[list[str]]:
    graph = {src: {d for d in dsts if d in modules()} for src, dsts in imports().items()}
    return _cycles(graph)




def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_project_imports_have_no_cycle():
    cycles = project_cycles()
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _room(module: str) -> str | None:
    """The folder of streamer/ a module lives in (`streamer.web.api.routes` -> `web`); None for the loose ones."""
    parts = module.split(".")
    if parts[0] != "streamer" or len(parts) < 2 or (ROOT / "streamer" / f"{parts[1]}.py").exists():
        return None
    return parts[1]


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for src, dsts in imports().items():
        a = _room(src)
        if a is None:
            continue
        graph.setdefault(a, set())
        for dst in dsts:
            b = _room(dst)
            if b is not None and b != a:
                graph[a].add(b)
                graph.setdefault(b, set())
    return graph


def test_no_folder_of_streamer_imports_another_in_a_cycle():
    cycles = _cycles(room_graph())
    assert not cycles, "folders of streamer/ in a cycle: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_streamer_keeps_at_most_four_loose_modules_at_its_top():
    loose = sorted(p.name for p in (ROOT / "streamer").glob("*.py"))
    assert len(loose) <= 4, loose


@cache
def trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules().items()}


def _assigned(pattern: str) -> list[str]:
    """`module.NAME` for every module-level assignment whose name matches `pattern`."""
    import re

    out = []
    for name, tree in trees().items():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            out += [f"{name}.{t.id}" for t in targets if isinstance(t, ast.Name) and re.search(pattern, t.id)]
    return sorted(out)


def test_the_prompt_limit_is_defined_once_and_read_everywhere():
    from engines.prompt.language import MAX_PROMPT_CHARS

    assert _assigned(r"PROMPT.*(MAX|LIMIT)|(MAX|LIMIT).*PROMPT") == ["engines.prompt.language.MAX_PROMPT_CHARS"]
    written = []   # the limit's value written as a literal: a slice bound or a JSON schema's maxLength
    for name, tree in trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) \
                    and isinstance(node.slice.upper, ast.Constant) and node.slice.upper.value == MAX_PROMPT_CHARS \
                    and any(w in ast.unparse(node.value).lower() for w in ("prompt", "text")):
                written.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "maxLength" and isinstance(v, ast.Constant) \
                            and v.value == MAX_PROMPT_CHARS:
                        written.append(f"{name}:{v.lineno}")
    assert not written, f"the prompt limit written as {MAX_PROMPT_CHARS} instead of MAX_PROMPT_CHARS: {written}"


def test_one_multipart_reader_serves_every_upload():
    """streamer/web/multipart.py reads every multipart body (with the body clock's stall and rate limits);
    nothing else parses one with aiohttp's reader or defines another `read_form`."""
    others = []
    for name, tree in trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "multipart":
                others.append(f"{name}:{node.lineno}")
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any("Multipart" in a.name or a.name == "BodyPartReader"
                                                                      for a in node.names):
                others.append(f"{name}:{node.lineno}")
    assert not others, f"multipart read outside streamer/web/multipart.py: {others}"
    assert [n for n, tree in trees().items() for f in tree.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "read_form"] == ["streamer.web.multipart"]
    assert _assigned(r"^IMAGE_TYPES$") == ["streamer.web.uploads.IMAGE_TYPES"]


def test_the_twin_is_chosen_only_through_kernels_twins():
    """streamer/ and engines/ reach the torch kernels through `kernels.twins.twin_for` alone, so the choice
    between the NumPy and torch code is made in one place (the NumPy side may be named directly: it is
    the host's, and the torch twins import from it)."""
    direct = sorted(f"{src} imports {dst}" for src, dsts in imports().items() if _top(src) in ("streamer", "engines")
                    for dst in dsts if dst == "kernels.torch" or dst.startswith("kernels.torch."))
    assert not direct, direct


def test_pixels_leave_a_device_only_through_the_twin():
    """streamer/ brings a frame's pixels to host memory with its twin's `host` (and back with `put`), never
    with a tensor's own `.cpu()`: where pixels move between devices is then the twin's to say."""
    import ast

    found = []
    for path in sorted((ROOT / "streamer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "cpu":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_no_installed_distribution_claims_our_package_names():
    """Our top-level packages are generic names (`kernels`, `engines`, `bench`); a dependency that installs a
    package of the same name (Hugging Face's `kernels`, which transformers 5.25 requires) would share its folder
    in site-packages and make each import the other's code."""
    import importlib.metadata

    owners = importlib.metadata.packages_distributions()
    for name in ("streamer", "engines", "kernels", "web_client", "bench"):
        others = {d for d in owners.get(name, []) if d.lower() != "livefuse"}
        assert not others, f"{sorted(others)} also install a top-level package {name!r}"
