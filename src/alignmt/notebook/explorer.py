"""The explorer in a notebook: an anywidget whose JavaScript is the explorer's own module
(answers/static/explorer.js, the same file `alignmt serve` and `alignmt explore` use). It asks
the kernel, never a server: each question goes as a widget message and is answered by the
functions behind the HTTP API. The sentence, the models shown, the first panel's step, its
output and its forced prefix are traits kept in sync with Python, both ways.

Without a kernel the explorer still shows the sentences given: the widget holds their
answers (the greedy step-through, the beam, the snapshots), computed when it is made. A
page that runs widgets from their saved state shows them when no kernel answers; a
renderer that runs no widgets (nbviewer, a documentation page, a notebook exported to
HTML) shows the output's other form, the offline page with the same answers.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from typing import Any

import anywidget
import traitlets

from alignmt.answers import page
from alignmt.answers.limits import Limits
from alignmt.answers.registry import ServedModel

log = logging.getLogger(__name__)


class Explorer(anywidget.AnyWidget):
    """Step through the decoder, force a prefix, move a step's attention, open the beam tree
    and follow attention over training, for one model or two side by side.

    Set `sentence`, `model_name`, `beside`, `step` or `prefix` from Python and the widget
    shows it; click in the widget and they follow.
    """

    _esm = page.STATIC / "explorer.js"
    _css = page.STATIC / "explorer.css"

    sentences = traitlets.List(traitlets.Unicode(), help="offered in the sentence box").tag(
        sync=True
    )
    sentence = traitlets.Unicode("", help="the sentence shown").tag(sync=True)
    model_name = traitlets.Unicode("", help="the model in the first panel").tag(sync=True)
    beside = traitlets.Unicode("", help="the model beside it; empty: none").tag(sync=True)
    step = traitlets.Int(0, help="the first panel's decoder step, from 0").tag(sync=True)
    tokens = traitlets.List(traitlets.Unicode(), help="the first panel's output").tag(sync=True)
    prefix = traitlets.List(
        traitlets.Unicode(), help="tokens forced on the first panel; empty: its own output"
    ).tag(sync=True)
    offline = traitlets.Dict(help="the answers for `sentences`, shown with no kernel").tag(
        sync=True
    )

    def __init__(
        self,
        models: dict[str, ServedModel],
        sentences: Sequence[str],
        *,
        beside: str = "",
        beam_size: int | None = None,
    ) -> None:
        """The explorer of `models` for `sentences`, with their answers stored for no kernel.

        Args:
            models: what the explorer can show, by name; the first is shown first.
            sentences: the first is translated at once; all are offered, and all are in
                the offline form.
            beside: a model of `models` to show beside the first.
            beam_size: the beam the offline form holds (None: the first model's).
        """
        if not sentences:
            raise ValueError("the explorer needs at least one sentence")
        if beside and beside not in models:
            raise ValueError(f"beside: no model named {beside!r}; there are {', '.join(models)}")
        self._models = models
        self._limits = Limits()
        first = next(iter(models.values()))
        shown = {first.name: first} | ({beside: models[beside]} if beside else {})
        beam_size = beam_size or first.translator.search.beam_size
        super().__init__(
            sentences=list(sentences),
            sentence=sentences[0],
            model_name=first.name,
            beside=beside,
            offline={
                **page.precompute(shown, sentences, beam_size=beam_size),
                "command": "run.explore()",
                "beside": beside or None,  # shown beside the first where no kernel runs
            },
        )
        self.on_msg(self._answer)

    def _answer(self, _widget: Any, content: dict, _buffers: list) -> None:
        """A question from the widget: {"id", "what", "body"}; the reply carries the id, and
        the answer or the error's message."""
        reply: dict[str, Any] = {"id": content.get("id")}
        try:
            reply["answer"] = page.answer(
                self._models, self._limits, content.get("what", ""), content.get("body", {})
            )
        except ValueError as error:  # a question the server would refuse: its message
            reply["error"] = str(error)
        except Exception as error:  # a fault of ours: the widget still hears, the log keeps it
            log.exception("the explorer's question %r failed", content.get("what"))
            reply["error"] = f"{type(error).__name__}: {error}"
        self.send(reply)

    def offline_page(self) -> str:
        """The explorer as one HTML page with the answers for `sentences` stored in it:
        what a notebook shows where no kernel runs the widget."""
        return page.self_contained(self.offline, self.offline["command"])

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        data, metadata = super()._repr_mimebundle_(**kwargs)
        # A frontend that runs widgets shows the widget; nbviewer, a docs page or an HTML
        # export shows the richest form it knows, this one.
        frame = html.escape(self.offline_page(), quote=True)
        data["text/html"] = (
            f'<iframe class="alignmt-offline" srcdoc="{frame}" title="alignmt explorer" '
            'style="width: 100%; height: 760px; border: 0"></iframe>'
        )
        return data, metadata
