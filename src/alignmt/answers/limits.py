"""What a server accepts, and the error a request past a limit gets.

Every limit is a command-line flag of `alignmt serve` (see `Limits`). A request past one is
answered with a 4xx whose JSON body names the limit, the value sent and the maximum, so
that a client can tell what to change; nothing a client sends reaches the model unchecked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


def _limit(default: float, what: str) -> Any:
    return field(default=default, metadata={"help": what})


@dataclass(frozen=True)
class Limits:
    """Each field is a flag of `alignmt serve` (max_body_bytes: --max-body-bytes)."""

    max_body_bytes: int = _limit(1_000_000, "request body bytes; past it: 413")
    max_sentences: int = _limit(64, "sentences in one translate request")
    max_chars: int = _limit(2_000, "characters in one sentence")
    max_source_tokens: int = _limit(200, "source tokens of one sentence, as the model splits it")
    max_beam: int = _limit(16, "beam size")
    max_top_k: int = _limit(50, "candidates per step of /v1/step")
    max_phrases: int = _limit(16, "constraint phrases (include and exclude) of one sentence")
    max_attention_cells: int = _limit(
        2_000_000,
        "attention weights one translate answer may hold (nbest x source tokens x output "
        "limit, summed over sentences; about 8 bytes of JSON each)",
    )
    max_queue: int = _limit(1_024, "sentences waiting to decode; past it: 503 and Retry-After")
    deadline: float = _limit(30.0, "seconds a request may take, queueing included; past it: 504")
    read_deadline: float = _limit(
        20.0,
        "seconds a client has to send a whole request, headers and body, from connecting or "
        "from its first byte; past it: 408 and the connection is closed",
    )
    batch_width: int = _limit(64, "the most sentences decoding at once (dynamic batching)")
    batch_wait: float = _limit(0.002, "seconds the decoder waits for more sentences to batch")

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            # NaN passes `value <= 0`, and an infinite deadline or wait never ends
            if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
                raise ValueError(f"serve limit {name} must be positive and finite, got {value}")
        if self.max_queue < self.max_sentences:
            raise ValueError(
                f"max_queue ({self.max_queue}) must hold one full request "
                f"(max_sentences = {self.max_sentences})"
            )


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the JSON error body."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.details = status, code, details

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": str(self), **self.details}}


def over_limit(limit: str, value: Any, maximum: Any, what: str, status: int = 422) -> RequestError:
    """The error for `value` past `limit` (a flag name without dashes, as in `Limits`)."""
    value = cut(value)
    message = f"{what}: {value} is over the limit of {maximum} ({limit})"
    return RequestError(status, "limit", message, limit=limit, value=value, max=maximum)


def read_timeout(limits: Limits) -> RequestError:
    """The 408 of a client that did not send its whole request within `read_deadline`."""
    seconds = limits.read_deadline
    message = f"the request did not arrive within {seconds} s (read_deadline)"
    return RequestError(408, "timeout", message, limit="read_deadline", max=seconds)


def invalid(field: str, message: str, value: Any = None) -> RequestError:
    message = cut(message, 300)
    return RequestError(422, "invalid", f"{field}: {message}", field=field, value=cut(value))


def cut(value: Any, size: int = 80) -> Any:
    """A value sent by a client, fit to echo in an error: numbers JSON can hold as they
    are, anything else as its repr cut to `size` characters (a 1 MB sentence, a huge
    integer, NaN)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) < 2**63:
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an int past Python's 4,300-digit limit for str()
        text = f"<an integer of {value.bit_length()} bits>"
    return text if len(text) <= size else text[: size - 3] + "..."


def check_length(text: str, field: str, limits: Limits) -> None:
    """Refuse a sentence longer than max_chars; what it holds is its schema's to check."""
    if len(text) > limits.max_chars:
        raise over_limit("max_chars", len(text), limits.max_chars, f"{field} length")


def check_beam(beam_size: int | None, limits: Limits) -> None:
    """Refuse a beam past max_beam (None: a model's own, checked once it is known)."""
    if beam_size is not None and beam_size > limits.max_beam:
        raise over_limit("max_beam", beam_size, limits.max_beam, "beam_size")
