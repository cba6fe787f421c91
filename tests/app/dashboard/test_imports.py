"""The dashboard process never imports torch or transformers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_dashboard_never_imports_torch(tmp_path: Path) -> None:
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
import os
from tests.support.dashboard_stores import build_fixture_store
fx = build_fixture_store(Path({str(tmp_path)!r}))
os.environ["ROLLSCOPE_STORE"] = fx.url
from streamlit.testing.v1 import AppTest
main = str(Path({str(Path(__file__).resolve().parents[3])!r}) / "app/dashboard/main.py")
for page, query in [(None, {{}}), ("episodes/page.py", {{}}),
                    ("replay/page.py", {{"episode": str(fx.query_episode)}}),
                    ("compare/page.py", {{"run": [str(fx.run_a), str(fx.run_b)]}}),
                    ("launch/page.py", {{}})]:
    at = AppTest.from_file(main, default_timeout=60).run()
    if page:
        at.switch_page(page)
    at.query_params.update(query)
    at.run()
    assert not at.exception, (page, [e.value for e in at.exception])
import app.jobs, app.dashboard.serve, app.dashboard.launch.form, app.dashboard.replay.requery
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("HEAVY", heavy)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout
