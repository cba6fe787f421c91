"""A real OpenAI-compatible server for the tests (`transformers serve` on a tiny checkpoint, on
CPU, on loopback) and a small TCP proxy in front of it that drops, delays or answers for it.

Everything here listens on 127.0.0.1 only and is bounded: the proxy stops after its
connection budget, each piped connection after an idle timeout, the server with its fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

SERVER_START_SECONDS = 120.0
"""transformers and FastAPI import in a few seconds alone; a busy 2-core machine takes longer."""


def serving_copy(checkpoint: Path, folder: Path) -> Path:
    """The checkpoint with `do_sample: true` in its generation config.

    `transformers serve` samples only when the model's generation config says so: a request's
    `temperature` alone is ignored (it sets `do_sample=False` for temperature 0 but never
    True), so without this every request would be greedy.
    """
    target = folder / checkpoint.name
    shutil.copytree(checkpoint, target)
    config_path = target / "generation_config.json"
    config = json.loads(config_path.read_text())
    config["do_sample"] = True
    config_path.write_text(json.dumps(config, indent=2))
    return target


@dataclass
class ServedModel:
    """`transformers serve CHECKPOINT` on a loopback port; `stop()` kills it, `start()` again."""

    checkpoint: Path
    port: int
    log: Path
    extra_args: list[str] = field(default_factory=list)
    """More `transformers serve` flags (e.g. `--continuous-batching`)."""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """The model id the server lists: the checkpoint path as given."""
        return str(self.checkpoint)

    def start(self) -> None:
        exe = Path(sys.executable).parent / "transformers"
        command = [str(exe), "serve", str(self.checkpoint), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--device", "cpu", "--log-level", "warning"]
        command += self.extra_args
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.wait_ready()

    def wait_ready(self) -> None:
        """Poll /v1/models until it lists the model; fail with the server's log otherwise."""
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as reply:
                    ids = [m["id"] for m in json.load(reply)["data"]]
                if self.model in ids:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"transformers serve did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Kill the server (SIGKILL: no goodbye to clients) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None


Mode = Literal["pass", "drop", "delay", "status"]


@dataclass
class FaultProxy:
    """A loopback TCP proxy to `target_port`. `arm(mode, count)` makes the next `count`
    connections misbehave, then it passes traffic through again:

    - `drop`: accept and close at once (the client sees the connection reset);
    - `delay`: hold the connection `delay_seconds` before piping it;
    - `status`: answer an HTTP error itself (`status_line`, e.g. `429 Too Many Requests`).
    """

    target_port: int
    max_connections: int = 2000
    idle_seconds: float = 60.0
    port: int = 0
    opened: int = 0
    """Connections accepted so far."""
    max_open: int = 0
    """Most connections open at once."""
    faults: int = 0
    """Connections that misbehaved so far."""
    _mode: Mode = "pass"
    _left: int = 0
    delay_seconds: float = 0.0
    status_line: str = "503 Service Unavailable"
    retry_after: str | None = None
    _open: int = 0
    _piped: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: socket.socket | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> FaultProxy:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def arm(self, mode: Mode, count: int, **options: object) -> None:
        """Make the next `count` connections misbehave. Open connections are closed first, so
        that a client's idle keep-alive connection cannot slip past the fault."""
        with self._lock:
            self._mode, self._left = mode, count
            for key, value in options.items():
                setattr(self, key, value)
            piped = list(self._piped)
        for sock in piped:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.close()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stopped.is_set() and self.opened < self.max_connections:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.opened += 1
                mode = self._mode if self._left > 0 else "pass"
                if mode != "pass":
                    self._left -= 1
                    self.faults += 1
            threading.Thread(target=self._handle, args=(client, mode), daemon=True).start()

    def _handle(self, client: socket.socket, mode: Mode) -> None:
        with self._lock:
            self._open += 1
            self.max_open = max(self.max_open, self._open)
        try:
            if mode == "drop":
                # Linger 0: close with a reset, as a crashed server or a dropped route looks.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if mode == "status":
                self._answer(client)
                return
            if mode == "delay" and self._stopped.wait(self.delay_seconds):
                return
            with self._lock:
                self._piped.add(client)
            self._pipe(client)
        finally:
            client.close()
            with self._lock:
                self._open -= 1
                self._piped.discard(client)

    def _answer(self, client: socket.socket) -> None:
        client.settimeout(5)
        try:
            client.recv(65536)  # the request's head (its body may follow; not needed)
        except OSError:
            return
        body = json.dumps({"error": {"message": f"proxy says {self.status_line}"}}).encode()
        head = f"HTTP/1.1 {self.status_line}\r\nContent-Type: application/json\r\n"
        if self.retry_after is not None:
            head += f"Retry-After: {self.retry_after}\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        client.sendall(head.encode() + body)

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            return  # the server is down: the client sees its connection closed
        with upstream:
            back = threading.Thread(target=_copy, args=(upstream, client, self.idle_seconds))
            back.start()
            _copy(client, upstream, self.idle_seconds)
            back.join(self.idle_seconds)


def _copy(source: socket.socket, sink: socket.socket, idle_seconds: float) -> None:
    """Bytes from `source` to `sink` until either side closes or stays idle too long."""
    source.settimeout(idle_seconds)
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
