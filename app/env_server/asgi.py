"""The server's ASGI app: OpenEnv's routes over the session environment, behind a token when
one is set.

OpenEnv's production mode: `/health`, `/schema`, `/metadata` and the WebSocket session route
`/ws`, and rollscope's `POST /trainer-scores`. OpenEnv's simulation-only HTTP `/reset` and
`/step` are left out: each call makes a fresh environment and closes it, so a reset there would
begin an episode no step could ever reach.
"""

from __future__ import annotations

import functools
import hmac
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import WSErrorCode, WSErrorResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.env_server.models import (
    RESUMED_PATH,
    SCORES_PATH,
    SQLAction,
    SQLObservation,
    SQLState,
    TrainerResumed,
    TrainerScores,
)
from app.env_server.served import ServedRun
from app.env_server.session import SQLSessionEnvironment

ENV_NAME = "rollscope_sql"
SESSION_PATH = "/ws"
OPEN_PATHS = frozenset({"/health"})
"""Answered without the token: a load balancer's probe carries none."""


def build_app(served: ServedRun, *, max_sessions: int, token: str | None = None) -> FastAPI:
    """The app serving `served`'s run; with `token`, every other route wants
    `Authorization: Bearer <token>`."""
    app: FastAPI = create_fastapi_app(
        functools.partial(SQLSessionEnvironment, served),
        SQLAction,
        SQLObservation,
        max_concurrent_envs=max_sessions,
        env_name=ENV_NAME,
        state_cls=SQLState,
        mode="production",
    )

    @app.post(SCORES_PATH, tags=["rollscope"])
    def trainer_scores(body: TrainerScores) -> dict[str, int]:
        """Record a trainer's advantages and reward functions' values on the run's episodes,
        named by question and sample index; `scored` says how many it found."""
        scored = served.record_trainer_scores(body.scores)
        return {"scored": scored, "unknown": len(body.scores) - scored}

    @app.post(RESUMED_PATH, tags=["rollscope"])
    def trainer_resumed(body: TrainerResumed) -> dict[str, int]:
        """Mark the run's episodes of the step a resumed trainer begins at and later, which
        it plays again, as replaced; `marked` says how many."""
        return {"marked": served.mark_replayed(body.step)}

    app.add_exception_handler(RequestValidationError, _refused_body)
    app.add_middleware(ObjectMessagesOnly)
    app.add_middleware(QuietOnceGone)
    if token:
        app.add_middleware(TokenRequired, token=token)
    return app


async def _refused_body(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each problem of a body, without the values it refused: FastAPI's own
    answer echoes them, and a NaN or an infinity in one cannot be written as JSON (a 500)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in errors]
    return JSONResponse(status_code=422, content={"detail": detail})


class _SessionMiddleware:
    """Middleware for the WebSocket session route alone: every other request passes as is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or scope["path"] != SESSION_PATH:
            await self.app(scope, receive, send)
        else:
            await self.session(scope, receive, send)

    async def session(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class ObjectMessagesOnly(_SessionMiddleware):
    """Answers a session message that is JSON but not an object (`null`, a list, a number),
    or a binary frame, with an error, and the session goes on: OpenEnv's `/ws` handler reads
    every message as an object in a text frame and closes the session, losing the episode in
    play, on any other."""

    async def session(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def objects_only() -> Message:
            while True:
                message = await receive()
                if (problem := _refused(message)) is None:
                    return message
                error = WSErrorResponse(
                    data={"message": problem, "code": WSErrorCode.VALIDATION_ERROR}
                )
                await send({"type": "websocket.send", "text": error.model_dump_json()})

        await self.app(scope, objects_only, send)


class QuietOnceGone(_SessionMiddleware):
    """Drops what a session's handler raises once its connection is gone: a server stopping
    closes its sessions, and OpenEnv's handler, still answering, raised on each closed socket,
    which uvicorn logged as the application's error (a traceback a session on every stop).
    The session's episode ends `abandoned` all the same (the session's close)."""

    async def session(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False

        async def watched_receive() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "websocket.disconnect"
            return message

        async def watched_send(message: Message) -> None:
            nonlocal gone
            try:
                await send(message)
            except Exception:  # the server's own: the socket is closed or closing
                gone = True
                raise

        try:
            await self.app(scope, watched_receive, watched_send)
        except Exception:
            if not gone:
                raise


def _refused(message: Message) -> str | None:
    """Why a received WebSocket message is no object in a text frame; None for any other
    message (invalid JSON is OpenEnv's to answer)."""
    if message["type"] != "websocket.receive":
        return None
    if message.get("text") is None:
        return "a message is a JSON object in a text frame, not a binary frame"
    try:
        value = json.loads(message["text"])
    except ValueError:
        return None
    if isinstance(value, dict):
        return None
    return f'a message is a JSON object ({{"type": "step", "data": ...}}), not {_json_kind(value)}'


def _json_kind(value: object) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number"


class TokenRequired:
    """Refuses HTTP requests (401) and WebSocket sessions (closed with 1008, policy violation,
    before they are accepted: the client sees its handshake refused with 403) that do not
    carry the server's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "token required"})
            return
        body = json.dumps({"detail": "send the server's token: Authorization: Bearer <token>"})
        headers: list[Any] = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body.encode()})
