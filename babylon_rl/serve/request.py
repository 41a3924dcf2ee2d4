"""The chat-completions request as pydantic checks it, and the fields this server cannot honour.

Nothing is dropped without a word: a field this server does not know is a 400 naming it (`extra="forbid"`),
and a field it knows but cannot honour is accepted only at the value that changes nothing (no tools, no
log-probabilities, no penalties); any other value is a 400 naming the field (`refusal`). README's serve
section has the table of fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 8
MAX_STOPS = 4  # as OpenAI: up to 4 stop sequences


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict] | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown field is a 400 naming it, never ignored
    messages: list[Message] = Field(min_length=1)
    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int | None = Field(None, ge=1, le=MAX_N)
    seed: int | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None  # an end-user id for the caller's records: accepted, used for nothing
    # known, but honoured only at the value that changes nothing (`REFUSED`)
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None  # means nothing without tools
    functions: list[dict] | None = None
    function_call: str | dict | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def wants_json(self) -> bool:
        return self.response_format is not None and self.response_format.type != "text"

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


@dataclass(frozen=True)
class Refusal:
    param: str
    message: str
    code: str


_NO_TOOLS = "this server does not call tools: leave it out"
REFUSED: tuple[tuple[str, Callable[[ChatRequest], bool], str, str], ...] = (
    ("tools", lambda r: bool(r.tools), _NO_TOOLS, "unsupported_parameter"),
    ("tool_choice", lambda r: r.tool_choice not in (None, "none"), _NO_TOOLS + ' or send "none"', "unsupported_value"),
    ("functions", lambda r: bool(r.functions), _NO_TOOLS, "unsupported_parameter"),
    ("function_call", lambda r: r.function_call not in (None, "none"), _NO_TOOLS + ' or send "none"', "unsupported_value"),
    ("logprobs", lambda r: bool(r.logprobs), "log-probabilities are not returned: send false or leave it out",
     "unsupported_value"),
    ("top_logprobs", lambda r: bool(r.top_logprobs), "log-probabilities are not returned: leave it out",
     "unsupported_parameter"),
    ("logit_bias", lambda r: bool(r.logit_bias), "logit_bias is not applied: leave it out", "unsupported_parameter"),
    ("frequency_penalty", lambda r: bool(r.frequency_penalty), "penalties are not applied: send 0 or leave it out",
     "unsupported_value"),
    ("presence_penalty", lambda r: bool(r.presence_penalty), "penalties are not applied: send 0 or leave it out",
     "unsupported_value"),
    ("response_format", lambda r: r.response_format is not None and r.response_format.type == "json_schema",
     "json_schema is not enforced here: send {\"type\": \"json_object\"} (a game action is always a valid menu entry)",
     "unsupported_value"),
    ("stop", lambda r: len(r.stops) > MAX_STOPS, f"at most {MAX_STOPS} stop strings", "invalid_value"),
    ("stream_options", lambda r: r.stream_options is not None and not r.stream,
     "stream_options is only allowed when stream is true", "invalid_value"),
)


def refusal(request: ChatRequest) -> Refusal | None:
    """The first field of `request` set to a value this server cannot honour, or None."""
    for param, refused, message, code in REFUSED:
        if refused(request):
            return Refusal(param, f"{param}: {message}", code)
    return None
