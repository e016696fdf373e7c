"""Debian's chromium driven by Playwright, for the browser tests.

Without chromium (``/usr/bin/chromium``, or ``$FORNACE_CHROMIUM``) or the
playwright package a test skips -- a failure under FORNACE_REQUIRE_SERVICES=1.
Playwright never downloads a browser here: it launches the system's.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any, Iterator

from services import require

CHROMIUM = os.environ.get("FORNACE_CHROMIUM", "/usr/bin/chromium")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (a Playwright ``Browser``), closed afterwards."""
    require(f"chromium ({CHROMIUM})", os.access(CHROMIUM, os.X_OK) or bool(
        shutil.which(CHROMIUM)))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require("the playwright package", False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()
