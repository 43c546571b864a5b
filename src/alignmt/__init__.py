"""alignmt: attention-based RNN encoder-decoders (Bahdanau et al. 2015, Luong et al. 2015)
to train, translate with, evaluate and look inside.

The names below are resolved on first use (PEP 562), so `import alignmt` loads neither
torch nor matplotlib, and `alignmt.open_translator` loads the decoding layer but not
training, and a framework only when a model needs it.
The layers, each importing only those before it (docs/layout.md is the map of their modules):

    config         Typed configs and the float64 reference equations
    text           Corpora, tokenizers, vocabularies, the token cache, synthetic tasks
    checkpoint     The run-folder format and its atomic writes
    model          The network in PyTorch and in Flax
    checkpoint io  Run folders as PyTorch and as Flax models
    decoding       One translator over three engines, and the door to a model
    analysis       BLEU, chrF, alignments and AER, coverage, plots
    training       The loop, its two backends, torchrun/DDP, validation
    experiments    Runs that train and then analyse
    answers        What every host answers: the API's questions, its models, the explorer's page
    notebook       A run folder as one handle, and the explorer as a widget
    serve          The HTTP transport of the answers
    cli            One module per command
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Config": "alignmt.config",
    "ModelConfig": "alignmt.config",
    "load_config": "alignmt.config",
    "Vocab": "alignmt.text.vocab",
    "Header": "alignmt.checkpoint.format",
    "load_header": "alignmt.checkpoint.format",
    "Checkpoint": "alignmt.checkpoint.torch_io",
    "load_checkpoint": "alignmt.checkpoint.torch_io",
    "save_checkpoint": "alignmt.checkpoint.torch_io",
    "Seq2Seq": "alignmt.model.seq2seq",
    "Hypothesis": "alignmt.decoding.results",
    "SearchPlan": "alignmt.decoding.torch_engine.plan",
    "search": "alignmt.decoding.torch_engine.search",
    # search() over one padded batch, short names
    "beam_decode": "alignmt.decoding.torch_engine.search",
    "decode": "alignmt.decoding.torch_engine.search",
    "Translation": "alignmt.decoding.results",
    "Translator": "alignmt.decoding.translator",
    "open_translator": "alignmt.decoding.door",  # any model folder on any engine
    "corpus_scores": "alignmt.analysis.scores",
    "Run": "alignmt.notebook.run",  # a run folder as one handle: train, load, translate, ...
    "load": "alignmt.notebook.run",
    "train": "alignmt.notebook.run",
}

__all__ = [  # the names of _EXPORTS, spelt out so that tools read them
    "Checkpoint",
    "Config",
    "Header",
    "Hypothesis",
    "ModelConfig",
    "Run",
    "SearchPlan",
    "Seq2Seq",
    "Translation",
    "Translator",
    "Vocab",
    "__version__",
    "beam_decode",
    "corpus_scores",
    "decode",
    "load",
    "load_checkpoint",
    "load_config",
    "load_header",
    "open_translator",
    "save_checkpoint",
    "search",
    "train",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; nothing of this runs
    from alignmt.analysis.scores import corpus_scores
    from alignmt.checkpoint.format import Header, load_header
    from alignmt.checkpoint.torch_io import Checkpoint, load_checkpoint, save_checkpoint
    from alignmt.config import Config, ModelConfig, load_config
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.results import Hypothesis, Translation
    from alignmt.decoding.torch_engine.plan import SearchPlan
    from alignmt.decoding.torch_engine.search import beam_decode, decode, search
    from alignmt.decoding.translator import Translator
    from alignmt.model.seq2seq import Seq2Seq
    from alignmt.notebook.run import Run, load, train
    from alignmt.text.vocab import Vocab


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'alignmt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
