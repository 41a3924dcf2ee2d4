"""`cli.py serve`: the real server process on a free port, the real SmolLM2 and LoRA checkpoints, the official client."""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import openai
import pytest

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.prompts import decision_prompt
from babylon_rl.settings import Home
from babylon_rl.warehouse import RAW_BY_NAME
from tests.serve_support import GAME_REQUEST, ServeProcess

CALL = RAW_BY_NAME["llm_call_logs"].column_names

KEY = "sk-test-secret-4242"
CHAT = [{"role": "user", "content": "Say hello in French."}]


@pytest.fixture(scope="module")
def server(smollm2_run_home):
    """One server for the module: the base (named by its absolute path: served by its name), the run's latest checkpoint
    (demo, served as demo@2) and demo@1."""
    base = str(smollm2_run_home / "models" / "smollm2-135m")
    process = ServeProcess(smollm2_run_home, base, "demo", "demo@1", "--max-batch", "8")
    process.health_seen = process.wait_ready()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def _in_process(home, model: str) -> str:
    from babylon_rl.evaluate.policies import LocalPolicy
    from babylon_rl.model_names import resolve

    policy = LocalPolicy(resolve(Home(home), model), model).load()
    return policy.replies([decision_prompt(GAME_REQUEST[1]["content"])])[0].text


def test_health_is_503_while_loading_then_the_models_are_listed_with_their_parent(server, client):
    assert 503 in server.health_seen and server.health_seen[-1] == 200
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {"smollm2-135m", "demo@2", "demo@1"}
    assert models["demo@2"].model_dump()["parent"] == "smollm2-135m"
    assert models["demo@2"].model_dump()["aliases"] == ["demo"]
    assert models["smollm2-135m"].model_dump()["parent"] is None


def test_without_a_key_models_and_health_show_names_never_paths(server, smollm2_run_home):
    """The base was named by its absolute path: it is listed, and answers, by its directory's name; the path still
    reaches it, but no answer shows where the files are."""
    listed = httpx.get(f"{server.base_url}/models")
    health = httpx.get(f"http://127.0.0.1:{server.port}/health")
    for response in (listed, health):
        assert response.status_code == 200 and str(smollm2_run_home) not in response.text and '"/' not in response.text
    assert health.json()["models"] == ["smollm2-135m", "demo@2", "demo@1"]
    assert {m["id"]: m["root"] for m in listed.json()["data"]}["smollm2-135m"] == "smollm2-135m"
    by_path = httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
        "model": str(smollm2_run_home / "models" / "smollm2-135m"), "messages": CHAT, "max_tokens": 2})
    assert by_path.status_code == 200 and by_path.json()["model"] == "smollm2-135m"


def test_a_game_request_gets_the_in_process_answer_with_the_games_market_ids(server, client, smollm2_run_home):
    """The base and the adapter asked at once (one batch, two groups): each answers as the in-process policy does."""
    def ask(model):
        return client.chat.completions.with_raw_response.create(model=model, messages=GAME_REQUEST, temperature=0,
                                                                 max_tokens=32)

    with ThreadPoolExecutor(2) as pool:
        base_raw, tuned_raw = pool.map(ask, ["smollm2-135m", "demo"])
    base, tuned = base_raw.parse(), tuned_raw.parse()
    assert tuned.model == "demo@2" and base.model == "smollm2-135m"
    assert tuned_raw.headers["x-babylon-prompt"] == "decision"
    assert tuned.model_dump()["babylon"]["prompt"] == "decision"
    expected_tuned = _in_process(smollm2_run_home, "demo")
    expected_base = _in_process(smollm2_run_home, "smollm2-135m")
    assert expected_tuned != expected_base  # the adapter is really applied, and only to its own requests
    # the prompt names the market M1; the game gets its own id back
    assert tuned.choices[0].message.content == expected_tuned.replace('"M1"', '"pm-75cb2-83304c56-0"')
    assert base.choices[0].message.content == expected_base
    assert base.choices[0].finish_reason == "stop"
    assert base.usage.prompt_tokens == 232 and base.usage.total_tokens == 232 + base.usage.completion_tokens


def test_a_prompt_that_opens_as_an_earlier_one_reuses_its_work_and_health_counts_it(server, client):
    """The same game request twice: the second runs the frozen blocks over its last prompt token only."""
    before = _work(server)
    answers = [client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=0, max_tokens=32)
               for _ in range(2)]
    after = _work(server)
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content
    assert after["decision_prompt_tokens"] - before["decision_prompt_tokens"] == 2 * 232
    assert after["reused_prompt_tokens"] - before["reused_prompt_tokens"] >= 231


def test_the_commands_default_prefix_cache_is_the_servers():
    """cli.py writes the default out (importing babylon_rl.evaluate would slow every command's start): they must agree."""
    from babylon_rl.evaluate.prefix_cache import DEFAULT_PREFIX_CACHE_MB
    from cli import cli

    option = next(p for p in cli.commands["serve"].params if p.name == "prefix_cache_mb")
    assert option.default == DEFAULT_PREFIX_CACHE_MB


def test_n_answers_with_a_seed_are_reproducible(client):
    def ask():
        return client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=1.0, top_p=0.9,
                                              n=3, seed=7, max_tokens=6)

    first, again = ask(), ask()
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    assert all(c.message.content.startswith('{"action": "') for c in first.choices)
    assert first.usage.completion_tokens <= 3 * 6


def test_stop_cuts_the_answer(client):
    full = client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=0, max_tokens=8)
    cut = client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=0, max_tokens=8,
                                         stop=['"ticker"'])
    assert '"ticker"' in full.choices[0].message.content
    assert cut.choices[0].message.content == full.choices[0].message.content.split('"ticker"')[0]
    assert cut.choices[0].finish_reason == "stop" and full.choices[0].finish_reason == "length"


def test_response_format_json(client):
    decided = client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=0, max_tokens=32,
                                             response_format={"type": "json_object"})
    assert json.loads(decided.choices[0].message.content)["action"] == "buy"
    chat = client.chat.completions.with_raw_response.create(
        model="smollm2-135m", messages=[{"role": "user", "content": "Describe ACME stock as JSON."}], temperature=0,
        max_tokens=6, response_format={"type": "json_object"})
    assert chat.headers["x-babylon-prompt"] == "chat" and chat.parse().choices[0].message.content.startswith("{")


def test_a_request_that_is_no_game_observation_is_served_as_it_is(client):
    raw = client.chat.completions.with_raw_response.create(model="smollm2-135m", messages=CHAT, temperature=0, max_tokens=5,
                                                           user="someone")
    reply = raw.parse()
    assert raw.headers["x-babylon-prompt"] == "chat"
    assert reply.model_dump()["babylon"]["reason"].startswith("the last user message has no price lines")
    assert not reply.choices[0].message.content.startswith('{"action"') and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_the_openai_sdk_streams_a_chat_answer_token_by_token(client):
    """stream=True: a role delta, content deltas as the tokens come, the finish_reason, the usage, all one id."""
    whole = client.chat.completions.create(model="smollm2-135m", messages=CHAT, temperature=0, max_tokens=12)
    chunks = list(client.chat.completions.create(model="smollm2-135m", messages=CHAT, temperature=0, max_tokens=12,
                                                 stream=True, stream_options={"include_usage": True}))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    texts = [c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    assert len(texts) > 3  # token by token, not the whole answer at the end
    assert "".join(texts) == whole.choices[0].message.content
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished == [whole.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_a_streamed_game_action_is_the_whole_menu_entry_with_the_games_market_ids(client):
    whole = client.chat.completions.create(model="demo", messages=GAME_REQUEST, temperature=0, max_tokens=32)
    chunks = list(client.chat.completions.create(model="demo", messages=GAME_REQUEST, temperature=0, max_tokens=32,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop" and all(c.usage is None for c in chunks)


def _sse(response: httpx.Response) -> list:
    """The `data:` payloads of a server-sent event stream, `[DONE]` as the string."""
    lines = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def test_a_raw_client_reads_server_sent_events_for_n_answers_and_a_stop(server):
    body = {"model": "smollm2-135m", "messages": CHAT, "temperature": 1.0, "seed": 3, "n": 2, "max_tokens": 10, "stream": True,
            "stream_options": {"include_usage": True}, "stop": ["."]}
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _sse(response)
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"]["prompt_tokens"] > 0
    chunks = events[:-2]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant", "content": ""}] * 2
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[-1]["finish_reason"] in ("stop", "length") and mine[-1]["delta"] == {}
        assert "." not in "".join(c["delta"].get("content", "") for c in mine)
    unary = httpx.post(f"{server.base_url}/chat/completions", json={**body, "stream": False, "stream_options": None},
                       timeout=120).json()
    streamed = ["".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"][0]["index"] == i)
                for i in (0, 1)]
    assert streamed == [c["message"]["content"] for c in unary["choices"]]  # the seed repeats the draws, streamed or not


REFUSED = [  # what the server cannot honour, as the openai SDK sends it, and the param the 400 names
    ({"tools": [{"type": "function", "function": {"name": "trade", "parameters": {"type": "object"}}}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}},
     "response_format"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"extra_body": {"best_of": 2}}, "best_of"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED, ids=[p for _, p in REFUSED])
def test_a_field_the_server_cannot_honour_is_a_400_naming_it(client, fields, param):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="smollm2-135m", messages=CHAT, max_tokens=2, **fields)
    error = refused.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]
    assert len(error["message"].splitlines()) == 1


def test_fields_at_the_value_that_changes_nothing_are_accepted(client):
    reply = client.chat.completions.create(model="smollm2-135m", messages=CHAT, max_tokens=2, tools=[], tool_choice="none",
                                           logprobs=False, frequency_penalty=0, presence_penalty=0, parallel_tool_calls=False,
                                           stop=["a", "b", "c", "d"], stream=False)
    assert reply.choices[0].message.content


def test_a_seed_gives_the_same_answer_alone_or_batched_with_others(server):
    """The same seeded requests alone, then each twice at once with others of other seeds while a long answer holds the
    model (so they queue up and share one batch): every copy answers as it did alone."""
    url = f"{server.base_url}/chat/completions"
    asks = [{"model": "smollm2-135m", "messages": CHAT, "temperature": 1.0, "seed": 11, "max_tokens": 12},
            {"model": "smollm2-135m", "messages": GAME_REQUEST, "temperature": 1.5, "seed": 11, "n": 3, "max_tokens": 32}]
    others = [{**asks[0], "seed": 12, "messages": [{"role": "user", "content": "Name three rivers."}]},
              {**asks[0], "seed": None}, {**asks[1], "seed": 12}, {**asks[1], "seed": None}]

    def answers(body: dict) -> list[str]:
        response = httpx.post(url, json=body, timeout=180)
        assert response.status_code == 200, response.text
        return [c["message"]["content"] for c in response.json()["choices"]]

    alone = [answers(body) for body in asks]
    blocker = {"model": "smollm2-135m", "messages": CHAT, "temperature": 0, "max_tokens": 48}
    with ThreadPoolExecutor(9) as pool:
        pool.submit(answers, blocker)
        time.sleep(0.5)
        together = list(pool.map(answers, [asks[0], asks[1], *others, asks[0], asks[1]]))
    assert together[0] == together[-2] == alone[0] and together[1] == together[-1] == alone[1]


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_user_mistakes_get_openai_shaped_errors_never_a_500(server, client):
    url = f"{server.base_url}/chat/completions"
    bad_json = httpx.post(url, content=b'{"model": "smollm2-135m", "messages": [', headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and _error(bad_json)["code"] == "invalid_json"
    no_messages = httpx.post(url, json={"model": "smollm2-135m"})
    assert no_messages.status_code == 400 and _error(no_messages)["param"] == "messages"
    hot = httpx.post(url, json={"model": "smollm2-135m", "messages": CHAT, "temperature": 5})
    assert hot.status_code == 400 and _error(hot)["param"] == "temperature"
    assert _error(httpx.get(f"{server.base_url}/nothing-here")).get("type") == "invalid_request_error"
    huge = httpx.post(url, content=b" " * 4_000_001, headers={"content-type": "application/json"})
    assert huge.status_code == 413 and _error(huge)["code"] == "request_too_large"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-9", messages=CHAT, max_tokens=2)
    assert unknown.value.body["code"] == "model_not_found" and "smollm2-135m" in unknown.value.body["message"]
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "ACME " * 9000}], max_tokens=2)
    assert long.value.body["code"] == "context_length_exceeded" and "8192" in long.value.body["message"]
    assert "Traceback" not in server.output() and " 500 " not in server.output()


@pytest.fixture(scope="module")
def guarded(smollm2_run_home):
    """A second server: a key from the environment, one request at a time, one waiting, no prefix cache."""
    process = ServeProcess(smollm2_run_home, "smollm2-135m", "--max-batch", "1", "--max-queue", "1", "--batch-wait-ms", "0",
                           "--prefix-cache-mb", "0", env={"BABYLON_RL_API_KEY": KEY})
    process.wait_ready()
    yield process
    process.stop()


def test_a_key_guards_v1_but_not_health_and_never_reaches_the_log(guarded):
    wrong = openai.OpenAI(base_url=guarded.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.models.list()
    assert refused.value.body["code"] == "invalid_api_key"
    assert httpx.get(f"{guarded.base_url}/models").status_code == 401
    assert httpx.get(f"http://127.0.0.1:{guarded.port}/health").status_code == 200
    right = openai.OpenAI(base_url=guarded.base_url, api_key=KEY, max_retries=0)
    assert [m.id for m in right.models.list().data] == ["smollm2-135m"]
    assert KEY not in guarded.output() and "API key: required" in guarded.output()
    assert "prefix cache 0 MB" in guarded.output()


def test_a_full_queue_is_answered_429_with_retry_after(guarded):
    def ask(_):
        return httpx.post(f"{guarded.base_url}/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                          json={"model": "smollm2-135m", "messages": GAME_REQUEST, "temperature": 0, "max_tokens": 12})

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(ask, range(6)))
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and 429 in codes and set(codes) <= {200, 429}
    work = _work(guarded)
    assert work["decision_prompt_tokens"] >= 2 * 232 and work["reused_prompt_tokens"] == 0  # --prefix-cache-mb 0
    for r in responses:
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1" and _error(r)["type"] == "rate_limit_error"


def test_sigterm_finishes_the_request_in_flight_then_exits(guarded):
    result: dict = {}

    def ask():
        client = openai.OpenAI(base_url=guarded.base_url, api_key=KEY, max_retries=0, timeout=120)
        result["reply"] = client.chat.completions.create(model="smollm2-135m", messages=GAME_REQUEST, temperature=0,
                                                         max_tokens=24)

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(1.0)  # the request is in the model by now (a prompt of 232 tokens takes seconds here)
    guarded.proc.send_signal(signal.SIGTERM)
    thread.join(120)
    assert result["reply"].choices[0].message.content.startswith('{"action": "')
    # uvicorn re-raises SIGTERM once shut down, so the process ends as killed by it (what supervisors expect)
    assert guarded.proc.wait(60) == -signal.SIGTERM
    assert "Finished server process" in guarded.output() and "Traceback" not in guarded.output()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{guarded.port}/health", timeout=2)


def test_the_served_model_plays_the_simulator_as_the_in_process_policy(server, smollm2_run_home):
    """simulate --policy demo --base-url URL decides as simulate --policy demo does, at temperature 0."""
    from dataclasses import replace

    from babylon_rl.simulate.config import SimulationConfig
    from babylon_rl.simulate.policy_play import open_player
    from babylon_rl.simulate.window import simulate_window

    start = datetime(2025, 1, 15, 10)
    config = SimulationConfig(agents=2, windows=1, steps_per_window=2, seed=3, start=start, policy_agents=2,
                              policy_model="demo").validate()
    home = Home(smollm2_run_home)
    local, _ = open_player(home, "demo", None, "cpu", 2)
    remote, _ = open_player(home, "demo", server.base_url, "cpu", 2)

    def responses(player):
        rows = simulate_window(replace(config), start, player)
        calls = [dict(zip(CALL, row)) for row in rows.llm_calls]
        return [c["response"] for c in calls if c["systemPrompt"].startswith("You trade in the Babylon market game.")]

    local_answers, remote_answers = responses(local), responses(remote)
    assert len(local_answers) == 4
    assert remote_answers == local_answers
    assert all(parse_action(answer) for answer in remote_answers)  # the trained model's decisions: menu entries


def test_a_bet_on_m1_is_answered_with_the_games_market_id():
    from babylon_rl.serve.prompting import DECISION, finish, prepare

    class Template:  # the chat template alone: what prepare needs of a tokenizer
        def apply_chat_template(self, messages, **_):
            return "\n".join(m["content"] for m in messages)

    prepared = prepare(Template(), GAME_REQUEST, json_answer=False)
    assert prepared.mode == DECISION and prepared.markets == {"M1": "pm-75cb2-83304c56-0"}
    assert "M1: ACME below 197.60? YES 50%" in prepared.text and "Think it through" not in prepared.text
    text, reason = finish(prepared, 'bet", "market": "M1", "side": "YES", "amount": 100}', [], hit_stop=True)
    assert text == '{"action": "bet", "market": "pm-75cb2-83304c56-0", "side": "YES", "amount": 100}' and reason == "stop"


def test_names_resolve_to_checkpoints_the_promoted_model_and_their_base(smollm2_run_home):
    from babylon_rl.errors import ConfigError
    from babylon_rl.serve.registry import plan

    home = Home(smollm2_run_home)
    state, best = smollm2_run_home / "improve" / "state.json", smollm2_run_home / "runs" / "demo" / "best.json"
    with pytest.raises(ConfigError, match="no model promoted yet"):
        plan(home, ["promoted"])
    state.parent.mkdir(exist_ok=True)
    state.write_text(json.dumps({"champion": "runs/demo/checkpoints/step-1"}))
    best.write_text(json.dumps({"step": 1, "score": 0.5}))
    try:
        served = {s.id: s for s in plan(home, ["promoted", "demo@best"])}
        assert set(served) == {"promoted", "demo@1", "smollm2-135m"}  # the adapters' base is served beside them
        assert served["promoted"].parent == served["demo@1"].parent == "smollm2-135m"
        assert served["demo@1"].aliases == ("demo@best",)
        with pytest.raises(ConfigError, match="a name already served"):
            plan(home, ["demo@1", "demo@best"])
    finally:
        state.unlink()
        best.unlink()


def test_arena_between_the_served_model_and_the_same_checkpoint_played_here_is_a_tie(server, smollm2_run_home):
    """arena --base-url --against-local: the served model against the same checkpoint in this process decide alike."""
    from click.testing import CliRunner

    from cli import cli

    def arena(*args: str):
        return CliRunner().invoke(cli, ["--home", str(smollm2_run_home), "arena", "--model", "demo", "--against", "demo",
                                        "--against-local", "--windows", "2", "--agents", "2", "--policy-agents", "1",
                                        "--steps-per-window", "2", "--resamples", "100", *args])

    result = arena("--base-url", server.base_url)
    assert result.exit_code == 0, result.output
    (saved,) = (smollm2_run_home / "arena").glob("*/arena.json")
    served, local = json.loads(saved.read_text())["sides"]
    assert served["decisions"] == local["decisions"] == 4
    assert served["actions"] == local["actions"] and served["mean_window_pnl"] == local["mean_window_pnl"]
    refused = arena()
    assert refused.exit_code == 2 and "--base-url" in refused.output and len(refused.output.strip().splitlines()) == 1


# -- bounded work ------------------------------------------------------------------------------
LONG = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Count from one to five hundred in words, separated "
                                                                           "by commas."}], "temperature": 0, "max_tokens": 400}


@pytest.fixture(scope="module")
def bounded(smollm2_run_home):
    """A server answering one request at a time, 4 seconds a request, batches of at most 2,000 tokens."""
    process = ServeProcess(smollm2_run_home, "smollm2-135m", "--max-batch", "1", "--batch-wait-ms", "0",
                           "--max-batch-tokens", "2000", "--request-timeout", "4")
    process.wait_ready()
    yield process
    process.stop()


def _work(server: ServeProcess) -> dict:
    return httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=10).json()["work"]


def _work_after(server: ServeProcess, before: dict, batches: int) -> dict:
    """What the model did once `batches` more batches ended (the last stopped at its next token)."""
    deadline = time.monotonic() + 60
    while (work := _work(server))["batches"] < before["batches"] + batches and time.monotonic() < deadline:
        time.sleep(0.2)
    return {key: work[key] - before[key] for key in work}


def test_a_vanished_clients_queued_request_never_runs_and_a_running_one_stops_at_the_next_token(bounded):
    """A long answer holds the model; a second request waits behind it and its client hangs up, then the first's client
    hangs up too: the second never reaches the model, the first stops well before its max_tokens."""
    url, before = f"{bounded.base_url}/chat/completions", _work(bounded)

    def ask(body: dict, wait: float) -> None:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, timeout=httpx.Timeout(10, read=wait))

    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(ask, LONG, 2.5)
        time.sleep(0.7)
        ask({**LONG, "messages": CHAT, "max_tokens": 40}, 0.8)
        holder.result()
    done = _work_after(bounded, before, 1)
    assert done["requests"] == 1 and done["dropped"] == 1 and done["stopped"] == 1
    assert 0 < done["tokens"] < LONG["max_tokens"]
    assert "dropped 1 queued request(s) before their turn" in bounded.output()


def test_a_stream_whose_client_hangs_up_stops_at_the_next_token(bounded):
    before = _work(bounded)
    with httpx.stream("POST", f"{bounded.base_url}/chat/completions", json={**LONG, "stream": True}, timeout=30) as response:
        chunks = []
        for line in response.iter_lines():
            chunks += [line] if line.startswith("data: ") else []
            if len(chunks) == 4:
                break
    done = _work_after(bounded, before, 1)
    assert done["requests"] == done["stopped"] == 1 and 0 < done["tokens"] < LONG["max_tokens"]


def test_a_request_past_its_time_gets_504_and_its_work_stops(bounded):
    before, started = _work(bounded), time.monotonic()
    late = httpx.post(f"{bounded.base_url}/chat/completions", json=LONG, timeout=60)
    assert late.status_code == 504 and time.monotonic() - started < 30
    error = _error(late)
    assert error["code"] == "request_timeout" and error["type"] == "server_error" and "--request-timeout" in error["message"]
    done = _work_after(bounded, before, 1)
    assert done["stopped"] == 1 and done["tokens"] < LONG["max_tokens"]
    with httpx.stream("POST", f"{bounded.base_url}/chat/completions", json={**LONG, "stream": True}, timeout=60) as response:
        events = _sse(response)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "request_timeout"  # a stream: an error event
    assert all(c["choices"][0]["finish_reason"] is None for c in events[:-2])  # cut short, not finished


@pytest.mark.parametrize(("asked", "param"), [({"n": 8, "max_tokens": 300}, "n"),
                                              ({"messages": [{"role": "user", "content": "ACME " * 900}], "max_tokens": 300}, "max_tokens"),
                                              ({"messages": [{"role": "user", "content": "ACME " * 1000}]}, "messages")])
def test_a_request_over_the_batch_token_budget_is_a_400_naming_what_to_lower(bounded, asked, param):
    before = _work(bounded)
    response = httpx.post(f"{bounded.base_url}/chat/completions", json={**LONG, "max_tokens": 128, **asked}, timeout=60)
    error = _error(response)
    assert response.status_code == 400 and error["param"] == param and error["code"] == "batch_tokens_exceeded"
    assert "--max-batch-tokens" in error["message"] and len(error["message"].splitlines()) == 1
    assert _work(bounded)["requests"] == before["requests"]


def test_a_chunked_body_over_the_limit_is_a_413_and_the_server_goes_on(bounded):
    """No Content-Length: the bytes are counted as they arrive."""
    def body():
        for _ in range(41):
            yield b" " * 100_000

    huge = httpx.post(f"{bounded.base_url}/chat/completions", content=body(), headers={"content-type": "application/json"},
                      timeout=60)
    assert huge.status_code == 413 and _error(huge)["code"] == "request_too_large"
    assert httpx.get(f"http://127.0.0.1:{bounded.port}/health").status_code == 200


def test_the_batcher_never_forms_a_batch_over_its_token_budget():
    """Rows x (the longest prompt + the largest max_tokens), padded as the batch runs: what does not fit waits its turn."""
    import asyncio

    from babylon_rl.serve.engine import Batcher, Job, Sampling, batch_tokens

    async def batches() -> list[list[int]]:
        batcher = Batcher(8, 0.01, 64, max_tokens=1000)
        loop = asyncio.get_running_loop()
        sizes = [(200, 1), (200, 1), (200, 1), (200, 1), (450, 1), (100, 2)]  # (prompt tokens, n); max_tokens 100 each
        jobs = [Job(None, None, [0] * prompt, Sampling(1.0, 1.0, n, None, 100), [], loop.create_future())
                for prompt, n in sizes]
        for job in jobs:
            batcher.submit(job)
        jobs[1].cancel()  # its client went away while it waited
        formed = [await batcher._collect() for _ in range(3)]
        assert all(batch_tokens(batch) <= 1000 for batch in formed) and batcher.work.dropped == 1
        return [[jobs.index(job) for job in batch] for batch in formed]

    assert asyncio.run(batches()) == [[0, 2, 3], [4], [5]]  # 3 x 300; 550, and 3 rows x 550 would not fit; 2 rows x 200
