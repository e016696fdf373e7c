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


def log_in(page: Any, dashboard: str, tenant: str, user: str) -> None:
    """Log in to the dashboard at ``dashboard`` (noauth: the tenant and user)."""
    page.goto(dashboard + "/login")
    page.fill("#in-tenant", tenant)
    page.fill("#in-user", user)
    page.click("button:has-text('Log in')")
    page.wait_for_selector(".topbar .who")


# Elements wider than the page, or whose content is cut or scrolls sideways
# (a long path in a table cell or a log block): what "no horizontal overflow"
# means for a page of the dashboard.
_OVERFLOW = """() => {
  const root = document.documentElement;
  const found = [];
  if (root.scrollWidth > root.clientWidth) {
    found.push(`the page: ${root.scrollWidth}px wide in ${root.clientWidth}px`);
  }
  for (const element of document.querySelectorAll("main *")) {
    // the topology graph scrolls on purpose; inputs scroll their own text
    if (element.closest("svg, .graph")
        || ["INPUT", "SELECT", "TEXTAREA"].includes(element.tagName)) {
      continue;
    }
    if (element.scrollWidth > element.clientWidth + 1 && element.clientWidth > 0
        && getComputedStyle(element).overflowX !== "visible") {
      found.push(`${element.tagName.toLowerCase()}${element.id ? "#" + element.id : ""}` +
                 `.${element.className}: ${element.scrollWidth}px in ${element.clientWidth}px`);
    }
    const box = element.getBoundingClientRect();
    if (box.right > root.clientWidth + 1) {
      found.push(`${element.tagName.toLowerCase()}.${element.className} ends at ${box.right}px`);
    }
  }
  return found;
}"""


def overflow(page: Any) -> list[str]:
    """What overflows sideways on ``page`` (empty: nothing)."""
    return page.evaluate(_OVERFLOW)
