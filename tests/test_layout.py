"""The house and its map: docs/layout.md names every module with its layer and the frameworks
it needs, and the code is held to it by what each import really loads (`sys.modules`), in
fresh interpreters: a module loads no layer after its own and no framework its row does not
name; the server loads no training code and no matplotlib; parsing any command line,
`--help` included, loads neither torch nor matplotlib; and every module path a docstring
names exists.

Each check of imports runs against a copy of the source tree too, with one eager import
added where it breaks the map, to show that the check sees it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAP = ROOT / "docs" / "layout.md"
FRAMEWORKS = ("torch", "jax", "onnxruntime")
COMMANDS = [
    "demo",
    "train",
    "translate",
    "evaluate",
    "compare",
    "average",
    "shortlist",
    "export",
    "serve",
    "explore",
]


def read_map(path: Path = MAP) -> tuple[list[str], dict[str, tuple[str, frozenset[str]]]]:
    """The layers, first to last, and each module's (layer, frameworks it may load), as the
    map's headings ("## 6. decoding") and the table under each give them; modules by dotted
    name."""
    layers: list[str] = []
    modules = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"## \d+\. ([a-z ]+)", line)
        row = re.match(r"\| `([\w/]+\.py)` \| ([^|]+) \|", line)
        if heading:
            layers.append(heading[1])
        elif line.startswith("## ") and layers:
            break  # the layers end where a heading of another kind begins
        elif row and layers:
            name = ".".join(("alignmt", *Path(row[1]).with_suffix("").parts))
            needs = row[2].strip()
            given = frozenset() if needs == "—" else frozenset(needs.replace(" ", "").split(","))
            modules[name.removesuffix(".__init__")] = (layers[-1], given)
    return layers, modules


def package_modules(src: Path = SRC) -> set[str]:
    """Every module of the package but the packages' own __init__ files (their folders)."""
    root = src / "alignmt"
    names = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 2:
            continue
        names.add(".".join(parts).removesuffix(".__init__"))
    return names


def _run(script: str, argument: object, src: Path = SRC) -> object:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(argument)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# Imports the modules layer by layer in one interpreter: a module that loads a layer after
# its own is caught the first time that layer is loaded, since nothing before it could have.
_CHECK_LAYERS = """
import importlib, json, sys
given = json.loads(sys.argv[1])
order, modules, only = given["layers"], given["modules"], given["only"]
def layer(name):
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return order.index(modules[name]) if name in modules else -1
bad = []
for name in sorted(only, key=lambda n: (layer(n), n)):
    before = set(sys.modules)
    importlib.import_module(name)
    for loaded in sorted(set(sys.modules) - before):
        if loaded.startswith("alignmt.") and layer(loaded) > layer(name):
            bad.append(f"{name} loads {loaded}")
print(json.dumps(bad))
"""

_LOADED_BY = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""

_STAGES = """
import importlib, json, sys
loaded = []
for allowed, names in json.loads(sys.argv[1]):
    for name in names:
        importlib.import_module(name)
    loaded.append(sorted(sys.modules))
print(json.dumps(loaded))
"""

# Each command's --help in turn, in one interpreter: what each loads that none before it did,
# and what importing the command line loads for all of them, under "alignmt.cli".
_LOADED_BY_HELP = """
import json, sys
before = set(sys.modules)
from alignmt.cli import main
new = {"alignmt.cli": sorted(set(sys.modules) - before)}
for command in json.loads(sys.argv[1]):
    before = set(sys.modules)
    try:
        main([command, "--help"])
    except SystemExit:
        pass
    new[command] = sorted(set(sys.modules) - before)
print(json.dumps(new))
"""


def _layer_violations(src: Path = SRC, only: set[str] | None = None) -> list[str]:
    """Each module (or those of `only`) imported in layer order in one interpreter: what it
    loads of a later layer."""
    layers, modules = read_map()
    rows = {n: layer for n, (layer, _) in _importable(modules)}
    given = {"layers": layers, "modules": rows, "only": sorted(only or rows)}
    return _run(_CHECK_LAYERS, given, src)


def _importable(modules: dict) -> list:
    """The map's rows but __main__'s, which runs the command line when imported."""
    return [(name, row) for name, row in modules.items() if name != "alignmt.__main__"]


def _framework_violations(src: Path = SRC, only: frozenset[str] | None = None) -> list[str]:
    """The modules whose rows name the same frameworks, imported together, in chains of fresh
    interpreters where each set of rows allows at least what the one before it does: after
    each set, any framework loaded that it does not name is a violation. (A module loads
    alone what it loads there; what later sets load cannot change what was checked.)
    `only` checks one set of rows."""
    _, modules = read_map()
    sets = sorted({needs for _, needs in modules.values()}, key=lambda n: (len(n), sorted(n)))
    if only is not None:
        sets = [only]
    chains: list[list[frozenset[str]]] = []
    for allowed in sets:
        chain = next((c for c in chains if c[-1] <= allowed), None)
        if chain is None:
            chains.append([allowed])
        else:
            chain.append(allowed)
    bad = []
    for chain in chains:
        stages = [
            [
                sorted(allowed),
                sorted(n for n, (_, needs) in _importable(modules) if needs == allowed),
            ]
            for allowed in chain
        ]
        for allowed, loaded in zip(chain, _run(_STAGES, stages, src), strict=True):
            extra = sorted(f for f in FRAMEWORKS if f in loaded and f not in allowed)
            if extra:
                bad.append(f"modules allowed {sorted(allowed) or 'none'} load {extra}")
    return bad


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m in ("torch", "matplotlib") or m.startswith("alignmt.training")]


def _broken(tmp_path_factory, module: str) -> Path:
    """A copy of the package whose config eagerly imports `module`: a layer broken the way an
    innocent-looking import would break it."""
    root = tmp_path_factory.mktemp("broken") / "src"
    shutil.copytree(SRC / "alignmt", root / "alignmt", ignore=shutil.ignore_patterns("__pycache__"))
    config = root / "alignmt" / "config.py"
    config.write_text(config.read_text() + f"\nimport {module}  # noqa\n")
    return root


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory) -> Path:
    """The config loads the training loop, and with it torch."""
    return _broken(tmp_path_factory, "alignmt.training.loop")


@pytest.fixture
def upward_tree(tmp_path_factory) -> Path:
    """The config loads a framework-free module of a later layer (a quicker check to run)."""
    return _broken(tmp_path_factory, "alignmt.answers.limits")


# --- the map -----------------------------------------------------------------------------------


def test_the_map_names_every_module_and_only_modules_that_exist():
    layers, modules = read_map()
    assert len(layers) == len(set(layers)) >= 10
    assert sorted(package_modules() - set(modules)) == [], "modules missing from docs/layout.md"
    assert sorted(set(modules) - package_modules()) == [], "docs/layout.md names no such module"
    assert all(layer in layers for layer, _ in modules.values())
    assert all(needs <= set(FRAMEWORKS) for _, needs in modules.values())


def test_a_module_added_without_its_row_is_caught(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC / "alignmt", src / "alignmt", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "alignmt" / "decoding" / "stray.py").write_text('"""Not on the map."""\n')
    assert "alignmt.decoding.stray" in package_modules(src) - set(read_map()[1])


def test_every_module_path_a_docstring_names_exists():
    """`alignmt.x.y` names (a module, or a name a module defines) and `folder/file.py` or
    `file.py` names (of the package, the tests or the benchmarks) in docstrings."""
    package = SRC / "alignmt"
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    files |= {
        p.relative_to(ROOT).as_posix()
        for d in ("tests", "benchmarks")
        for p in (ROOT / d).glob("*.py")
    }
    missing = []
    for path in sorted(package.rglob("*.py")):
        for text in _docstrings(path):
            named = re.findall(r"\balignmt(?:\.[a-z_]+)+", text)
            missing += [f"{path.name}: {n}" for n in named if not _resolves(n)]
            for file in re.findall(r"(?<![\w./-])([a-z_]+(?:/[a-z_]+)*\.py)\b", text):
                if not any(f == file or f.endswith("/" + file) for f in files):
                    missing.append(f"{path.relative_to(SRC)}: {file}")
    assert missing == []


def _resolves(dotted: str) -> bool:
    """Whether `dotted` is a module of the package, or a name its longest module prefix
    defines at its top level (a def, a class, an assignment, an import or a lazy export)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = SRC.joinpath(*parts[:cut])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and rest[0] in _top_level_names(source))
    return False


def _top_level_names(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if isinstance(node.value, ast.Dict):  # the lazy exports of alignmt/__init__.py
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [
        d for node in ast.walk(tree) if isinstance(node, kinds) if (d := ast.get_docstring(node))
    ]


# --- what each import loads ------------------------------------------------------------------


def test_every_module_imports_only_its_layer_and_those_before():
    assert _layer_violations() == []


@pytest.mark.slow  # checks the checker, in a subprocess
def test_an_upward_import_is_caught(upward_tree):
    found = _layer_violations(upward_tree, only={"alignmt.config"})
    assert found == ["alignmt.config loads alignmt.answers.limits"]


def test_no_module_loads_a_framework_its_row_does_not_name():
    assert _framework_violations() == []


@pytest.mark.slow  # checks the checker, in a subprocess
def test_the_framework_check_sees_torch(broken_tree):
    found = _framework_violations(broken_tree, only=frozenset())
    assert found == ["modules allowed none load ['torch']"]


_SERVING = """
import json, sys
from alignmt.serve.app import create_app
from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
create_app(load_models(json.loads(sys.argv[1])), Limits())
print(json.dumps(sorted(sys.modules)))
"""


def test_the_server_loads_no_training_code_and_no_matplotlib(toy_run, toy_exported):
    """The server's modules import no framework; a run folder served loads the torch engine
    but never training or matplotlib, and an exported one loads no torch or jax."""
    assert _heavy(_run(_LOADED_BY, ["alignmt.serve.app", "alignmt.answers.registry"])) == []
    loaded = _run(_SERVING, [str(toy_run)])
    assert _heavy(loaded) == ["torch"]
    assert "alignmt.decoding.torch_engine.engine" in loaded  # it did load what serving needs
    loaded = _run(_SERVING, [str(toy_exported)])
    assert _heavy(loaded) == [] and "jax" not in loaded
    assert "alignmt.decoding.onnx_engine.engine" in loaded


def test_the_public_api_is_lazy():
    assert _heavy(_run(_LOADED_BY, ["alignmt"])) == []
    script = (
        "import alignmt, json, sys; alignmt.open_translator; alignmt.Translator; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = _run(script, None)
    assert not any(f in loaded for f in FRAMEWORKS)  # the door loads a framework when it opens
    assert "alignmt.decoding.door" in loaded


def test_help_loads_neither_torch_nor_matplotlib():
    loaded = _run(_LOADED_BY_HELP, COMMANDS)
    heavy = {key: _heavy(new) for key, new in loaded.items()}
    assert {key: found for key, found in heavy.items() if found} == {}


@pytest.mark.slow  # checks the checker, in a subprocess
def test_the_help_check_sees_an_eager_import(broken_tree):
    loaded = _run(_LOADED_BY_HELP, ["translate"], broken_tree)
    assert "torch" in _heavy(loaded["alignmt.cli"] + loaded["translate"])


def test_every_public_name_resolves():
    import alignmt

    for name in alignmt.__all__:
        assert getattr(alignmt, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = alignmt.Nope


# --- the lists, the tests and the sizes --------------------------------------------------------

LONGEST_MODULE = 450  # lines: a module read in one sitting
LONGEST_FUNCTION = 60  # lines: a function read on one screen


def _package_lists():
    """docs/package_lists.py, which writes each package's list of its modules."""
    spec = importlib.util.spec_from_file_location("package_lists", ROOT / "docs/package_lists.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_package_lists_its_modules_as_the_map_says():
    """A package's docstring lists its modules with their rows' words, its subpackages with
    their first sentences, and alignmt's lists the layers: as docs/package_lists.py writes."""
    written = _package_lists().written()
    assert len(written) == len(list((SRC / "alignmt").rglob("__init__.py")))
    stale = [str(p.relative_to(ROOT)) for p, text in written.items() if p.read_text() != text]
    assert stale == [], "run: python docs/package_lists.py"
    for path, text in written.items():  # and no list of another hand beside it
        entries = re.findall(r"^ *([\w.]+(?:\.py|/))  ", text, re.MULTILINE)
        assert len(entries) == len(set(entries)), path


def test_a_row_changed_is_a_package_list_changed(tmp_path):
    row = "| `decoding/rules.py` | — | "
    changed = tmp_path / "layout.md"
    changed.write_text(MAP.read_text().replace(row, row + "the rules, changed; "))
    path = SRC / "alignmt" / "decoding" / "__init__.py"
    text = _package_lists().written(changed)[path]
    assert text != path.read_text() and re.search(r"rules\.py +the rules, changed;", text)


def test_a_package_file_holds_its_docstring_and_nothing_else():
    """Importing a package loads only itself: `alignmt` (whose names load when first used)
    and `alignmt.cli` (the command line's entry point) are the two that hold code."""
    holding = []
    for path in sorted((SRC / "alignmt").rglob("__init__.py")):
        body = ast.parse(path.read_text()).body
        if len(body) != 1 or ast.get_docstring(ast.Module(body, [])) is None:
            holding.append(str(path.parent.relative_to(SRC)).replace("/", "."))
    assert holding == ["alignmt", "alignmt.cli"]


def test_every_test_file_is_named_for_a_module_or_in_the_table():
    """`test_<module or package>.py`, or a row of the map's table of the tests, which names
    only files that exist."""
    package = SRC / "alignmt"
    named = {p.stem for p in package.rglob("*.py")} | {p.name for p in package.rglob("*/")}
    table = set(re.findall(r"^\| `(test_\w+\.py)` \|", MAP.read_text(), re.MULTILINE))
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert sorted(t for t in tests - table if t[5:-3] not in named) == []
    assert sorted(table - tests) == []


def test_modules_and_functions_are_short_enough_to_read():
    too_long = []
    for path in sorted(_python_files()):
        text = path.read_text()
        if text.count("\n") > LONGEST_MODULE:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    too_long.append(f"{path.relative_to(ROOT)}: {node.name}, {lines} lines")
    assert too_long == []


def _python_files() -> list[Path]:
    """The package's, the tests' and the benchmarks' Python files."""
    return [p for d in (SRC, ROOT / "tests", ROOT / "benchmarks") for p in d.rglob("*.py")]
