"""The package's layers, held by what each import really loads (`sys.modules`), in fresh
interpreters: a module imports only its own layer and those below it; the framework-neutral
layers load no torch; the server loads no training code and no matplotlib; and parsing any
command line, `--help` included, loads neither torch nor matplotlib.

Each check runs against a copy of the source tree too, with one eager import added where it
breaks a layer, to show that the check sees it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A module may load modules of its own layer and of the layers before it.
LAYERS = [
    ["alignmt.config", "alignmt.config_rules", "alignmt.reference"],
    ["alignmt.text"],
    ["alignmt.checkpoint"],  # the format and atomic writes; its torch_io comes later
    ["alignmt.model"],
    ["alignmt.checkpoint.torch_io", "alignmt.checkpoint.flax_io"],
    ["alignmt.decoding"],
    ["alignmt.analysis"],
    ["alignmt.training"],
    ["alignmt.experiments"],
    ["alignmt.serve"],
    ["alignmt.notebook"],
    ["alignmt.cli"],
]
# Framework-neutral: configs, text, the checkpoint format and scoring never need torch.
NO_TORCH = [
    "alignmt",
    "alignmt.config",
    "alignmt.config_rules",
    "alignmt.reference",
    "alignmt.text.build",
    "alignmt.text.cache",
    "alignmt.text.corpus",
    "alignmt.text.escape",
    "alignmt.text.guide",
    "alignmt.text.links",
    "alignmt.text.parts",
    "alignmt.text.prepare",
    "alignmt.text.shortlist",
    "alignmt.text.split",
    "alignmt.text.tasks",
    "alignmt.text.tokenize",
    "alignmt.text.vocab",
    "alignmt.checkpoint.format",
    "alignmt.checkpoint.rundir",
    "alignmt.checkpoint.average",
    "alignmt.checkpoint.shortlist_io",
    "alignmt.model.flax_seq2seq",  # the Flax model and its run folders: JAX without torch
    "alignmt.checkpoint.flax_io",
    "alignmt.decoding.words",  # both translators' word-level output
    "alignmt.decoding.rules",  # the search rules every framework and runtime reads
    "alignmt.decoding.onnx_format",  # what an exported folder holds
    "alignmt.decoding.onnx_runtime",  # exported models on ONNX Runtime and NumPy
    "alignmt.analysis.coverage",
    "alignmt.analysis.scores",
    "alignmt.analysis.tables",
    "alignmt.serve.limits",
    "alignmt.cli",
]
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

# Imports the layers bottom-up in one interpreter: a module that loads a layer above its own
# is caught the first time that layer is loaded, since nothing before it could have.
_CHECK_LAYERS = """
import importlib, json, pathlib, sys
layers = json.loads(sys.argv[1])
def layer(name):
    found = [i for i, prefixes in enumerate(layers) for p in prefixes
             if name == p or name.startswith(p + ".")]
    return max(found, default=-1)
import alignmt
root = pathlib.Path(alignmt.__path__[0])  # listed, not walked: walking imports packages
files = [p.relative_to(root).with_suffix("").parts for p in root.rglob("*.py")]
names = {".".join(("alignmt", *parts)).removesuffix(".__init__") for parts in files}
names = sorted(names - {"alignmt", "alignmt.__main__"},  # __main__ runs the CLI
               key=lambda n: (layer(n), n))
bad = []
for name in names:
    before = set(sys.modules)
    importlib.import_module(name)
    for loaded in sorted(set(sys.modules) - before):
        if loaded.startswith("alignmt.") and layer(loaded) > layer(name):
            bad.append(f"{name} loads {loaded}")
print(json.dumps({"modules": names, "bad": bad}))
"""

_LOADED_BY = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""

_LOADED_BY_HELP = """
import json, sys
from alignmt.cli import main
for command in json.loads(sys.argv[1]):
    try:
        main([command, "--help"])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


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


def _layer_violations(src: Path = SRC) -> list[str]:
    found = _run(_CHECK_LAYERS, LAYERS, src)
    prefixes = [prefix for layer in LAYERS for prefix in layer]
    unplaced = [n for n in found["modules"] if not any(n.startswith(p) for p in prefixes)]
    assert not unplaced, f"modules in no layer: {unplaced}"
    return found["bad"]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m in ("torch", "matplotlib") or m.startswith("alignmt.training")]


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory) -> Path:
    """A copy of the package whose config eagerly imports the training loop: a layer broken
    the way an innocent-looking import would break it."""
    root = tmp_path_factory.mktemp("broken") / "src"
    shutil.copytree(SRC / "alignmt", root / "alignmt", ignore=shutil.ignore_patterns("__pycache__"))
    config = root / "alignmt" / "config.py"
    config.write_text(config.read_text() + "\nimport alignmt.training.loop  # noqa\n")
    return root


def test_every_module_imports_only_its_layer_and_those_below():
    assert _layer_violations() == []


@pytest.mark.slow  # checks the checker, in a subprocess
def test_an_upward_import_is_caught(broken_tree):
    bad = _layer_violations(broken_tree)
    assert "alignmt.config loads alignmt.training.loop" in bad


def test_the_framework_neutral_layers_load_no_torch():
    loaded = _run(_LOADED_BY, NO_TORCH)
    assert "torch" not in loaded and "matplotlib" not in loaded


@pytest.mark.slow  # checks the checker, in a subprocess
def test_the_torch_free_check_sees_torch(broken_tree):
    assert "torch" in _run(_LOADED_BY, ["alignmt.config"], broken_tree)


_SERVING = """
import json, sys
from alignmt.serve.app import create_app
from alignmt.serve.limits import Limits
from alignmt.serve.registry import load_models
create_app(load_models(json.loads(sys.argv[1])), Limits())
print(json.dumps(sorted(sys.modules)))
"""


def test_the_server_loads_no_training_code_and_no_matplotlib(toy_run, tmp_path):
    """The server's modules import no framework; a run folder served loads PyTorch's
    translator but never training or matplotlib, and an exported one loads no torch or jax."""
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.export import export_onnx

    assert _heavy(_run(_LOADED_BY, ["alignmt.serve.app", "alignmt.serve.registry"])) == []
    loaded = _run(_SERVING, [str(toy_run)])
    assert _heavy(loaded) == ["torch"]
    assert "alignmt.decoding.translator" in loaded  # it did load what serving needs
    export_onnx(load_checkpoint(toy_run), tmp_path / "onnx")
    loaded = _run(_SERVING, [str(tmp_path / "onnx")])
    assert _heavy(loaded) == [] and "jax" not in loaded
    assert "alignmt.decoding.onnx_runtime" in loaded


def test_the_onnx_runtime_loads_neither_torch_nor_jax():
    loaded = _run(_LOADED_BY, ["alignmt.decoding.onnx_runtime", "alignmt.decoding.onnx_int8"])
    assert _heavy(loaded) == [] and "jax" not in loaded
    assert "onnxruntime" in loaded  # it did load what it runs on


def test_the_public_api_is_lazy():
    assert _heavy(_run(_LOADED_BY, ["alignmt"])) == []
    script = "import alignmt, json, sys; alignmt.Translator; print(json.dumps(sorted(sys.modules)))"
    loaded = _run(script, None)
    assert "torch" in loaded and _heavy(loaded) == ["torch"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_loads_neither_torch_nor_matplotlib(command):
    assert _heavy(_run(_LOADED_BY_HELP, [command])) == []


@pytest.mark.slow  # checks the checker, in a subprocess
def test_the_help_check_sees_an_eager_import(broken_tree):
    assert "torch" in _heavy(_run(_LOADED_BY_HELP, ["translate"], broken_tree))


def test_every_public_name_resolves():
    import alignmt

    for name in alignmt.__all__:
        assert getattr(alignmt, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = alignmt.Nope
