"""The tiny local model: tokenizer that survives save/reload, and a warm start that speaks JSON actions."""

from __future__ import annotations

import json


from babylon_rl.train.data import encode_conversation
from babylon_rl.train.tiny import TinySpec, build_model, train_tokenizer
from babylon_rl.train.checkpoints import generate_answer
from tests.train_factory import write_dataset


def _conversations(root):
    result = write_dataset(root)
    return [json.loads(r["messages"]) for r in result.rows]


def test_tokenizer_ids_survive_save_and_reload(tmp_path):
    from transformers import AutoTokenizer

    conversations = _conversations(tmp_path / "home")
    tokenizer = train_tokenizer(conversations, 400)
    tokenizer.save_pretrained(tmp_path / "tok")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    for messages in conversations[:5]:
        text = "\n".join(m["content"] for m in messages) + " naïve ünïcode ✓ 1234.56"
        assert reloaded.encode(text) == tokenizer.encode(text)
        assert reloaded.decode(reloaded.encode(text)) == text
        before = encode_conversation(tokenizer, messages, 4096)
        after = encode_conversation(reloaded, messages, 4096)
        assert before == after
        answers = [m["content"] for m in messages if m["role"] == "assistant"]
        masked = reloaded.decode([t for t, m in zip(after.input_ids, after.assistant_mask) if m])
        assert masked == "<|im_end|>".join(answers) + "<|im_end|>"
    assert reloaded.backend_tokenizer.pre_tokenizer.__getstate__() == tokenizer.backend_tokenizer.pre_tokenizer.__getstate__()


def _parse_rate(model, tokenizer, prompts) -> float:
    ok = 0
    for messages in prompts:
        try:
            answer = json.loads(generate_answer(model, tokenizer, messages, max_new_tokens=32))
            ok += isinstance(answer, dict) and answer.get("action") in {"buy", "sell", "hold", "bet"}
        except ValueError:
            pass
    return ok / len(prompts)


def test_init_tiny_speaks_the_action_format(run_cli, home):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    write_dataset(home)
    result = run_cli("model", "init-tiny", "--dataset", "ds", "--warmup-steps", "100")
    assert result.exit_code == 0, result.output
    path = home / "models" / "tiny"
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    parameters = sum(p.numel() for p in model.parameters())
    assert 50_000 < parameters < 1_000_000
    conversations = _conversations(home)
    prompts = [c[:2] for c in conversations[-6:]]  # system prompt + first observation
    random_model = build_model(tokenizer, TinySpec(seed=1))
    trained_rate = _parse_rate(model, tokenizer, prompts)
    assert trained_rate > _parse_rate(random_model, tokenizer, prompts)
    assert trained_rate >= 0.5


def test_init_tiny_unknown_dataset_is_one_line(run_cli):
    result = run_cli("model", "init-tiny", "--dataset", "missing")
    assert result.exit_code == 2
    assert "unknown dataset 'missing'" in result.output and "Traceback" not in result.output
