"""A local OpenAI-compatible chat-completions server standing in for a hosted LLM judge.

It reads the trajectory blocks of the judge prompt (`<trajectory id="...">`), scores each
from the last `P&L <number>` visible in it (`expected_score`), and answers in the shape
the judge asked for: {"scores": [{"id", ...}]} for our RULER ids (T1..), ART's
{"scores": [{"trajectory_id", ...}]} for ART's numeric ids. Fault modes simulate what
hosted endpoints do; every request is recorded.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.DOTALL)
PNL = re.compile(r"P&L ([+-]?\d+(?:\.\d+)?)")
WINDOW = re.compile(r'(?:<ground_truth window="|GROUND TRUTH of window )(\d{4}-\d\d-\d\dT\d\d:\d\d)')
# Modes: ok, shuffled, 429 (first `fault_count` requests), 500, timeout, malformed, missing, extra,
# duplicate (the first `fault_count` requests, or every request of `fault_windows`), reject_schema.
FAULTS_ONCE = {"429", "malformed", "missing", "extra", "duplicate"}


def expected_score(pnl: float) -> float:
    return round(0.5 + 0.5 * math.tanh(pnl / 40), 6)


class JudgeServer:
    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.mode = "ok"
        self.fault_count = 1
        self.fault_windows: set[str] | None = None  # restrict faults to these windows (then on every request)
        self.sleep_seconds = 2.0
        self.requests: list[dict] = []
        # When set, every completion's content is reply(request body): a stand-in for a policy endpoint (eval tests).
        self.reply: Callable[[dict], str] | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "JudgeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _faulty(self, number: int, window: str | None) -> bool:
        if self.fault_windows is not None:
            return window in self.fault_windows
        return self.mode not in FAULTS_ONCE or number <= self.fault_count

    def respond(self, body: dict, headers: dict) -> tuple[int, dict | str, dict]:
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        window = (WINDOW.search(prompt) or [None, None])[1]
        with self._lock:
            self.requests.append({"body": body, "prompt": prompt, "window": window})
            number = len(self.requests)
        if self.latency:
            time.sleep(self.latency)
        mode = self.mode if self._faulty(number, window) else "ok"
        if mode == "429":
            return 429, {"error": {"message": "rate limited"}}, {"retry-after-ms": "10"}
        if mode == "500":
            return 500, {"error": {"message": f"server error (saw {headers.get('authorization')})"}}, {"retry-after-ms": "10"}
        if mode == "timeout":
            time.sleep(self.sleep_seconds)
        if mode == "reject_schema" and (body.get("response_format") or {}).get("type") == "json_schema":
            return 400, {"error": {"message": "response_format json_schema is not supported"}}, {}
        return 200, self._completion(body, prompt, mode), {}

    def _completion(self, body: dict, prompt: str, mode: str) -> dict:
        if self.reply is not None:
            return self._message(body, prompt, self.reply(body))
        blocks = BLOCK.findall(prompt)
        art = bool(blocks) and not blocks[0][0].startswith("T")
        key = "trajectory_id" if art else "id"
        scores = []
        for tid, text in blocks:
            pnl = float(PNL.findall(text)[-1]) if PNL.findall(text) else 0.0
            scores.append({key: tid, "explanation": f"P&L {pnl:+.2f}", "score": expected_score(pnl)})
        if mode == "shuffled":
            scores = scores[::-1] if len(scores) % 2 else scores[1:] + scores[:1]
        elif mode == "missing":
            scores = scores[:-1]
        elif mode == "extra":
            scores.append({key: "T99" if not art else "99", "explanation": "invented", "score": 0.5})
        elif mode == "duplicate":
            scores[-1] = dict(scores[0])
        content = "{not json" if mode == "malformed" else json.dumps({"scores": scores})
        return self._message(body, prompt, content)

    @staticmethod
    def _message(body: dict, prompt: str, content: str) -> dict:
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "judge"),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(content) // 4,
                          "total_tokens": len(prompt) // 4 + len(content) // 4}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, *args: object) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload, extra = server.respond(body, {k.lower(): v for k, v in self.headers.items()})
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


if __name__ == "__main__":  # a standalone server for the benchmark: prints its base URL, serves until killed
    import sys

    with JudgeServer(latency=float(sys.argv[1]) if len(sys.argv) > 1 else 0.0) as standalone:
        print(standalone.base_url, flush=True)
        threading.Event().wait()
