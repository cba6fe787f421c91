"""Writes `store_0010.db` and `store_0010_reads.json.gz`: a store as rollscope's release at
schema revision 0010 wrote it, and every step as that release read it back.

The migration test (tests/storage/test_migration_plain_text.py) upgrades a copy and checks
every step reads the same. Run it with that release's code on the path, e.g. from a checkout
of commit c20b1ba: `PYTHONPATH=<that checkout> python make_store_0010.py OUT_DIR`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

from rollout_core.records import IterationBatch
from storage.read_models import EpisodeFilter
from storage.store import Store

ODD = 'a\x00b 🎵 \u202eRTL\u202c \u2028 \\ " \n\t é\u0301 <b>x</b>'


def main(out: Path) -> None:
    store_path = out / "store_0010.db"
    store_path.unlink(missing_ok=True)
    cli = [sys.executable, "-m", "app.cli"]
    common = ["--dataset", "demo", "--store", str(store_path)]
    subprocess.run([*cli, "run", "--policy", "oracle", "--name", "oracle", *common], check=True)
    subprocess.run(
        [*cli, "run", "--policy", "random", "--name", "random", "--limit", "40",
         "--samples", "2", "--step-budget", "4", *common],
        check=True,
    )  # fmt: skip
    subprocess.run(
        [*cli, "fork", "--run", "random", "--at", "first-error", "--policy", "oracle",
         "--name", "random-fork", "--store", str(store_path)],
        check=True,
    )  # fmt: skip
    store = Store(str(store_path))
    _odd_run(store)
    reads = {}
    for run in store.list_runs():
        for d in store.iter_episode_details(run.id, flt=EpisodeFilter(finished_only=False)):
            reads[str(d.summary.id)] = [
                {k: getattr(s, k) for k in ("step_no", "prompt", "raw_output", "action",
                                            "argument", "observation", "error", "reward")}
                for s in d.steps
            ]  # fmt: skip
    with gzip.open(out / "store_0010_reads.json.gz", "wt", encoding="utf-8") as f:
        json.dump(reads, f, ensure_ascii=False)
    store.close()
    subprocess.run(["sqlite3", str(store_path), "VACUUM"], check=True)


def _odd_run(store: Store) -> None:
    """Prompts the runner never writes: a chat template's text, an empty prompt, a window."""
    # The release's own record builders, from its checkout on the path.
    from tests.storage.store_builders import finish, spec, start, step

    run_id = store.create_run(spec("odd"), episodes_planned=3)
    raws = [f"QUERY SELECT '{ODD}'", "SAMPLE t", f"ANSWER {ODD}"]
    obs = [f"Error: no such column: {ODD}", "a | b", "Answer submitted: incorrect."]
    template = [
        "<|im_start|>user\nQ?<|im_end|>\n"
        + "".join(f"<|im_start|>assistant\n{r}<|im_end|>\n<|im_start|>user\n{o}<|im_end|>\n"
                  for r, o in zip(raws[:n], obs[:n], strict=True))
        + "<|im_start|>assistant\n"
        for n in range(3)
    ]  # fmt: skip
    window = [json.dumps([{"role": "user", "content": f"turn {n} {ODD}"}]) for n in range(3)]
    with store.sink(run_id) as sink:
        for qid, prompts in (("template", template), ("window", window), ("empty", ["[]"] * 3)):
            steps = [
                dataclasses.replace(
                    step(qid, 0, n, error=obs[n - 1][7:] if n == 1 else None, done=n == 3),
                    prompt=p, raw_output=raws[n - 1], observation=obs[n - 1],
                    argument=raws[n - 1].split(" ", 1)[1],
                )
                for n, p in enumerate(prompts, start=1)
            ]  # fmt: skip
            sink.write(
                IterationBatch(
                    started=[start(qid)], steps=steps, finished=[finish(qid, 0, "wrong", 0.0, 3)]
                )
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
