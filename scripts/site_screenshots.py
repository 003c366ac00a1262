"""The README's two pictures of the site: a chapter at 1280 px, and at 400 px with the table of
contents open. Made from the built site (``make book`` first) in the offline headless Chromium
of the browser test, so that they show what that test checks.

    .venv/bin/python scripts/site_screenshots.py [chapters/19_attention.html]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_browser import SITE, _browser_or_skip, _serve, open_sidebar  # noqa: E402


def main(page: str = "chapters/19_attention.html") -> None:
    served = _serve(SITE)
    base = next(served)
    driver = _browser_or_skip()
    try:
        for width, height, name, with_sidebar in (
            (1280, 800, "site-desktop-1280.png", False),
            (400, 720, "site-phone-400-sidebar.png", True),
        ):
            driver.set_window_size(width, height)
            driver.get(f"{base}/{page}")
            driver.execute_async_script(
                "const done = arguments[0];"
                "window.MathJax.startup.promise.then(() => document.fonts.ready).then(done);"
            )
            if with_sidebar and (problem := open_sidebar(driver)):
                raise SystemExit(f"the sidebar did not open: {problem}")
            # the screenshot is of the viewport: set the page's inner size, not the window's
            inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
            driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
            out = ROOT / "docs" / name
            driver.save_screenshot(str(out))
            print(f"{out.relative_to(ROOT)}: {page} at {width} px")
    finally:
        driver.quit()
        next(served, None)


if __name__ == "__main__":
    main(*sys.argv[1:])
