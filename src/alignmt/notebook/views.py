"""What a notebook shows for results people read as tables: translations and scores, as
HTML (`_repr_html_`, which Jupyter, VS Code, Colab and marimo render) and as plain text."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from alignmt.analysis.align import AlignmentScore
from alignmt.analysis.coverage import COVERED, CoverageRates
from alignmt.analysis.plot import attention_grid
from alignmt.analysis.scores import Evaluation
from alignmt.analysis.tables import format_bucket_table, format_scores_table
from alignmt.decoding.results import Translation


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table; cells are HTML already (callers escape text)."""
    head = "".join(f"<th>{cell}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _shaded_tokens(translation: Translation) -> str:
    """Output tokens, each shaded by its probability (paler: less sure) and titled with it."""
    spans = [
        f'<span title="p = {p:.3f}" style="opacity:{0.35 + 0.65 * p:.2f}">{html.escape(t)}</span>'
        for t, p in zip(translation.tokens, translation.probabilities, strict=True)
    ]
    return " ".join(spans)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


class Translations(list):
    """The best translation of each sentence (a list of `Translation`), with every hypothesis
    of each in `nbest`; shown as a table of source, output (tokens shaded by probability),
    log-probability and hard alignment."""

    def __init__(self, sources: Sequence[str], nbest: list[list[Translation]]) -> None:
        super().__init__(hyps[0] for hyps in nbest)
        self.sources = list(sources)
        self.nbest = nbest

    @property
    def texts(self) -> list[str]:
        return [t.text for t in self]

    def __str__(self) -> str:
        """The table as text, for a terminal or a script: each hypothesis's tokens with their
        probabilities, its log-probability and its alignment."""
        lines = []
        for i, (source, hyps) in enumerate(zip(self.sources, self.nbest, strict=True)):
            lines.append(f"{i + 1}. {source}")
            for hyp in hyps:
                tokens = " ".join(
                    f"{t} ({p:.2f})" for t, p in zip(hyp.tokens, hyp.probabilities, strict=True)
                )
                lines.append(f"   log p {hyp.score:8.3f}  {tokens}")
                if hyp.alignment is not None:
                    lines.append(f"   {'alignment':>14}  {hyp.alignment}")
        return "\n".join(lines)

    __repr__ = __str__  # a Python prompt shows the table, not the arrays inside

    def _repr_html_(self) -> str:
        rows = [
            [
                str(i + 1) if rank == 0 else "",
                html.escape(source) if rank == 0 else "",
                _shaded_tokens(hyp),
                f"{hyp.score:.3f}",
                html.escape(hyp.alignment or "—"),
            ]
            for i, (source, hyps) in enumerate(zip(self.sources, self.nbest, strict=True))
            for rank, hyp in enumerate(hyps)
        ]
        return _table(["", "source", "translation", "log p", "alignment (Pharaoh)"], rows)


@dataclass
class Report:
    """A test set's scores: BLEU and chrF (lowercased and cased), lowercased BLEU by source
    length, over- and under-translation, and where gold links were given, AER."""

    evaluation: Evaluation
    coverage: CoverageRates
    alignment: AlignmentScore | None = None

    @property
    def bleu(self) -> float:
        """Lowercased corpus BLEU, the figure the tables lead with."""
        return self.evaluation.lowercased.bleu

    def __str__(self) -> str:
        e = self.evaluation
        parts = [
            format_scores_table({e.name: (e.lowercased, e.cased)}),
            format_bucket_table({e.name: e.buckets}),
            f"over-translated {_share(self.coverage.over)}, "
            f"under-translated {_share(self.coverage.under)}",
        ]
        if self.alignment:
            a = self.alignment
            parts.append(f"precision {a.precision:.1%}, recall {a.recall:.1%}, AER {a.aer:.1%}")
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        e = self.evaluation
        scores = [
            ["lowercased", f"{e.lowercased.bleu:.2f}", f"{e.lowercased.chrf:.2f}"],
            ["cased", f"{e.cased.bleu:.2f}", f"{e.cased.chrf:.2f}"],
        ]
        buckets = [
            [html.escape(b.name), f"{b.sentences:,}", "—" if b.bleu is None else f"{b.bleu:.2f}"]
            for b in e.buckets
        ]
        rates = [[_share(self.coverage.over), _share(self.coverage.under)]]
        parts = [
            f"<p><b>{html.escape(e.name)}</b>: {e.lowercased.sentences:,} sentences, "
            f"translated in {e.seconds:.2f} s</p>",
            _table(["", "BLEU", "chrF"], scores),
            "<p>Lowercased BLEU by source length (Moses words)</p>",
            _table(["source length", "sentences", "BLEU"], buckets),
            "<p>Outputs that repeat a bigram more often than their source; source tokens whose"
            f" attention, summed over the output, stays under {COVERED}</p>",
            _table(["over-translated", "under-translated"], rates),
        ]
        if self.alignment:
            a = self.alignment
            row = [[f"{a.precision:.1%}", f"{a.recall:.1%}", f"{a.aer:.1%}"]]
            parts.append(_table(["precision", "recall", "AER"], row))
        return "\n".join(parts)


# how an attribution method is named above its heatmap
METHOD_NAMES = {
    "shift": "attention one step later (shift-att)",
    "gradient": "|gradient × input|",
    "integrated": "|integrated gradients|",
    "erasure": "erasure: log p lost",
}


@dataclass
class Attributed:
    """One translation's attention and an attribution beside it (`Run.attribution`)."""

    src_tokens: list[str]  # T_src, </s> included
    tokens: list[str]  # T_out, </s> included where the output has it
    attention: np.ndarray | None  # (T_out, T_src) alpha; None without attention
    scores: np.ndarray  # (T_out, T_src) how much source token j moved output token i
    method: str

    def heatmap(self) -> Figure:
        """Attention and the attribution side by side, the attribution's rows scaled to
        their largest size (negative erasure scores drawn as 0)."""
        largest = np.abs(self.scores).max(axis=1, keepdims=True)
        scaled = np.clip(self.scores / np.where(largest > 0, largest, 1.0), 0.0, 1.0)
        panels = [(scaled, self.src_tokens, self.tokens, METHOD_NAMES[self.method])]
        scales = ["share of the row's largest"]
        if self.attention is not None:
            panels.insert(0, (self.attention, self.src_tokens, self.tokens, "attention"))
            scales.insert(0, "α")
        return attention_grid(panels, ncols=len(panels), scales=scales)
