"""The JSON bodies of the HTTP API, as pydantic models: what a client may send and what it
gets back.

Requests are strict (no type coercion: "5" is not a beam size) and closed (an unknown field
is an error: a misspelt option is never silently ignored). A rule that needs neither a model
nor the server's limits is a validator here (a request breaking it is refused with 422);
those reading the limits are each request's `check_limits`; those needing the model (its
beam, its vocabulary, how it splits a sentence) are checked where the model is known.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from alignmt.answers.limits import Limits, check_beam, check_length, invalid, over_limit
from alignmt.config import SCORES

PositiveInt = Annotated[int, Field(ge=1)]
_STEP = re.compile("[0-9]{1,6}")  # an output position, as a JSON object key
Position = Annotated[int, Field(ge=0)]
# C0 and C1 control characters but tab, and the surrogate code points.
_UNREADABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")
REFUSED = "refused"  # the error type of this module's validators


def _refused(message: str, value: object) -> PydanticCustomError:
    """A validator's error: `message` said as it is (a ValueError's would read "Value error,
    ..."), and `value` the one to echo, in place of the field's whole input."""
    return PydanticCustomError(REFUSED, message, {"value": value})


def _readable(text: str) -> str:
    """Refuse a sentence that no model should read: blank, with control characters (tab
    aside), or with lone surrogates (JSON can carry them; UTF-8 cannot)."""
    if not text.strip():
        raise _refused("the sentence is empty or only whitespace", text)
    bad = _UNREADABLE.search(text)
    if bad:
        char = bad.group()
        kind = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
        code = f"U+{ord(char):04X}"
        raise _refused(f"{kind} ({code}) at character {bad.start()}", code)
    return text


Sentence = Annotated[str, AfterValidator(_readable)]
Phrase = Annotated[str, AfterValidator(_readable)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(
        None, description="a served model's name (its run folder's name); default: the first"
    )


class SampleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    temperature: float = Field(1.0, gt=0, description="<1 sharpens, >1 flattens")
    top_k: int = Field(0, ge=0, description="draw among the k most probable tokens; 0: all")
    top_p: float = Field(1.0, gt=0, le=1, description="draw among the fewest tokens holding p")
    samples: PositiveInt = Field(1, description="outputs drawn per sentence")
    seed: int = Field(0, description="the same seed and sentences draw the same outputs")


class Constraints(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    include: list[Phrase] = Field(
        default_factory=list, description="phrases of target text the output must contain"
    )
    exclude: list[Phrase] = Field(
        default_factory=list, description="phrases of target text the output must not contain"
    )

    def check_limits(self, field: str, limits: Limits) -> None:
        """Refuse more phrases than max_phrases, or a phrase longer than max_chars."""
        count = len(self.include) + len(self.exclude)
        if count > limits.max_phrases:
            raise over_limit("max_phrases", count, limits.max_phrases, f"{field} phrases")
        for kind in ("include", "exclude"):
            for i, phrase in enumerate(getattr(self, kind)):
                check_length(phrase, f"{field}.{kind}[{i}]", limits)


class TranslateRequest(_Request):
    sentences: list[Sentence] = Field(min_length=1, description="raw source sentences")
    beam_size: PositiveInt | None = Field(None, description="1 is greedy; default: the run's")
    # before nbest, whose validator reads it
    sample: SampleOptions | None = Field(
        None, description="draw outputs from the model instead of searching (nbest must be 1)"
    )
    nbest: PositiveInt = Field(1, description="hypotheses per sentence, at most beam_size")
    attention: bool = Field(False, description="return each hypothesis' attention matrix")
    constraints: list[Constraints | None] | None = Field(
        None,
        description="lexically constrained beam search: one entry per sentence (null: "
        "none), searched by dynamic beam allocation (Post & Vilar 2018)",
    )

    @field_validator("constraints")
    @classmethod
    def _one_per_sentence(
        cls, constraints: list[Constraints | None] | None, info: ValidationInfo
    ) -> list[Constraints | None] | None:
        if constraints is None:
            return None
        if info.data.get("sample"):
            raise _refused("constraints constrain beam search: they cannot be sampled", None)
        sentences = info.data.get("sentences")
        if sentences is not None and len(constraints) != len(sentences):
            message = f"{len(constraints)} entries for {len(sentences)} sentences: one each"
            raise _refused(message, len(constraints))
        return constraints

    @field_validator("nbest")
    @classmethod
    def _nbest_fits(cls, nbest: int, info: ValidationInfo) -> int:
        # info.data holds the fields declared before this one that were valid
        if nbest > 1 and info.data.get("sample"):
            raise _refused("sampling draws outputs: ask for sample.samples", nbest)
        beam = info.data.get("beam_size")
        if beam is not None and nbest > beam:
            raise _refused(_past_beam(nbest, beam), nbest)
        return nbest

    @property
    def outputs(self) -> int:
        """Outputs per sentence: the samples drawn, or the n best."""
        return self.sample.samples if self.sample else self.nbest

    @property
    def drawn(self) -> int:
        """The sentences it decodes: each of its own, once per sample when sampling."""
        return len(self.sentences) * (self.sample.samples if self.sample else 1)

    def with_default_beam(self, beam_size: int) -> TranslateRequest:
        """This request searching with its own beam size or else `beam_size`, the served
        model's, which nbest must fit too.

        Raises:
            RequestError: 422, nbest past `beam_size`.
        """
        if self.beam_size is not None:
            return self
        if self.nbest > beam_size:
            raise invalid("nbest", _past_beam(self.nbest, beam_size), self.nbest)
        return self.model_copy(update={"beam_size": beam_size})

    def check_limits(self, limits: Limits) -> None:
        """Refuse a request past the server's `limits` (a `RequestError`, 422)."""
        most = limits.max_sentences
        if len(self.sentences) > most:
            raise over_limit("max_sentences", len(self.sentences), most, "sentences")
        if self.drawn > most:
            raise over_limit("max_sentences", self.drawn, most, "samples in all")
        for i, sentence in enumerate(self.sentences):
            check_length(sentence, f"sentences[{i}]", limits)
        for i, constraint in enumerate(self.constraints or []):
            if constraint is not None:
                constraint.check_limits(f"constraints[{i}]", limits)
        check_beam(self.beam_size, limits)


def _past_beam(nbest: int, beam_size: int) -> str:
    return f"{nbest} is more than the beam size {beam_size}"


class _OneSentence(_Request):
    sentence: Sentence = Field(description="one raw source sentence")

    def check_limits(self, limits: Limits) -> None:
        """Refuse a request past the server's `limits` (a `RequestError`, 422)."""
        check_length(self.sentence, "sentence", limits)


class StepRequest(_OneSentence):
    prefix: list[str] = Field(
        default_factory=list, description="target tokens to force at steps 0, 1, ..."
    )
    override: dict[Position, Position] = Field(
        default_factory=dict,
        description='output step -> source position that gets all of its attention, e.g. {"2": 0}',
    )
    top_k: PositiveInt = Field(5, description="candidates listed per step")
    beam_size: PositiveInt = Field(1, description="after the prefix: 1 greedy, more a beam")
    attribution: Literal["shift", "gradient", "integrated", "erasure"] | None = Field(
        None,
        description="also say how much each source token moved each output token: the next "
        "step's attention (shift), gradient x input, integrated gradients or erasure "
        "(PyTorch models; not with an override); null: none",
    )

    @field_validator("override", mode="before")
    @classmethod
    def _step_numbers(cls, value: object) -> object:
        # JSON object keys are strings; this is the one place a string becomes a number.
        if not isinstance(value, dict):
            return value
        if not all(isinstance(key, str) and _STEP.fullmatch(key) for key in value):
            raise _refused('override keys must be step numbers, such as "2"', value)
        steps = {int(key): position for key, position in value.items()}
        if len(steps) < len(value):
            raise _refused('override names a step twice (as "1" and "01", say)', value)
        return steps

    def check_limits(self, limits: Limits) -> None:
        super().check_limits(limits)
        if self.top_k > limits.max_top_k:
            raise over_limit("max_top_k", self.top_k, limits.max_top_k, "top_k")
        check_beam(self.beam_size, limits)


class BeamRequest(_OneSentence):
    beam_size: PositiveInt | None = Field(None, description="default: the run's")
    constraints: Constraints | None = Field(
        None, description="lexical constraints on the search; null: none"
    )

    def with_default_beam(self, beam_size: int) -> BeamRequest:
        """This request searching with its own beam size or else `beam_size`, the served
        model's."""
        return self if self.beam_size else self.model_copy(update={"beam_size": beam_size})

    def check_limits(self, limits: Limits) -> None:
        super().check_limits(limits)
        check_beam(self.beam_size, limits)
        if self.constraints is not None:
            self.constraints.check_limits("constraints", limits)


class SnapshotsRequest(_OneSentence):
    pass


class Hypothesis(BaseModel):
    text: str = Field(description="the detokenised output")
    tokens: list[str] = Field(description="output tokens, </s> included when produced")
    score: float = Field(description="summed log-probability")
    probabilities: list[float] = Field(
        description="each output token's probability given those before it (word-level confidence)"
    )
    attention: list[list[float]] | None = Field(
        description="(output tokens x source tokens) weights, if asked for; null for vanilla"
    )
    alignment: str | None = Field(
        description="Pharaoh 'source-output' pairs of each output token's most-attended "
        "source token, </s> aside; null for vanilla"
    )
    met: list[bool] | None = Field(
        None,
        description="for each include phrase of its sentence's constraints, whether it "
        "contains it; null without constraints",
    )


class SentenceTranslation(BaseModel):
    source_tokens: list[str] = Field(description="the source as the model read it, with </s>")
    hypotheses: list[Hypothesis] = Field(description="best first")


class TranslateResponse(BaseModel):
    model: str = Field(description="the model that translated")
    beam_size: int = Field(description="the beam it searched with")
    translations: list[SentenceTranslation] = Field(
        description="one per sentence, in request order"
    )


class Candidate(BaseModel):
    token: str = Field(description="a target token")
    probability: float = Field(description="its probability at this step")


class Step(BaseModel):
    token: str = Field(description="the token taken")
    probability: float = Field(description="the taken token's probability")
    forced: bool = Field(description="taken from the prefix")
    overridden: bool = Field(description="its attention was put on one source position")
    attention: list[float] | None = Field(description="weights over the source tokens")
    top_k: list[Candidate] = Field(description="the most probable tokens at this step")
    attribution: list[float] | None = Field(
        default=None,
        description="the request's attribution over the source tokens (the output "
        "teacher-forced); null when none was asked",
    )
    shown: dict[str, float | list[list[float]]] = Field(
        default={},
        description="the values the model's attention mechanisms show after this step, by "
        "name (a local window's centre p_i, in source positions from 0; monotonic attention's "
        "stop probability; each head's weights); the model's `shown` says what each is",
    )


class StepResponse(BaseModel):
    model: str = Field(description="the model that decoded")
    source_tokens: list[str] = Field(description="the source as the model read it, with </s>")
    steps: list[Step] = Field(description="one per output token")
    text: str = Field(description="the detokenised output")
    tokens: list[str] = Field(description="the output tokens, </s> included when produced")
    score: float = Field(description="summed log-probability of the tokens taken")


class BeamNode(BaseModel):
    id: int = Field(description="the node's index in nodes")
    step: int = Field(description="output position of its last token")
    parent: int | None = Field(description="the node it extends; null at the first step")
    token: str = Field(description="the token it adds")
    score: float = Field(description="summed log-probability")
    status: Literal["live", "finished", "pruned", "stopped"] = Field(
        description="live (extended at the next step), finished (ended: </s> or the length "
        "limit), pruned (not among the beam kept) or stopped (live when the search stopped)"
    )
    final_score: float | None = Field(
        description="score / length penalty (+ coverage penalty), for finished ones"
    )
    attention: list[float] | None = Field(
        description="its last step's weights over the source tokens; null without attention"
    )
    met: list[bool] | None = Field(
        None,
        description="for each include phrase, whether the hypothesis up to this node holds "
        "it (met) or not yet (pending); null without constraints",
    )


class BeamResponse(BaseModel):
    model: str = Field(description="the model that searched")
    source_tokens: list[str] = Field(description="the source as the model read it, with </s>")
    beam_size: int = Field(description="the beam it searched with")
    length_penalty: float = Field(
        description="alpha of the length penalty (Wu et al. 2016); 0: none"
    )
    coverage_penalty: float = Field(description="beta; 0: none")
    nodes: list[BeamNode] = Field(description="every hypothesis the search weighed")
    finished: list[Hypothesis] = Field(description="every finished hypothesis, best first")
    finished_nodes: list[int] = Field(description="the node each finished hypothesis ends at")
    constraints: Constraints | None = Field(
        None, description="the constraints it searched under; null: none"
    )


class Snapshot(BaseModel):
    step: int = Field(description="the training step its weights were kept at")
    attention: list[list[float]] = Field(
        description="(output tokens x source tokens): its attention while reading the served "
        "model's greedy output, so that every snapshot's matrix has the same shape"
    )
    text: str = Field(description="its own greedy output")
    tokens: list[str] = Field(description="its own greedy output's tokens")


class SnapshotsResponse(BaseModel):
    model: str = Field(description="the served model")
    source_tokens: list[str] = Field(description="the source as the model read it, with </s>")
    tokens: list[str] = Field(description="the served model's greedy output, </s> included")
    snapshots: list[Snapshot] = Field(description="oldest first")


class ShownValue(BaseModel):
    slot: str = Field(description="its name in a step answer's `shown`")
    label: str = Field(description="its symbol, as the explorer marks it (p_i)")
    about: str = Field(description="what it is, one sentence")
    reach: float = Field(
        description="a position on the source: the words within `reach` of it are marked too"
    )
    kind: Literal["position", "probability", "weights"] = Field(
        "position",
        description="a position on the source, marked there; a probability; or "
        "rows of weights over the source (one per head)",
    )


class ModelInfo(BaseModel):
    name: str = Field(description="the name requests use: its run folder's")
    source_language: str = Field(description="data.src_lang")
    target_language: str = Field(description="data.tgt_lang")
    tokenizer: str = Field(description="data.tokenizer")
    cell: str = Field(description="gru or lstm")
    bidirectional: bool = Field(description="whether the encoder reads both ways")
    encoder_layers: int = Field(description="stacked encoder layers")
    decoder_layers: int = Field(description="stacked decoder layers")
    attention: str = Field(description=f"the score: {', '.join(SCORES[:-1])} or {SCORES[-1]}")
    mechanisms: list[str] = Field(
        default=[],
        description="its attention's mechanisms, as each describes itself: the score, the "
        "mapping to weights, and any window or coverage; empty without attention",
    )
    shown: list[ShownValue] = Field(
        default=[],
        description="the values a step answer's `shown` holds, as the mechanisms declare them",
    )
    order: str = Field(description="bahdanau (query s_{i-1}), luong (s_i) or cgru (s'_i)")
    embedding_size: int = Field(description="E")
    encoder_hidden: int = Field(description="H, units per direction")
    decoder_hidden: int = Field(description="D")
    attention_hidden: int = Field(description="A, of the additive and concat scorers")
    source_vocabulary: int = Field(description="source tokens known, specials included")
    target_vocabulary: int = Field(description="target tokens known, specials included")
    parameters: int = Field(description="trainable parameters")
    training_step: int = Field(description="the step its weights were saved at")
    validation_bleu: float | None = Field(description="greedy BLEU recorded at that step")
    beam_size: int = Field(description="the default beam")
    weights: str = Field("float32", description="float32, or int8: the decoder's matmuls in int8")
    shortlist: int = Field(
        0, description="K: each source token's K likeliest translations and frequent words; 0: all"
    )
    snapshots: list[int] = Field(
        description="training steps whose weights the run kept (train.snapshot_every)"
    )
    ensemble: list[str] | None = Field(
        None,
        description="an ensemble's member runs, the first describing it above; it translates "
        "only (/v1/translate)",
    )
    engine: Literal["torch", "flax", "onnxruntime"] = Field(
        "torch",
        description="what runs it: torch or flax (a run folder), or onnxruntime (a folder "
        "`alignmt export` wrote); an ensemble, which cannot step through the decoder, "
        "translates only (/v1/translate)",
    )


class Health(BaseModel):
    status: Literal["ok"] = Field(description="ok")
    models: list[str] = Field(description="the names requests may use, the default first")


class ModelsResponse(BaseModel):
    models: list[ModelInfo] = Field(description="the served models, the default first")


class ErrorBody(BaseModel):
    code: str = Field(description="invalid, limit, not_found, busy, timeout or error")
    message: str = Field(description="what was wrong, naming the field or limit")
    limit: str | None = Field(
        None, description="the server limit passed (a flag of alignmt serve without dashes)"
    )
    value: object | None = Field(None, description="the value that passed it")
    max: object | None = Field(None, description="the limit's value")


class ErrorResponse(BaseModel):
    error: ErrorBody = Field(description="what went wrong")
