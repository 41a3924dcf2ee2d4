"""An export's README.md: YAML metadata a model hub reads, what the model is, and the exact recipe to call it.

The models answer one compact decision prompt (`babylon_rl/evaluate/prompts.py`), not the game's long
request, with the assistant's turn opened by `ANSWER_PREFIX` and ended at the first `STOP_TEXT`; the
prompt names prediction markets M1, M2... `cli.py serve` does all of this; a standard server (vLLM,
llama.cpp) must be given it, so the card writes it out, rendered with the export's own chat template.
"""

from __future__ import annotations

import json

from babylon_rl.evaluate.prompts import ANSWER_PREFIX, STOP_TEXT, decision_prompt

# A game observation as the game writes it (the compact prompt is built from it, as `serve` builds it).
EXAMPLE_OBSERVATION = (
    "It is 10:04 UTC; window 2025-01-15T10:00 closes in 56 min.\nPrices:\n"
    "  ACME $197.34 (+0.38% since your last look)\n  BOLT $103.07 (-0.32% since your last look)\n"
    "News so far this window:\n  [10:03] BOLT: Bolt Motors recalls 12,000 scooters\nPrediction markets:\n"
    '  pm-75cb2-83304c56-0 "Will ACME close the hour below $197.60?" YES at 50%\n'
    "Your portfolio: cash $10,000.00; positions: none; open bets: none; P&L so far $+0.00.\nWhat do you do?"
)


def front_matter(card: dict) -> str:
    """YAML metadata (each value written as JSON, which YAML reads as it is)."""
    adapter = card["format"] == "adapter"
    meta = {"base_model": card["base_model"], "library_name": "peft" if adapter else "transformers",
            "license": card.get("license"), "pipeline_tag": "text-generation",
            "tags": ["babylon-rl", "trading", "game-agent"] + (["lora"] if adapter else []), "language": ["en"]}
    lines = [f"{key}: {json.dumps(value)}" for key, value in meta.items() if value is not None]
    return "\n".join(["---", *lines, "---", ""])


def recipe(tokenizer, card: dict, target: str) -> list[str]:
    """The exact prompt the model continues, and how to send it from vLLM and llama.cpp (`target`: the export's
    directory as the commands name it)."""
    prompt = decision_prompt(EXAMPLE_OBSERVATION)
    text = tokenizer.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False) + ANSWER_PREFIX
    model = card["model"].replace("@", "-") if card["format"] == "adapter" else target
    chat = {"model": model, "messages": [*prompt.messages, {"role": "assistant", "content": ANSWER_PREFIX}],
            "continue_final_message": True, "add_generation_prompt": False, "temperature": 0, "max_tokens": 32,
            "stop": [STOP_TEXT], "include_stop_str_in_output": True}
    fence = "```"
    return [
        "## The prompt it was trained on", "",
        "It answers one compact decision prompt, not the game's long request (`cli.py serve` builds it from the game's "
        "request; any other server must be given it):", "",
        "1. the system prompt below, its example ticker one of the observation's (`babylon_rl/evaluate/prompts.py`: "
        "`SYSTEM_PROMPT`, `example_ticker`), then the compact observation as the user's turn (`decision_prompt` writes "
        "it from the game's observation: prices as `ACME 197 +0.4%`, the portfolio on one line);",
        f"2. the assistant's turn opened and the answer begun with `{ANSWER_PREFIX}` (the chat template with "
        "`add_generation_prompt`, then that text);",
        f"3. the answer ends at the first `{STOP_TEXT}`, which belongs to it: the action is `{ANSWER_PREFIX}` + the "
        f"completion, with `{STOP_TEXT}` if the server cut it off;",
        f"4. prediction markets are named M1, M2... in the order the observation lists them: map `\"market\": \"M1\"` "
        f"back to the game's market id (here {json.dumps(prompt.markets)}).", "",
        "`cli.py serve` also chooses the answer among the decision's valid actions (`babylon_rl/evaluate/menu.py`); "
        "unconstrained at temperature 0 the model writes its first-ranked action in most cases, and vLLM's "
        "`guided_choice` with the menu's entries (each without the opening text) makes it the same choice.", "",
        "The exact text the model continues (the example observation above, through this export's chat template):", "",
        fence, text, fence, "",
        *_servers(card, target, chat, text),
    ]


def _servers(card: dict, target: str, chat: dict, text: str) -> list[str]:
    fence = "```"
    completion = {"prompt": text, "n_predict": 32, "temperature": 0, "stop": [STOP_TEXT]}
    if card["format"] == "adapter":
        vllm = (f"vllm serve {card['base_model']} --dtype {card['dtype']} --enable-lora "
                f"--lora-modules {chat['model']}={target}")
        llama = [f"python convert_lora_to_gguf.py {target} --base-model-id {card['base_model']} --outtype "
                 f"{_gguf_type(card['dtype'])} --outfile adapter.gguf",
                 "llama-server -m BASE.gguf --lora adapter.gguf --port 8080"]
    else:
        vllm = f"vllm serve {target} --dtype {card['dtype']}"
        llama = [f"python convert_hf_to_gguf.py {target} --outtype {_gguf_type(card['dtype'])} --outfile model.gguf",
                 "llama-server -m model.gguf --port 8080"]
    return [
        "Run from the directory that holds this export (it is named by its directory alone: no local path travels "
        "with it).", "",
        "### vLLM", "", f"{fence}console", f"$ {vllm}",
        f"$ curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' -d '{_sh(chat)}'", fence, "",
        "(or `/v1/completions` with the exact text above as `prompt`).", "",
        "### llama.cpp", "", f"{fence}console", *[f"$ {line}" for line in llama],
        f"$ curl -s localhost:8080/completion -d '{_sh(completion)}'", fence, "",
        f"llama.cpp's answer leaves the stop out: append `{STOP_TEXT}`.", "",
    ]


def _gguf_type(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[dtype]


def _sh(payload: dict) -> str:
    """A JSON body inside single quotes in a shell."""
    return json.dumps(payload).replace("'", "'\\''")


def card_text(card: dict, tokenizer, target: str) -> str:
    lines = [front_matter(card), f"# {card['model']} ({card['format']})", "",
             "A Babylon trading policy trained by babylon-rl. It answers the compact decision prompt of",
             "babylon_rl/evaluate/prompts.py with one JSON action; `cli.py serve` builds that prompt from the game's request.", "",
             "| | |", "|---|---|",
             f"| base model | {card['base_model']} (here: {card['base_name']}) |", f"| weights | {card['dtype']} |",
             f"| dataset | {card['dataset']} |",
             f"| dataset content hash | {card['dataset_hash']} |", f"| objective | {card['objective']} |",
             f"| on-policy | {card['on_policy']} |", f"| checkpoint | {card['source']} |",
             f"| exported | {card['exported_at']} |", ""]
    if card.get("base_weights"):
        lines += [f"Trained on {card['base_model']}'s weights {card['base_weights']}: on the hub's own weights an adapter's "
                  "answers may differ slightly; the hf export carries the weights it was trained on.", ""]
    return "\n".join(lines + _evaluation(card["eval"], card["model"], card["dataset"]) + recipe(tokenizer, card, target))


def _evaluation(evaluation: dict | None, model: str, dataset: str | None) -> list[str]:
    if not evaluation:
        return [f"No held-out evaluation of this checkpoint yet: `python cli.py eval --model {model} --dataset "
                f"{dataset or 'NAME'}` writes it.", ""]
    names = _metric_names(evaluation)
    lines = [f"## Held-out evaluation ({evaluation['windows']} windows, {evaluation['decisions']} decisions of "
             f"{evaluation['dataset']})", "", "| policy | role | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for name, figures in evaluation["policies"].items():
        lines.append(f"| {name} | {figures['role']} | " + " | ".join(_figure(figures.get(m)) for m in names) + " |")
    return lines + ["", f"Claim: {evaluation['claim']}; learning shown: {evaluation['learning_shown']}.", ""]


def _metric_names(evaluation: dict) -> list[str]:
    first = next(iter(evaluation["policies"].values()), {})
    return [k for k in first if k != "role"]


def _figure(value) -> str:
    """A figure with its 95 % interval, as eval.json holds it ({"value", "low", "high"})."""
    if isinstance(value, dict) and "value" in value:
        return f"{value['value']:.4g} [{value['low']:.4g}, {value['high']:.4g}]"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
