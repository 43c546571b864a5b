"""The d2l.ai book's check of its "Bahdanau attention" model: four sentences, greedy.

Zhang et al., "Dive into Deep Learning", §11.4, ends by translating four English sentences
with the trained model and printing each with its sentence BLEU (k = 2), as
`go . => ['va', '!'], bleu,1.000`. `book_translations` does the same for a run folder that
`configs/d2l_fra_eng.yaml` trained; `benchmarks/d2l_fra_eng.py` trains one and prints them.
Returns values and prints nothing, as the rest of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alignmt.analysis.scores import sentence_bleu_d2l
from alignmt.decoding.door import open_translator
from alignmt.text.vocab import EOS

# The book's sentences and references, as its preprocessing leaves them.
ENGS = ("go .", "i lost .", "he's calm .", "i'm home .")
FRAS = ("va !", "j'ai perdu .", "il est calme .", "je suis chez moi .")

# Raw source sentences in, one list of output tokens each out (</s> and what follows cut).
Translate = Callable[[Sequence[str]], list[list[str]]]


@dataclass
class BookTranslation:
    src: str
    tokens: list[str]  # the output up to </s>, as the book keeps it
    ref: str
    bleu: float  # the book's sentence BLEU with k = 2

    @property
    def line(self) -> str:
        """The book's print: `go . => ['va', '!'], bleu,1.000`."""
        return f"{self.src} => {self.tokens}, bleu,{self.bleu:.3f}"


def greedy_translate(run_dir: str | Path, *, device: str = "cpu") -> Translate:
    """The PyTorch model of `run_dir`, translating greedily within its config's length limit
    (`configs/d2l_fra_eng.yaml`: 9 tokens, the book's num_steps)."""
    translator = open_translator(run_dir, device=device, beam_size=1)

    def translate(lines: Sequence[str]) -> list[list[str]]:
        outputs = translator.translate(list(lines), warn=False)
        return [_until_eos(nbest[0].tokens) for nbest in outputs]

    return translate


def book_translations(
    run_dir: str | Path | None = None,
    *,
    translate: Translate | None = None,
    engs: Sequence[str] = ENGS,
    fras: Sequence[str] = FRAS,
) -> list[BookTranslation]:
    """The book's sentences translated by a trained model and scored as the book scores them.

    Args:
        run_dir: the run folder; its model decodes greedily on the CPU (`greedy_translate`).
        translate: decodes instead of `run_dir`'s PyTorch model (a Flax translator, say).
        engs, fras: the sentences and their references; the book's by default.

    Returns:
        One result per sentence, in order; `.line` prints it as the book does.
    """
    if translate is None:
        if run_dir is None:
            raise ValueError("run_dir: needed when no translate function is given")
        translate = greedy_translate(run_dir)
    outputs = translate(engs)
    return [
        BookTranslation(src, tokens, ref, sentence_bleu_d2l(" ".join(tokens), ref, k=2))
        for src, tokens, ref in zip(engs, outputs, fras, strict=True)
    ]


def _until_eos(tokens: Sequence[str]) -> list[str]:
    return list(tokens[: tokens.index(EOS)] if EOS in tokens else tokens)
