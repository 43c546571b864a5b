"""`Run`: a run folder as one handle, made by `train` (a shipped config by name, or a YAML
path, with overrides) or `load` (any run folder, trained by either backend: a Flax run's
folder is PyTorch's format, and PyTorch reads it)."""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from alignmt.analysis.align import alignment_error_rate, word_links
from alignmt.analysis.attribution import Method, translation_relevance
from alignmt.analysis.coverage import coverage_rates
from alignmt.analysis.evaluation import read_test_set, translate_and_score
from alignmt.analysis.plot import attention_heatmap, loss_curves, weights_grid
from alignmt.answers.registry import ServedModel, model_info
from alignmt.checkpoint.format import Header
from alignmt.checkpoint.torch_io import Checkpoint
from alignmt.config import Config, apply_overrides, config_path, load_config, with_fields
from alignmt.decoding.door import open_translator
from alignmt.decoding.translator import Translator
from alignmt.model.attention.registry import compose
from alignmt.notebook.views import Attributed, Report, Translations
from alignmt.text.constraints import parse_phrases
from alignmt.text.corpus import CorpusError, read_lines
from alignmt.text.links import read_alignments, sentence_words
from alignmt.training import run as training

if TYPE_CHECKING:
    from alignmt.notebook.explorer import Explorer

log = logging.getLogger(__name__)


@dataclass
class Run:
    """A run folder: its model, what it translates, how it scores, what its attention and
    training curves look like."""

    run_dir: Path
    trained: training.TrainResult | None = None  # set where this process trained it
    # what it decodes on: "auto" (PyTorch; an exported folder on ONNX Runtime) or "flax"
    engine: str = "auto"

    @cached_property
    def translator(self) -> Translator:
        return open_translator(self.run_dir, engine=self.engine)

    @property
    def header(self) -> Header:
        """The run's config, vocabularies, tokenizers and training step."""
        return self.translator.origin.header

    @property
    def checkpoint(self) -> Checkpoint:
        """The run's PyTorch checkpoint: the one its translator opened, whose model it decodes
        with (so that nothing is loaded twice)."""
        opened = self.header
        if not isinstance(opened, Checkpoint):  # the door keeps a run folder's checkpoint
            raise TypeError(f"{self.run_dir} was not opened on the torch engine")
        return opened

    @property
    def config(self) -> Config:
        return self.header.config

    def translate(
        self,
        sentences: str | Sequence[str],
        *,
        beam: int | None = None,
        nbest: int = 1,
        constraints: Sequence[dict | None] | None = None,
    ) -> Translations:
        """Translate raw sentences with beam `beam` (None: the run's `search.beam_size`; 1:
        greedy), `nbest` hypotheses each. Each `Translation` holds the text, tokens, summed
        log-probability, each token's probability and the attention (hard alignment in
        `.alignment`). `constraints`, one per sentence, are what `alignmt translate
        --constraints` reads: {"include": [phrases], "exclude": [phrases]}, or None."""
        sentences = [sentences] if isinstance(sentences, str) else list(sentences)
        if nbest > 1 and beam is None:
            beam = max(nbest, self.config.search.beam_size)
        wanted = None
        if constraints is not None:
            phrases = [parse_phrases(c) for c in constraints]
            wanted = [self.translator.constraint(p.include, p.exclude) for p in phrases]
        found = self.translator.translate(
            sentences, nbest=nbest, beam_size=beam, constraints=wanted
        )
        return Translations(sentences, found)

    def evaluate(
        self,
        src: str | Path | Sequence[str] | None = None,
        ref: str | Path | Sequence[str] | None = None,
        *,
        gold: str | Path | None = None,
        gold_format: str = "pharaoh",
        beam: int | None = None,
        coverage_penalty: float | None = None,
        batch_size: int = 64,
    ) -> Report:
        """Score the translations of a test set: BLEU and chrF (sacreBLEU), lowercased BLEU
        by source length, over- and under-translation, and with `gold` (a file of the test
        pairs' sure and possible word links) the attention's precision, recall and AER.

        Args:
            src, ref: the test set, as files or lists of sentences; None: the run's
                `data.test`.
            gold_format: how `gold` counts words: "pharaoh" from 0, "talp" from 1.
            beam: the beam for this evaluation; None: the run's `search.beam_size`.
            coverage_penalty: GNMT's β for this evaluation (Wu et al. 2016: a beam's
                finished outputs that left source words unattended rank lower); None: the
                run's `search.coverage_penalty`.
        """
        sources, references = self._test_set(src, ref)
        translator = self.translator
        if beam is not None or coverage_penalty is not None:
            search = self.config.search
            if beam is not None:
                search = replace(search, beam_size=beam)
            if coverage_penalty is not None:
                search = replace(search, coverage_penalty=coverage_penalty)
            translator = open_translator(self.run_dir, search=search)
        name = self.run_dir.name
        lang = self.config.data.src_lang
        evaluation, best = translate_and_score(
            name, translator, sources, references, lang, batch_size
        )
        alignment = None
        if gold is not None:
            words = [sentence_words(translator.src_tokenizer, line) for line in sources]
            refs = [sentence_words(translator.tgt_tokenizer, line) for line in references]
            lengths = [(len(s.words), len(r.words)) for s, r in zip(words, refs, strict=True)]
            sures, possibles = read_alignments(gold, lengths=lengths, gold_format=gold_format)
            hyps = word_links(translator, words, refs, batch_size=batch_size)
            alignment = alignment_error_rate(hyps, sures, possibles)
        return Report(evaluation, coverage_rates(best), alignment)

    def heatmap(self, sentence: str, *, beam: int | None = None) -> Figure:
        """The attention of `sentence`'s translation: output tokens down, source tokens
        across (Bahdanau et al. 2015, Fig. 3); beside it, the weights a mechanism shows with
        it: each head of a multi-head model, a copying model's share of copying."""
        composition = compose(self.config.model)
        if composition is not None and composition.weights:  # stepping through records them
            beam = beam or self.config.search.beam_size
            stepped = self.translator.step_through(sentence, beam_size=beam)
            out = stepped.translation
            shown = composition.weights[0]
            weights = stepped.weights(shown.slot)
            return weights_grid(out.attention, weights, out.src_tokens, out.tokens, shown.label)
        (best,) = self.translate(sentence, beam=beam)
        if best.attention is None:
            raise ValueError(f"{self.run_dir}: a model without attention has no heatmap")
        return attention_heatmap(best.attention, best.src_tokens, best.tokens)

    def attribution(
        self, sentence: str, method: Method = "integrated", *, beam: int | None = None
    ) -> Attributed:
        """How much each source token moved each output token of `sentence`'s translation,
        beside its attention: `method` is shift, gradient, integrated or erasure (see
        `alignmt.analysis.attribution`), the output teacher-forced. The result holds both
        as (T_out, T_src) arrays and draws them side by side (`.heatmap()`)."""
        (best,) = self.translate(sentence, beam=beam)
        translator = self.translator
        src = translator.src_vocab.encode(best.src_tokens[:-1])  # </s> is added back
        output = translator.tgt_vocab.encode(best.tokens)
        scores = translation_relevance(translator, src, output, method)
        return Attributed(best.src_tokens, best.tokens, best.attention, scores, method)

    def curves(self) -> Figure:
        """Training loss and, where the run validated, validation loss, against step."""
        records = [
            json.loads(line)
            for line in (self.run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()
        ]
        train = [(r["step"], r["loss"]) for r in records if r.get("loss") is not None]
        valid = [(r["step"], r["valid_loss"]) for r in records if "valid_loss" in r]
        curves = {"train": tuple(zip(*train, strict=True))}
        if valid:
            curves["valid"] = tuple(zip(*valid, strict=True))
        return loss_curves(curves, title=self.run_dir.name)

    def explore(
        self,
        sentences: str | Sequence[str],
        *,
        beside: Run | str | Path | None = None,
        beam: int | None = None,
    ) -> Explorer:
        """The explorer, inline: step through the decoder, force tokens, move attention,
        open the beam tree and follow attention over training (a widget, answered by this
        kernel; see `alignmt.notebook.explorer.Explorer` for what it keeps in sync).

        Args:
            sentences: the first is shown; all are offered, and stored in the form shown
                where no kernel runs (nbviewer, a docs page, HTML).
            beside: a second run (or its folder) shown side by side, e.g. the vanilla
                encoder-decoder beside the attention model.
            beam: the beam the stored form holds (None: this run's `search.beam_size`).
        """
        try:  # anywidget, and IPython under it, come with the notebook extra
            from alignmt.notebook.explorer import Explorer
        except ImportError as error:
            raise ImportError(
                f"run.explore needs the notebook extra: pip install 'alignmt[notebook]' ({error})"
            ) from None
        sentences = [sentences] if isinstance(sentences, str) else list(sentences)
        mine = self.served()
        models, second = {mine.name: mine}, ""
        if beside is not None:
            other = beside if isinstance(beside, Run) else load(beside)
            second = other.run_dir.name
            if second == mine.name:  # two folders of one name: told apart by their parents
                second = f"{other.run_dir.parent.name}/{second}"
            models[second] = other.served(second)
        if not _in_a_kernel():
            log.warning(
                "run.explore shows its widget only in a notebook (Jupyter, VS Code, Colab); "
                "here, `alignmt explore %s --input FILE --out page.html` writes the explorer "
                "as one page, or `alignmt serve %s` serves it",
                self.run_dir,
                self.run_dir,
            )
        return Explorer(models, sentences, beside=second, beam_size=beam)

    def served(self, name: str | None = None) -> ServedModel:
        """This run as the server holds a model, named `name` (None: its folder's name)."""
        name = name or self.run_dir.name
        return ServedModel(name, self.translator, model_info(name, self.translator))

    def _test_set(self, src: Any, ref: Any) -> tuple[list[str], list[str]]:
        if (src is None) != (ref is None):
            raise ValueError("src and ref go together")
        if src is None:
            return read_test_set(self.config.data, str(self.run_dir), "src and ref")
        sources, references = _lines(src), _lines(ref)
        if len(sources) != len(references):
            raise CorpusError(f"src has {len(sources)} sentences but ref has {len(references)}")
        return sources, references

    def _repr_html_(self) -> str:
        header = self.header
        m = self.config.model
        return (
            f"<p><b>{html.escape(str(self.run_dir))}</b>: step {header.step:,}, "
            f"{m.rnn.upper()} {'bi' if m.bidirectional else 'uni'}directional encoder, "
            f"attention {m.attention} ({m.order}), "
            f"{self.translator.engine.parameters:,} parameters, "
            f"vocabularies {len(header.src_vocab):,} / {len(header.tgt_vocab):,}</p>"
        )


def _lines(given: str | Path | Sequence[str]) -> list[str]:
    if isinstance(given, str | Path):
        return read_lines(given)
    return list(given)


def train(
    config: str | Path | Config = "reverse",
    *,
    overrides: Sequence[str] = (),
    progress: bool | None = True,
    resume: bool = False,
    overwrite: bool = False,
    show: bool = True,
    **fields: Any,
) -> Run:
    """Train a model and return its `Run`.

    Args:
        config: a shipped config by name ("reverse", "multi30k_en_de", ...), a YAML file,
            or a `Config`.
        overrides: `key.path=value` strings, as on the command line.
        progress: a progress bar (in a notebook, tqdm's widget); None: where stderr is a
            terminal.
        resume, overwrite: as `alignmt train --resume / --overwrite`.
        show: where IPython runs, display the loss curve when training ends.
        **fields: config fields by their last name: `steps=2000` is `train.steps`,
            `out_dir="runs/r"` the run folder.
    """
    cfg = config if isinstance(config, Config) else load_config(config_path(config))
    cfg = apply_overrides(with_fields(cfg, fields), overrides)
    result = training.train(cfg, progress=progress, resume=resume, overwrite=overwrite)
    run = Run(result.run_dir, trained=result)
    _inline_figures()
    if show:
        _display(run.curves())
    return run


def load(run_dir: str | Path, engine: str = "auto") -> Run:
    """A trained run folder (`model.safetensors`, or `last.safetensors` mid-training), or
    an exported folder, decoded on `engine` ("auto": PyTorch, or ONNX Runtime for an
    exported folder; "flax": JAX/Flax), whose translations, attention, explorer and
    attribution it gives alike."""
    run = Run(Path(run_dir), engine=engine)
    run.translator  # noqa: B018 (loaded now, so that a bad folder is said here)
    _inline_figures()
    return run


def _display(figure: Figure) -> None:
    """Show `figure` in the IPython kernel this runs in, if any (a figure built without
    pyplot is not shown by itself)."""
    shell = _inline_figures()
    if shell is not None:
        from IPython.display import display

        display(figure)


def _in_a_kernel() -> bool:
    """Whether this runs in a Jupyter kernel, which can show a widget (a terminal IPython
    cannot)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _inline_figures() -> Any:
    """The IPython shell this runs in (None outside one), taught to draw a `Figure` that a
    cell returns as a PNG. Our figures are made without pyplot, so that no GUI backend is
    ever touched, and IPython only learns to draw figures when pyplot loads its backend."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import print_figure
    except ImportError:
        return None
    shell = get_ipython()
    if shell is not None:
        png = shell.display_formatter.formatters["image/png"]
        png.for_type(Figure, lambda figure: print_figure(figure, "png", bbox_inches="tight"))
    return shell
