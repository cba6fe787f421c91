"""A fake OpenAI-compatible chat server on loopback whose replies a test writes.

`transformers serve` (`tests.support.serving`) is the real server; this one answers in
milliseconds with exactly the body a test needs: a scripted agent, or a malformed reply no
real server would send on purpose. It serves `GET /models` and `POST /chat/completions`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = dict[str, Any] | bytes
"""A JSON reply, or a raw body sent as `text/html` with status 200."""

SCRIPT = ("DESCRIBE singer", "QUERY SELECT COUNT(*) FROM singer", "ANSWER 5")
"""The default agent: its Nth reply in an episode is the Nth line (the last one repeats)."""


def chat_completion(
    content: Any, *, model: str = "fake", usage: Any = None, **choice: Any
) -> dict[str, Any]:
    """A chat-completion body with one choice holding `content` (any JSON value)."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                **choice,
            }
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


class FakeChatServer:
    """Serves `model`; each chat request is answered by `answer(request_body)` (by default
    the reply `SCRIPT` gives after as many assistant turns as the request holds)."""

    def __init__(self, model: str = "fake", script: Sequence[str] = SCRIPT) -> None:
        self.model = model
        self.script = tuple(script)
        self.answer: Callable[[dict[str, Any]], Answer] = self.scripted
        self.chat_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="fake-chat-server"
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeChatServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def scripted(self, request: dict[str, Any]) -> Answer:
        """The default answer: `script_text` in a well-formed reply."""
        return chat_completion(self.script_text(request), model=self.model)

    def script_text(self, request: dict[str, Any]) -> str:
        """The script's line for a request holding N assistant turns: its Nth (or its last)."""
        turns = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        return self.script[min(turns, len(self.script) - 1)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read the requests, not a log."""

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    listed = {"id": server.model, "object": "model", "owned_by": "tests"}
                    self._send(200, {"object": "list", "data": [listed]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(size))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                elif request.get("model") != server.model:
                    self._send(404, {"error": {"message": f"model {request.get('model')!r}"}})
                else:
                    with server._lock:
                        server.chat_requests.append(request)
                    self._send(200, server.answer(request))

            def _send(self, status: int, answer: Answer) -> None:
                raw = isinstance(answer, bytes)
                body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if raw else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
