"""The server's ASGI app: OpenEnv's routes over the session environment, behind a token when
one is set.

OpenEnv's production mode: `/health`, `/schema`, `/metadata` and the WebSocket session route
`/ws`. Its simulation-only HTTP `/reset` and `/step` are left out: each call makes a fresh
environment and closes it, so a reset there would begin an episode no step could ever reach.
"""

from __future__ import annotations

import functools
import hmac
import json
from typing import Any

from fastapi import FastAPI
from openenv.core.env_server.http_server import create_fastapi_app
from starlette.types import ASGIApp, Receive, Scope, Send

from app.env_server.models import SQLAction, SQLObservation, SQLState
from app.env_server.served import ServedRun
from app.env_server.session import SQLSessionEnvironment

ENV_NAME = "rollscope_sql"
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
    if token:
        app.add_middleware(TokenRequired, token=token)
    return app


class TokenRequired:
    """Refuses HTTP requests (401) and WebSocket sessions (closed with 1008, policy violation)
    that do not carry the server's token."""

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
