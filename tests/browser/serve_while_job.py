"""`python serve_while_job.py STORE PORT FOLDER`: `serve_while` with a job the test steers.

The job writes its pid to FOLDER/started, then waits until FOLDER/finish holds the code to
return. Each Ctrl-C or SIGTERM it takes is written to FOLDER/signals: the first ends it (130
or 143) half a second later, so that a second signal, were one passed on, is counted too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from app.dashboard.serve_while import serve_while


def write_whole(path: Path, text: str) -> None:
    """Write a file the other process polls for: it appears whole or not at all."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def main() -> None:
    store, port, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])

    def job() -> int:
        taken: list[int] = []

        def note(signum: int, _frame: FrameType | None) -> None:
            taken.append(signum)
            with (folder / "signals").open("a") as f:
                f.write(f"{signal.Signals(signum).name}\n")

        signal.signal(signal.SIGINT, note)
        signal.signal(signal.SIGTERM, note)
        write_whole(folder / "started", str(os.getpid()))
        finish = folder / "finish"
        while not taken and not finish.exists():
            time.sleep(0.05)
        if taken:
            time.sleep(0.5)
            return 128 + taken[0]
        return int(finish.read_text())

    sys.exit(serve_while(job, store_url=store, port=port))


if __name__ == "__main__":
    main()
