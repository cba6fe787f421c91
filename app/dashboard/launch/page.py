"""Launch: start a small batch from a form; a worker process writes it to the store.

The form is a few blocks, each rendering its fields with their problems underneath; a new kind
of policy or a new place to run is one more block and one more field of the request.
"""

from __future__ import annotations

import streamlit as st

from app import jobs
from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.header import header
from app.dashboard.components.render import escape_markdown, show_error, show_text
from app.dashboard.launch.form import (
    BUILTIN_DATASETS,
    FORM,
    MAX_QUESTIONS,
    MAX_RAY_WORKERS,
    MAX_SAMPLES,
    MAX_STEP_BUDGET,
    OTHER_CHECKPOINT,
    SCRIPTED_POLICIES,
    SERVER,
    LaunchError,
    LaunchRequest,
    Roots,
    find_checkpoints,
    queue_run,
    ray_target,
    worker_flags,
)
from app.dashboard.settings import Settings
from rollout_core.settings import DEFAULT_STEP_BUDGET
from storage import lifecycle
from storage.engine import StoreError

_LOG_TAIL_BYTES = 4000
_ERRORS = "ln_errors"
_STARTED = "ln_started"


def _log_tail(run_id: int) -> str:
    path = jobs.worker_log_path(run_id)
    if not path.is_file():
        return ""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
        return fh.read().decode("utf-8", errors="replace")


def _follow(run_id: int) -> None:
    run = data.store().get_run(run_id)  # read now: the progress bar follows the worker
    if run is None:
        st.warning(f"No run with id {run_id} in this store.")
        return
    done = run.episodes_finished / run.episodes_planned if run.episodes_planned else 0.0
    st.progress(
        min(1.0, done),
        text=f"{run.name} (#{run.id}): {run.status}, "
        f"{run.episodes_finished}/{run.episodes_planned} episodes",
    )
    exit_code = jobs.worker_exit_code(run_id)
    if run.status in lifecycle.ACTIVE and exit_code is not None:
        st.error(
            f"The worker exited (code {exit_code}) while the run was {run.status}; see its log."
        )
        show_text(_log_tail(run_id))
        _stop_following(run_id)
        return
    if run.status in lifecycle.ACTIVE:
        if st.button("Cancel run", icon=":material/cancel:", key=f"cancel_{run_id}"):
            try:
                jobs.cancel_run(data.writer(), run_id)
                st.toast(f"Asked run {run_id} to stop.")
            except (ValueError, RuntimeError, OSError) as exc:
                show_error(str(exc))
    elif run.status == "completed":
        st.success(
            f"Completed: accuracy {run.accuracy or 0:.1%} over {run.episodes_finished} episodes."
        )
    else:
        st.error(f"Run ended {run.status}.")
        if run.error:
            show_text(run.error)
    st.page_link(nav.EPISODES, label="Episodes of this run", query_params={nav.P_RUN: str(run_id)})
    tail = _log_tail(run_id)
    if tail:
        with st.expander("Worker log"):
            show_text(tail)
    if run.status not in lifecycle.ACTIVE:
        _stop_following(run_id)


def _stop_following(run_id: int) -> None:
    # A full rerun drops the fragment's timer once the run has ended.
    if st.session_state.get("ln_following") == run_id:
        st.session_state["ln_following"] = None
        st.rerun(scope="app")


# -- the form ------------------------------------------------------------------------------------


def _problem(field: str) -> None:
    """The field's problem from the last Launch press, in red under it."""
    message = st.session_state.get(_ERRORS, {}).get(field)
    if message:
        st.caption(f":red[:material/error: {escape_markdown(message)}]")


def _policy_block(settings: Settings) -> None:
    checkpoints = [f"hf:{p}" for p in find_checkpoints(settings.checkpoint_roots)]
    st.selectbox(
        "Policy / checkpoint",
        [*SCRIPTED_POLICIES, *checkpoints, OTHER_CHECKPOINT, SERVER],
        key="ln_policy",
    )
    _problem("policy")
    roots = ", ".join(f"`{r}`" for r in settings.checkpoint_roots) or "none configured"
    st.text_input(
        f"Checkpoint directory (for {OTHER_CHECKPOINT!r})",
        placeholder="/models/ckpt-1000 or hf:/models/ckpt-1000",
        key="ln_checkpoint",
        help="A directory under a checkpoint root (`--checkpoint-root DIR`); the `hf:...` "
        "shown on the Runs page can be pasted as it is.",
    )
    st.caption(f"Checkpoint roots: {roots}")
    _problem("checkpoint")


def _server_block() -> None:
    st.caption(f"For {SERVER!r}: the server, its model, and the name of the key's variable.")
    s1, s2, s3 = st.columns(3)
    with s1:
        st.text_input("Server URL", placeholder="http://127.0.0.1:8000/v1", key="ln_server_url")
        _problem("server_url")
    with s2:
        st.text_input(
            "Server model", placeholder="Qwen/Qwen2.5-0.5B-Instruct", key="ln_server_model"
        )
        _problem("server_model")
    with s3:
        st.text_input(
            "API key variable (optional)", placeholder="OPENAI_API_KEY", key="ln_api_key_env"
        )
        _problem("api_key_env")


def _ray_block(settings: Settings) -> None:
    if not settings.ray_address:  # started without --ray-address: runs play on this host
        return
    st.checkbox(f"Fan out on the Ray cluster at {settings.ray_address}", key="ln_on_ray")
    r1, r2 = st.columns(2)
    with r1:
        st.number_input(f"Ray workers (1-{MAX_RAY_WORKERS})", value=2, step=1, key="ln_ray_workers")
        _problem("ray_workers")
    with r2:
        st.number_input("GPUs per Ray worker", 0.0, 64.0, value=0.0, step=0.5, key="ln_ray_gpus")
    _problem("ray")


def _dataset_block(settings: Settings) -> None:
    builtin = ", ".join(f"`{d}`" for d in BUILTIN_DATASETS)
    st.text_input("Dataset", value="demo", key="ln_dataset")
    if settings.dataset_roots:
        roots = ", ".join(f"`{escape_markdown(str(r))}`" for r in settings.dataset_roots)
        st.caption(f"{builtin}, or a questions file under {roots}.")
    else:
        st.caption(f"{builtin}; start the dashboard with `--dataset-root DIR` for your own files.")
    _problem("dataset")


def _questions_block() -> None:
    c1, c2 = st.columns(2)
    with c1:
        st.number_input(f"Number of questions (1-{MAX_QUESTIONS})", value=5, step=1, key="ln_limit")
        _problem("limit")
    with c2:
        st.text_input("Or question ids (comma separated)", key="ln_question_ids")
        _problem("question_ids")


def _sampling_block() -> None:
    # No min/max on the inputs: the browser would refuse an out-of-range value silently, with
    # the reason in a tooltip; the form checks them and says why under the field instead.
    cols = st.columns(4)
    for col, (field, label, value, step) in zip(
        cols,
        (
            ("samples", f"Samples per question (1-{MAX_SAMPLES})", 1, 1),
            ("step_budget", f"Step budget (1-{MAX_STEP_BUDGET})", DEFAULT_STEP_BUDGET, 1),
            ("temperature", "Temperature (0-2)", 0.0, 0.1),
            ("seed", "Seed", 0, 1),
        ),
        strict=True,
    ):
        with col:
            st.number_input(label, value=value, step=step, key=f"ln_{field}")
            _problem(field)


def _name_block() -> None:
    st.text_input("Run name", placeholder="ckpt-1000-demo", key="ln_run_name")
    _problem("run_name")


def _request() -> LaunchRequest:
    ss = st.session_state
    return LaunchRequest(
        policy=ss["ln_policy"],
        checkpoint=ss["ln_checkpoint"],
        server_url=ss["ln_server_url"],
        model=ss["ln_server_model"],
        api_key_env=ss["ln_api_key_env"],
        dataset=ss["ln_dataset"],
        run_name=ss["ln_run_name"],
        limit=int(ss["ln_limit"]),
        question_ids=ss["ln_question_ids"],
        samples=int(ss["ln_samples"]),
        step_budget=int(ss["ln_step_budget"]),
        temperature=float(ss["ln_temperature"]),
        seed=int(ss["ln_seed"]),
    )


def _launch(settings: Settings) -> None:
    """The Launch button: queue the run and start its worker, or keep each field's problem."""
    st.session_state[_ERRORS] = {}
    roots = Roots(settings.checkpoint_roots, settings.dataset_roots)
    ss = st.session_state
    try:
        target = ray_target(
            settings.ray_address if ss.get("ln_on_ray") else None,
            workers=int(ss.get("ln_ray_workers", 2)),
            gpus_per_worker=float(ss.get("ln_ray_gpus", 0.0)),
        )
        run_id = queue_run(data.writer(), _request(), roots)
    except LaunchError as exc:
        st.session_state[_ERRORS] = exc.errors
        return
    except StoreError as exc:  # the store refused the writer
        st.session_state[_ERRORS] = {FORM: str(exc)}
        return
    pid = jobs.start_worker(settings.store_url, run_id, extra=worker_flags(target))
    data.clear()
    params.write(nav.P_RUN, [str(run_id)])
    st.session_state["ln_following"] = run_id
    st.session_state[_STARTED] = (run_id, pid)


notices = header("Launch")
settings = data.settings()
if settings.read_only:
    st.info("This dashboard is read-only; launching runs is switched off.")
    st.stop()

with st.form("launch"):
    _policy_block(settings)
    _server_block()
    _dataset_block(settings)
    _questions_block()
    _sampling_block()
    _ray_block(settings)
    _name_block()
    st.form_submit_button(
        "Launch", icon=":material/rocket_launch:", on_click=_launch, args=(settings,)
    )
    _problem(FORM)
if errors := st.session_state.get(_ERRORS):
    st.error(
        f"Not launched: {len(errors)} field{'s' if len(errors) > 1 else ''} to fix (see above).",
        icon=":material/error:",
    )
if started := st.session_state.pop(_STARTED, None):
    st.toast(f"Run {started[0]} queued; worker pid {started[1]}.")

followed = params.get_id(nav.P_RUN, "a run id")
params.show_notices(notices)
if followed is not None:
    st.subheader("Run")
    live = st.session_state.get("ln_following") == followed or (
        (run := data.store().get_run(followed)) is not None
        and run.status in lifecycle.ACTIVE
        and jobs.worker_exit_code(followed) is None
    )
    if live:
        st.session_state["ln_following"] = followed
    st.fragment(run_every=1.0 if live else None)(_follow)(followed)
