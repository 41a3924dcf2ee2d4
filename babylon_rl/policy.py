"""A local causal LM answering decision prompts: the one decoding path of training and evaluation.

The prompt is the chat template with the assistant's turn opened and `ANSWER_PREFIX` written
(`evaluate/prompts.py`); an answer ends at EOS or at the first token holding `STOP_TEXT`. A
batch of prompts runs through the model once; its KV cache is repeated for the k answers of
each prompt, so only the answer tokens run k times (`prefill`), in sampling and in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from babylon_rl.evaluate.prompts import ANSWER_PREFIX, STOP_TEXT, DecisionPrompt


@dataclass
class PromptBatch:
    ids: object  # [B, T] left-padded token ids
    attention: object  # [B, T]
    positions: object  # [B, T]


def prompt_text(tokenizer, request: DecisionPrompt) -> str:
    """The chat template with the assistant's turn opened and `ANSWER_PREFIX` written: what the model continues."""
    return tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False) + ANSWER_PREFIX


def encode_prompts(tokenizer, requests: list[DecisionPrompt], device: str) -> PromptBatch:
    texts = [prompt_text(tokenizer, r) for r in requests]
    return pad_prompts(tokenizer, [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]], device)


def pad_prompts(tokenizer, encoded: list[list[int]], device: str) -> PromptBatch:
    """Token id lists left-padded into one batch, with their attention mask and positions."""
    import torch

    width = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=device)
    attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=device)
    return PromptBatch(ids, attention, (attention.cumsum(-1) - 1).clamp(min=0))


def encode_answers(tokenizer, answers: list[str], device: str):
    """Token ids and mask ([N, A], right-padded) of answer texts that start with `ANSWER_PREFIX` (imitation targets)."""
    import torch

    bodies = [a[len(ANSWER_PREFIX):] if a.startswith(ANSWER_PREFIX) else a for a in answers]
    encoded = [list(ids) for ids in tokenizer(bodies, add_special_tokens=False)["input_ids"]]
    width = max(1, max(len(e) for e in encoded))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([e + [pad] * (width - len(e)) for e in encoded], device=device)
    mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded], device=device)
    return ids, mask


def prefill(model, batch: PromptBatch, repeats: int):
    """Run the prompts once; the last position's logits and the KV cache, each repeated `repeats` times."""
    out = model(input_ids=batch.ids, attention_mask=batch.attention, position_ids=batch.positions, use_cache=True, logits_to_keep=1)
    cache = out.cache
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return out.logits[:, -1].repeat_interleave(repeats, 0), cache


def stop_tokens(tokenizer):
    """Ids of the tokens that end an answer: EOS and every token whose text holds `STOP_TEXT` (cached on the tokenizer)."""
    import torch

    cached = getattr(tokenizer, "_babylon_stop_ids", None)
    if cached is None:
        ids = {i for token, i in tokenizer.get_vocab().items() if STOP_TEXT in tokenizer.convert_tokens_to_string([token])}
        cached = torch.tensor(sorted(ids | {tokenizer.eos_token_id}))
        tokenizer._babylon_stop_ids = cached
    return cached


def sample_answers(model, tokenizer, batch: PromptBatch, k: int, max_new_tokens: int, temperature: float, generator=None,
                   top_p: float = 1.0, stops=None, on_step=None):
    """k answers per prompt: token ids and mask [B*k, A], the stop token included; temperature 0 = greedy.

    `stops`: the token ids that end an answer (default `stop_tokens`: EOS and the `STOP_TEXT` tokens);
    `top_p` < 1 samples from the smallest set of tokens holding that much probability;
    `generator`: a torch.Generator for every row, or a list of one per row (None: torch's own), so that a row's draws
    depend on its generator alone, whatever else is in the batch; `on_step(token, live)`: called after each step with
    its tokens [B*k] and the rows still answering then (a streaming server sends them on); it may return a bool tensor
    [B*k] of rows to end now (a server ends the answers nobody waits for any more), else None."""
    import torch

    stops = (stop_tokens(tokenizer) if stops is None else stops).to(batch.ids.device)
    with torch.no_grad():
        logits, cache = prefill(model, batch, k)
        attention = batch.attention.repeat_interleave(k, 0)
        position = batch.positions[:, -1:].repeat_interleave(k, 0)
        done = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        tokens, masks = [], []
        for step in range(max_new_tokens):
            if temperature > 0:
                token = _draw(_nucleus(torch.softmax(logits.float() / temperature, -1), top_p), generator)
            else:
                token = logits.argmax(-1)
            token = torch.where(done, torch.full_like(token, tokenizer.pad_token_id), token)
            tokens.append(token)
            masks.append(~done)
            ended = on_step(token, ~done) if on_step is not None else None
            done = done | torch.isin(token, stops) | (ended if ended is not None else done)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], 1)
            position = position + 1
            out = model(input_ids=token[:, None], attention_mask=attention, position_ids=position, cache=cache, use_cache=True)
            logits = out.logits[:, -1]
    return torch.stack(tokens, 1), torch.stack(masks, 1).long()


def _draw(probs, generator):
    """One token per row of `probs`: all rows from one generator, or each row from its own (a list, one per row)."""
    import torch

    if not isinstance(generator, (list, tuple)):
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g) for i, g in enumerate(generator)]).squeeze(1)


def _nucleus(probs, top_p: float):
    """The probabilities with every token outside the top-p set zeroed (the most likely token always stays)."""
    if top_p >= 1.0:
        return probs
    import torch

    ordered, order = probs.sort(-1, descending=True)
    outside = ordered.cumsum(-1) - ordered > top_p
    return torch.zeros_like(probs).scatter(-1, order, ordered.masked_fill(outside, 0.0))


def decode_answers(tokenizer, tokens, mask) -> list[str]:
    """Answer texts: `ANSWER_PREFIX` + the sampled tokens up to the stop."""
    pad = tokenizer.pad_token_id
    return [ANSWER_PREFIX + text for text in tokenizer.batch_decode(tokens * mask + pad * (1 - mask), skip_special_tokens=True)]


def answer_logprobs(model, batch: PromptBatch, answers, answer_mask, k: int):
    """Log-probability of every answer token ([B*k, A]) under `model`; the prompt runs once for its k answers.

    Gradients flow through the repeated cache back into the prompt's pass. The vocabulary-sized
    logits are turned into log-probabilities part by part (first token, then the rest) and never
    concatenated: at k = 8 they are most of a step's memory.
    """
    import torch

    first_logits, cache = prefill(model, batch, k)
    parts = [_token_logprobs(first_logits[:, None], answers[:, :1])]
    if answers.shape[1] > 1:
        attention = torch.cat([batch.attention.repeat_interleave(k, 0), answer_mask[:, :-1]], 1)
        last = batch.positions[:, -1:].repeat_interleave(k, 0)
        positions = last + 1 + torch.arange(answers.shape[1] - 1, device=answers.device)[None]
        out = model(input_ids=answers[:, :-1], attention_mask=attention, position_ids=positions, cache=cache, use_cache=True)
        parts.append(_token_logprobs(out.logits, answers[:, 1:]))
    return torch.cat(parts, 1)


def _token_logprobs(logits, targets):
    """log softmax(logits)[target] without keeping a second vocabulary-sized tensor: logit - logsumexp."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)


def greedy_answers(model, tokenizer, requests: list[DecisionPrompt], device: str, max_new_tokens: int = 32,
                   batch_size: int = 16, on_done=lambda n: None) -> list[str]:
    """The model's greedy answer to each prompt, in order (prompts of similar length share a batch)."""
    order = sorted(range(len(requests)), key=lambda i: len(requests[i].messages[-1]["content"]))
    answers = [""] * len(requests)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = encode_prompts(tokenizer, [requests[i] for i in chunk], device)
        tokens, mask = sample_answers(model, tokenizer, batch, 1, max_new_tokens, 0.0)
        for i, text in zip(chunk, decode_answers(tokenizer, tokens, mask)):
            answers[i] = text
        on_done(len(chunk))
    return answers
