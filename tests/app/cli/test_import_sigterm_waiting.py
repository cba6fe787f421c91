"""A follow started before the trainer made its folder, stopped while it waits: SIGTERM (a job
scheduler's stop) ends it as Ctrl-C does, with a line and exit 130, and makes no store."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_while_a_follow_waits_for_the_trainers_folder_ends_it_with_a_line(
    tmp_path: Path, stop: signal.Signals
) -> None:
    dump, db = tmp_path / "checkpoints" / "rollouts", tmp_path / "s.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "import", str(dump), "--name", "live", "--store",
         str(db), "--follow", "--poll", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        began = time.monotonic()
        # Under load the follower takes seconds to start.
        while not any("waiting for the trainer" in line for line in said):
            assert time.monotonic() - began < 60, f"no wait in 60 s: {''.join(said)}"
            assert proc.poll() is None, "".join(said)
            time.sleep(0.1)
        proc.send_signal(stop)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(said)
    assert proc.returncode == 130, err
    assert "stopped before any rollout file came; nothing imported" in err
    assert "Traceback" not in err
    assert not db.exists()
