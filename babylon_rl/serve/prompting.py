"""What the served model sees, and what the client gets back.

The models were trained on compact decision prompts, not on the game's long action requests.
A request whose last user message is an observation in the game's layout (price lines such as
`ACME $197.34 (+0.38% since your last look)`, or their compact form `ACME 197 +0.4%`) is turned
into the prompt the model was trained on, exactly as eval and `simulate --policy` do
(`decision_prompt`), and answered as they answer it: the model chooses one entry of the
decision's valid menu (`babylon_rl/evaluate/decide.py`), so the game always gets an action it accepts.
Its markets, named M1, M2... in the prompt, are named by their ids again in the answer.

Any other request is served as it is: its messages through the chat template, the answer ended
at EOS. The response says which (`babylon.prompt`: "decision" or "chat", with the reason, and the
`X-Babylon-Prompt` header). With `response_format` json_object, a chat answer is
opened with `{` and cut where its braces balance (json_schema is refused: `request.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from babylon_rl.evaluate.prompts import ANSWER_PREFIX, TICKER, DecisionPrompt, decision_prompt

DECISION, CHAT = "decision", "chat"


@dataclass(frozen=True)
class Prepared:
    mode: str  # DECISION or CHAT
    text: str  # the whole prompt the model continues (chat template, assistant turn opened, answer prefix)
    prefix: str  # written into the prompt, and so the start of the answer's text
    reason: str
    markets: dict[str, str] = field(default_factory=dict)  # M1 -> the game's market id
    json_answer: bool = False  # cut the answer where its braces balance
    decision: DecisionPrompt | None = None  # DECISION: the compact prompt whose valid menu the model chooses from


def message_text(content) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def prepare(tokenizer, messages: list[dict], json_answer: bool) -> Prepared:
    users = [m for m in messages if m["role"] == "user"]
    if messages[-1]["role"] == "user":
        prompt = decision_prompt(message_text(users[-1]["content"]))
        if TICKER.search(prompt.messages[1]["content"]):
            from babylon_rl.policy import prompt_text

            return Prepared(DECISION, prompt_text(tokenizer, prompt), ANSWER_PREFIX,
                            "the last user message is a game observation: answered from the valid menu of its compact "
                            "decision prompt", prompt.markets, decision=prompt)
        reason = "the last user message has no price lines in the game's layout"
    else:
        reason = "the last message is not the user's"
    chat = [{"role": m["role"], "content": message_text(m["content"])} for m in messages]
    prefix = "{" if json_answer else ""
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) + prefix
    return Prepared(CHAT, text, prefix, f"{reason}: served as it is", {}, json_answer)


def finish(prepared: Prepared, generated: str, stops: list[str], hit_stop: bool) -> tuple[str, str]:
    """The answer's text as the client gets it, and its finish_reason ("stop" or "length")."""
    text = prepared.prefix + generated
    reason = "stop" if hit_stop else "length"
    if prepared.json_answer:
        end = _balanced_end(text)
        if end is not None:
            text, reason = text[:end], "stop"
    for short, market_id in prepared.markets.items():
        text = text.replace(f'"{short}"', f'"{market_id}"')
    cut = _first_stop(text, stops)
    if cut >= 0:
        text, reason = text[:cut], "stop"
    return text, reason


def streamable(prepared: Prepared, generated: str, stops: list[str]) -> str:
    """The start of the answer (of the answer `generated` so far) that no later token can change, so it may be streamed:
    `finish`'s cuts applied, and the last characters held back while they could still open a stop string or be half a
    character. A decision's answer streams only once whole (its market names are replaced then)."""
    if prepared.markets:
        return ""
    text = prepared.prefix + generated.rstrip("\ufffd")
    end = _balanced_end(text) if prepared.json_answer else None
    cut = _first_stop(text[:end], stops)
    if cut >= 0 or end is not None:
        return text[:cut] if cut >= 0 else text[:end]
    hold = max((len(s) for s in stops if s), default=1) - 1
    return text[: len(text) - hold]


def _first_stop(text: str, stops: list[str]) -> int:
    """Where the first stop string begins in `text`; -1 if none does."""
    return min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)


def _balanced_end(text: str) -> int | None:
    """The index just past the `}` that closes the first `{`, strings skipped; None if it never closes."""
    depth, in_string, escaped = 0, False, False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
