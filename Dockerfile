# rollscope on a GPU box: CUDA torch (bf16 on the GPU), the dashboard by default, and
# `rollscope run` as a batch job in the same image.
#
#   docker build -t rollscope .
#   docker run --gpus all -p 8501:8501 -v rollscope:/data rollscope              # dashboard
#
# The dashboard binds 0.0.0.0 (a published port needs it), so it starts read-only: no Launch,
# no Cancel, whoever reaches the port. Behind an authenticating proxy, turn them on with
#   docker run ... -e ROLLSCOPE_ALLOW_WRITES=1 rollscope    (or append the CMD with --allow-writes)
#   docker run --gpus all -v rollscope:/data -v /models:/models:ro rollscope \
#       run --policy hf:/models/checkpoint-1000 --dataset demo --store /data/rollscope.db
#   docker run -p 8000:8000 -v rollscope:/data rollscope env-server --dataset demo --name env \
#       --host 0.0.0.0 --allow-remote --token "$TOKEN"                    # the environment server
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    HF_HUB_DISABLE_PROGRESS_BARS=1 \
    ROLLSCOPE_HOME=/data/.rollscope \
    ROLLSCOPE_STORE=sqlite:////data/rollscope.db

# PyPI's Linux torch wheel is the CUDA build (its CUDA libraries come as pip packages);
# installed first and on its own layer so the project's own layer stays small.
ARG TORCH_VERSION=2.13.0
RUN pip install "torch==${TORCH_VERSION}"

WORKDIR /opt/rollscope
COPY pyproject.toml README.md ./
COPY app ./app
COPY rollout_core ./rollout_core
COPY storage ./storage
# The project itself, from this directory: its dependencies are pinned by pyproject.toml's ranges.
# PostgreSQL (several writers), Ray (fan-out) and OpenEnv (`rollscope env-server`) come with
# it; vLLM pins its own torch, so an image for `vllm:` installs `.[vllm]` over this one's torch
# in a derived image.
# hadolint ignore=DL3013
RUN pip install ".[postgres,ray,env]" \
    && useradd --create-home --uid 1000 rollscope \
    && mkdir -p /data \
    && chown rollscope:rollscope /data

USER 1000:1000
VOLUME ["/data"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health')"]

ENTRYPOINT ["rollscope"]
# Read-only by default (the first line it prints says so); ROLLSCOPE_ALLOW_WRITES=1 enables Launch.
CMD ["dashboard", "--host", "0.0.0.0", "--port", "8501", "--checkpoint-root", "/data"]
