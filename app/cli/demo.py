"""`rollscope demo`: train tiny checkpoints offline and fill a store with their rollouts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.output import USER_ERRORS, err, fail, one_line, out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from app.demo.grpo import GrpoSettings
from rollout_core.settings import MAX_WHOLE


def demo(
    store: StoreOpt = DEFAULT_STORE,
    work_dir: Annotated[Path, typer.Option("--dir", help="Checkpoints go here.")] = Path("demo"),
    steps: Annotated[int, typer.Option(help="Training steps of the tiny model.")] = 500,
    samples: Annotated[int, typer.Option(help="Samples per held-out question.")] = 4,
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.")] = None,
    grpo_steps: Annotated[
        int, typer.Option(help="GRPO steps of the training run (TRL); 0 for none.")
    ] = GrpoSettings().steps,
    serve_after: Annotated[
        bool, typer.Option("--serve", help="Serve the dashboard during the build and after.")
    ] = False,
    port: Annotated[int, typer.Option(help="The dashboard's port, with --serve.")] = 8501,
) -> None:
    """Train tiny demo checkpoints offline and fill the store with their rollouts."""
    from app import batch
    from app.demo.pipeline import DEFAULT_SAVE_AT, DemoSettings, build_demo
    from app.render import runs_table

    if steps < max(DEFAULT_SAVE_AT[:-1]) + 1:
        fail(f"--steps must be more than {max(DEFAULT_SAVE_AT[:-1])}, got {steps}")
    if samples < 1:
        fail(f"--samples must be at least 1, got {samples}")
    if grpo_steps < 0:
        fail(f"--grpo-steps must be 0 (no training run) or more, got {grpo_steps}")
    for name, value in (("--steps", steps), ("--samples", samples), ("--grpo-steps", grpo_steps)):
        if value > MAX_WHOLE:  # the store's steps and counts are 32 bits
            fail(f"{name} must be at most {MAX_WHOLE:,}, got {value:,}")
    save_at = (*DEFAULT_SAVE_AT[:-1], steps)
    settings = DemoSettings(
        work_dir=work_dir,
        steps=steps,
        save_at=save_at,
        samples=samples,
        threads=threads,
        grpo=GrpoSettings(steps=grpo_steps) if grpo_steps else None,
    )

    def build() -> None:
        st = open_store(store)
        try:
            report = build_demo(st, settings, log=lambda line: err.print(line))
        except batch.Cancelled as exc:
            fail(str(exc), code=130)
        except USER_ERRORS as exc:
            fail(one_line(exc))
        out.print(runs_table(st.list_runs()))
        out.print(f"demo ready in {report.seconds['total']:.0f} s: store {store}")
        st.close()

    if not serve_after:
        build()
        return
    from app.dashboard.serve_while import serve_while

    open_store(store).close()  # made and upgraded here, before the dashboard reads it
    url = f"http://127.0.0.1:{port}"
    out.print(f"dashboard: {url} (it shows each run as the demo plays it)")

    def build_in_child() -> int:
        try:
            build()
        except typer.Exit as exc:
            return exc.exit_code
        out.print(f"dashboard: {url} (Ctrl-C stops it)")
        return 0

    code = serve_while(
        build_in_child, store_url=store, port=port, checkpoint_roots=[work_dir.resolve()]
    )
    raise typer.Exit(code)
