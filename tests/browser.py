"""Headless Chromium for UI tests: render a page (JavaScript run) to its DOM and a screenshot."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

# .ci/run installs Chromium and sets this, so a missing browser fails CI instead of skipping.
REQUIRE = "LAUNCHER_REQUIRE_BROWSER"


def chromium_or_skip() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get(REQUIRE):
        pytest.fail(f"{REQUIRE} is set but Chromium is not installed (apt-get install chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium; .ci/run does)")


def _chromium(binary: str, url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1600,1400",
            "--virtual-time-budget=20000",
            *flags,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def render(binary: str, url: str, screenshot: Path, wanted: tuple[str, ...], attempts: int = 3) -> str:
    """The page's DOM once it holds every `wanted` text (a single-page app fills in after its API
    calls; tried `attempts` times), and a screenshot of it."""
    for _ in range(attempts):
        dom = _chromium(binary, url, "--dump-dom").stdout
        if all(text in dom for text in wanted):
            break
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    _chromium(binary, url, f"--screenshot={screenshot}")
    return dom
