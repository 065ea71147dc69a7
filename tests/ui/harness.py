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
from collections.abc import Callable, Iterator
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


def wait(driver: Any, condition: Callable[[Any], Any], timeout: float = 30, what: str = "") -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)
    except TimeoutException:
        screenshot(driver, "timeout")
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}") from None


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def text_of(driver: Any, selector: str) -> str:
    return "\n".join(e.text for e in css(driver, selector))


def sign_in(driver: Any, link: str) -> None:
    """Open ``link``; when the browser is signed in already, the page asks first: confirm."""
    driver.get("about:blank")  # from /login itself, the link would only change the fragment
    driver.get(link)

    def landed_or_asked(d: Any) -> str | None:
        from selenium.common.exceptions import StaleElementReferenceException

        if d.current_url.endswith("/ask"):
            return "landed"
        try:
            box = css(d, "#login-confirm")
            return "asked" if box and box[0].is_displayed() else None
        except StaleElementReferenceException:  # the page moved on to Ask meanwhile
            return None

    if wait(driver, landed_or_asked, what="the sign-in to land on Ask or ask first") == "asked":
        css(driver, "#login-switch")[0].click()
        wait(driver, lambda d: d.current_url.endswith("/ask"), what="the sign-in to land on Ask")


def fetch(driver: Any, method: str, path: str, body: Any = None, *, csrf: bool = True) -> dict[str, Any]:
    """A request made by the page itself (same origin, its cookie): status and JSON body."""
    script = """
        const [method, path, body, withCsrf, done] = arguments;
        const meta = document.querySelector('meta[name="hn-csrf"]');
        const headers = {"Content-Type": "application/json"};
        if (withCsrf && meta) headers["X-CSRF-Token"] = meta.content;
        fetch(path, {method, headers, body: body === null ? undefined : JSON.stringify(body)})
          .then(async (r) => done({status: r.status, body: await r.text()}))
          .catch((e) => done({status: -1, body: String(e)}));
    """
    return dict(driver.execute_async_script(script, method, path, body, csrf))


def owner_signed_in(driver: Any, node: MeshNode, path: str) -> None:
    """The browser on ``path`` of ``node``'s UI, signed in as its owner (signing in only when it
    is not already: a scenario may have signed in as someone else, signed out, or not run)."""
    driver.get(ui_url(node) + path)
    session = fetch(driver, "GET", "/api/session")
    if session["status"] != 200 or json.loads(session["body"]).get("level") != "anchor":
        sign_in(driver, owner_link(node))
