"""What the browser tests share: Debian's Chromium (the system binary, no download), a
screenshot helper (``DESK_SCREENSHOTS=DIR`` saves each named page there, for
docs/screenshots), and logging in. The fixtures (``browser``, ``desk_server``) are in
``conftest.py``."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = os.environ.get("DESK_SCREENSHOTS")
VIEWPORT = {"width": 1280, "height": 860}


def shot(page: Page, name: str) -> None:
    """Save a screenshot of ``page`` as ``NAME.png`` when ``DESK_SCREENSHOTS`` is set."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def log_in(browser: Browser, url: str, email: str, password: str) -> Page:
    """A page in a fresh browser context (its own cookies), logged in as ``email``."""
    page = browser.new_context(viewport=VIEWPORT).new_page()  # type: ignore[arg-type]
    page.goto(f"{url}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("main form button[type=submit]")
    expect(page.locator("header .who")).to_be_visible()
    return page
