"""What the web UI's tests share: a signed-in HTTP client, sign-in links, and Debian's Chromium.

The browser is the system's (``/usr/bin/chromium`` driven by ``/usr/bin/chromedriver``);
nothing downloads a browser or a driver (``SE_OFFLINE``).  Without them the browser tests skip
with that reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hearthnet.testing import MeshNode

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def ui_url(node: MeshNode) -> str:
    return str(json.loads((node.home / "ui.json").read_text())["url"])


def owner_link(node: MeshNode) -> str:
    return str(node.cli_json("ui")["link"])


def person_link(node: MeshNode, name: str, level: str) -> str:
    return str(node.cli_json("ui", "token", "create", "--name", name, "--level", level)["link"])


def token_of(link: str) -> str:
    return link.split("#", 1)[1]


class Ui:
    """An HTTP client signed in with a link, as a page would be (cookie and CSRF token)."""

    def __init__(self, link: str) -> None:
        base = link.split("/login#", 1)[0]
        self.http = httpx.Client(base_url=base, timeout=60.0)
        response = self.http.post("/api/login", json={"token": token_of(link)})
        assert response.status_code == 200, response.text
        page = self.http.get("/ask")
        found = re.search(r'name="hn-csrf" content="([^"]+)"', page.text)
        assert found, page.text[:500]
        self.csrf = found.group(1)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        headers = {"X-CSRF-Token": self.csrf, **kw.pop("headers", {})}
        return self.http.post(path, headers=headers, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def close(self) -> None:
        self.http.close()


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or ``None``."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.access(p, os.X_OK) or shutil.which(p))]
    if missing:
        return (
            f"{' and '.join(missing)} missing: 'make install' (as root) installs chromium and chromium-driver"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@contextmanager
def chromium(width: int = 1200, height: int = 900) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven through the system's chromedriver."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a driver or a browser
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="hn-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def skip_without_browser() -> None:
    reason = browser_missing()
    if reason is not None:
        pytest.skip(reason)
