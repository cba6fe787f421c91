"""Launch: start a small batch from a form; a worker process writes it to the store."""

from __future__ import annotations

import streamlit as st

from app import jobs
from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.render import show_error, show_text
from app.dashboard.launch import (
    MAX_QUESTIONS,
    MAX_RAY_WORKERS,
    MAX_SAMPLES,
    MAX_STEP_BUDGET,
    SCRIPTED_POLICIES,
    LaunchError,
    LaunchRequest,
    find_checkpoints,
    queue_run,
    ray_target,
    worker_flags,
)
from rollout_core.settings import DEFAULT_STEP_BUDGET
from storage import lifecycle
from storage.engine import StoreError

_OTHER = "other checkpoint directory..."
_SERVER = "OpenAI-compatible server..."
_LOG_TAIL_BYTES = 4000


def _log_tail(run_id: int) -> str:
    path = jobs.worker_log_path(run_id)
    if not path.is_file():
        return ""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
        return fh.read().decode("utf-8", errors="replace")


def _follow(run_id: int) -> None:
    run = data.get_run_uncached(run_id)
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


st.title("Launch")
settings = data.settings()
if settings.read_only:
    st.info("This dashboard is read-only; launching runs is switched off.")
    st.stop()

checkpoints = [f"hf:{p}" for p in find_checkpoints(settings.checkpoint_roots)]
with st.form("launch"):
    policy_choice = st.selectbox(
        "Policy / checkpoint", [*SCRIPTED_POLICIES, *checkpoints, _OTHER, _SERVER]
    )
    other = st.text_input(
        "Checkpoint directory (for the other-directory option)", placeholder="/models/ckpt-1000"
    )
    # The OpenAI-compatible server option: its URL, model, and the name of the key's variable.
    s1, s2, s3 = st.columns(3)
    server_url = s1.text_input("Server URL", placeholder="http://127.0.0.1:8000/v1")
    server_model = s2.text_input("Server model", placeholder="Qwen/Qwen2.5-0.5B-Instruct")
    api_key_env = s3.text_input("API key variable (optional)", placeholder="OPENAI_API_KEY")
    dataset = st.text_input("Dataset (`demo` or a questions file path)", value="demo")
    c1, c2 = st.columns(2)
    limit = c1.number_input("Number of questions", 1, MAX_QUESTIONS, value=5, step=1)
    question_ids = c2.text_input("Or question ids (comma separated)")
    c1, c2, c3, c4 = st.columns(4)
    samples = c1.number_input("Samples per question", 1, MAX_SAMPLES, value=1, step=1)
    budget = c2.number_input("Step budget", 1, MAX_STEP_BUDGET, value=DEFAULT_STEP_BUDGET, step=1)
    temperature = c3.number_input("Temperature", 0.0, 2.0, value=0.0, step=0.1)
    seed = c4.number_input("Seed", 0, value=0, step=1)
    on_ray, ray_workers, ray_gpus = False, 2, 0.0
    if settings.ray_address:  # started with --ray-address: the run may fan out there
        on_ray = st.checkbox(f"Fan out on the Ray cluster at {settings.ray_address}")
        r1, r2 = st.columns(2)
        ray_workers = int(r1.number_input("Ray workers", 1, MAX_RAY_WORKERS, value=2, step=1))
        ray_gpus = float(r2.number_input("GPUs per Ray worker", 0.0, 64.0, value=0.0, step=0.5))
    run_name = st.text_input("Run name", placeholder="ckpt-1000-demo")
    submitted = st.form_submit_button("Launch", icon=":material/rocket_launch:")

if submitted:
    policy = f"hf:{other.strip()}" if policy_choice == _OTHER else policy_choice
    if policy_choice == _SERVER:
        policy = f"openai:{server_url.strip()}"
    request = LaunchRequest(
        policy=policy,
        dataset=dataset,
        run_name=run_name,
        limit=int(limit),
        question_ids=question_ids,
        samples=int(samples),
        step_budget=int(budget),
        temperature=float(temperature),
        seed=int(seed),
        model=server_model,
        api_key_env=api_key_env,
    )
    try:
        target = ray_target(
            settings.ray_address if on_ray else None, workers=ray_workers, gpus_per_worker=ray_gpus
        )
        run_id = queue_run(data.writer(), request, settings.checkpoint_roots)
    except (LaunchError, StoreError) as exc:  # StoreError: the store refused the writer
        show_error(str(exc))
    else:
        pid = jobs.start_worker(settings.store_url, run_id, extra=worker_flags(target))
        data.clear()
        params.put(nav.P_RUN, run_id)
        st.session_state["ln_following"] = run_id
        st.toast(f"Run {run_id} queued; worker pid {pid}.")

followed = params.get_int(nav.P_RUN)
if followed is not None:
    st.subheader("Run")
    live = st.session_state.get("ln_following") == followed or (
        (run := data.get_run_uncached(followed)) is not None
        and run.status in lifecycle.ACTIVE
        and jobs.worker_exit_code(followed) is None
    )
    if live:
        st.session_state["ln_following"] = followed
    st.fragment(run_every=1.0 if live else None)(_follow)(followed)
