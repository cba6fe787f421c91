"""Launch's form: the policy picked first (outside the form, so the form shows only that policy's
fields), then one block per concern, each field with its problem from the last press under it.
A new kind of policy or a new place to run is one more block and one more field of the request.
"""

from __future__ import annotations

import streamlit as st

from app import jobs
from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.render import escape_markdown
from app.dashboard.launch.follow import FOLLOWING
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
    build_spec,
    find_checkpoints,
    queue_run,
    ray_target,
    worker_flags,
)
from app.dashboard.settings import Settings
from rollout_core.settings import DEFAULT_STEP_BUDGET
from storage.engine import StoreError

ERRORS = "ln_errors"
STARTED = "ln_started"


def _problem(field: str) -> None:
    """The field's problem from the last Launch press, in red under it."""
    message = st.session_state.get(ERRORS, {}).get(field)
    if message:
        st.caption(f":red[:material/error: {escape_markdown(message)}]")


def policy_choice(settings: Settings) -> str:
    """The policy select box; its choice decides which fields the form shows."""
    checkpoints = [f"hf:{p}" for p in find_checkpoints(settings.checkpoint_roots)]
    choice: str = st.selectbox(
        "Policy / checkpoint",
        [*SCRIPTED_POLICIES, *checkpoints, OTHER_CHECKPOINT, SERVER],
        key="ln_policy",
    )
    _problem("policy")
    return choice


def _checkpoint_block(settings: Settings) -> None:
    roots = ", ".join(f"`{r}`" for r in settings.checkpoint_roots) or "none configured"
    st.text_input(
        "Checkpoint directory",
        placeholder="a folder with config.json, e.g. /models/ckpt-1000",
        key="ln_checkpoint",
        help="A directory under a checkpoint root (`--checkpoint-root DIR`); the `hf:...` "
        "shown on the Runs page can be pasted as it is.",
    )
    st.caption(f"Checkpoint roots: {roots}")
    _problem("checkpoint")


def _server_block() -> None:
    st.caption("The server, its model, and the name of the key's variable.")
    s1, s2, s3 = st.columns(3)
    with s1:
        st.text_input(
            "Server URL", placeholder="e.g. http://127.0.0.1:8000/v1", key="ln_server_url"
        )
        _problem("server_url")
    with s2:
        st.text_input(
            "Server model", placeholder="e.g. Qwen/Qwen2.5-0.5B-Instruct", key="ln_server_model"
        )
        _problem("server_model")
    with s3:
        st.text_input(
            "API key variable (optional)",
            placeholder="e.g. OPENAI_API_KEY",
            key="ln_api_key_env",
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
    # A placeholder that reads as an example, not as a value already filled in.
    st.text_input(
        "Run name", placeholder="name the new run, e.g. ckpt-1000-demo", key="ln_run_name"
    )
    _problem("run_name")


def _request(choice: str) -> LaunchRequest:
    """The request of the fields shown for `choice`; a hidden field counts for nothing."""
    ss = st.session_state
    server = choice == SERVER
    return LaunchRequest(
        policy=choice,
        checkpoint=ss.get("ln_checkpoint", "") if choice == OTHER_CHECKPOINT else "",
        server_url=ss.get("ln_server_url", "") if server else "",
        model=ss.get("ln_server_model", "") if server else "",
        api_key_env=ss.get("ln_api_key_env", "") if server else "",
        dataset=ss["ln_dataset"],
        run_name=ss["ln_run_name"],
        limit=int(ss["ln_limit"]),
        question_ids=ss["ln_question_ids"],
        samples=int(ss["ln_samples"]),
        step_budget=int(ss["ln_step_budget"]),
        temperature=float(ss["ln_temperature"]),
        seed=int(ss["ln_seed"]),
    )


def _launch(settings: Settings, choice: str) -> None:
    """The Launch button: queue the run and start its worker, or keep each field's problem."""
    st.session_state[ERRORS] = {}
    roots = Roots(settings.checkpoint_roots, settings.dataset_roots)
    ss = st.session_state
    errors: dict[str, str] = {}
    target = None
    try:
        target = ray_target(
            settings.ray_address if ss.get("ln_on_ray") else None,
            workers=int(ss.get("ln_ray_workers", 2)),
            gpus_per_worker=float(ss.get("ln_ray_gpus", 0.0)),
        )
    except LaunchError as exc:
        errors = dict(exc.errors)
    try:
        if errors:  # the other fields' problems too, without queuing the run
            build_spec(_request(choice), roots)
            st.session_state[ERRORS] = errors
            return
        run_id = queue_run(data.writer(), _request(choice), roots)
    except LaunchError as exc:
        st.session_state[ERRORS] = errors | exc.errors
        return
    except StoreError as exc:  # the store refused the writer
        st.session_state[ERRORS] = {FORM: str(exc)}
        return
    pid = jobs.start_worker(settings.store_url, run_id, extra=worker_flags(target))
    data.clear()
    params.write(nav.P_RUN, [str(run_id)])
    st.session_state[FOLLOWING] = run_id
    st.session_state[STARTED] = (run_id, pid)


def show(settings: Settings) -> None:
    """The policy choice, then the form of its fields and the Launch button."""
    choice = policy_choice(settings)
    with st.form("launch"):
        if choice == OTHER_CHECKPOINT:
            _checkpoint_block(settings)
        elif choice == SERVER:
            _server_block()
        _dataset_block(settings)
        _questions_block()
        _sampling_block()
        _ray_block(settings)
        _name_block()
        st.form_submit_button(
            "Launch", icon=":material/rocket_launch:", on_click=_launch, args=(settings, choice)
        )
        _problem(FORM)
    if errors := st.session_state.get(ERRORS):
        st.error(
            f"Not launched: {len(errors)} field{'s' if len(errors) > 1 else ''} to fix "
            "(see above).",
            icon=":material/error:",
        )
    if started := st.session_state.pop(STARTED, None):
        st.toast(f"Run {started[0]} queued; worker pid {started[1]}.")
