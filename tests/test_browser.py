"""The built site as a reader sees it: every page of ``_build/html`` opened in headless Chromium.

Run by ``make site-check`` after the build (``pytest -m browser``); the unit tests skip it. The
browser is offline on purpose: every host but localhost resolves to nothing, so a page that needs
a CDN shows it. Each page fails on

    math      a formula left as raw TeX, or a MathJax error (an undefined macro)
    console   an error in the browser console (a JavaScript error, a failed request)
    offline   a request to another host for something the page needs
    images    a broken image
    links     an internal link to a missing page or anchor
    overflow  horizontal scrolling at 400 px (the page is wider than a phone)
    sidebar   the sidebar button at 400 px does not open the table of contents
    eqno      a key equation eq-N-k whose displayed number is not (N.k)

Without Chromium, its driver or Selenium the test is skipped with the reason (``-rs`` prints it).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_build" / "html"
PHONE = 400
BROWSERS = 2
PAGES = (
    sorted(
        p.relative_to(SITE).as_posix()
        for p in SITE.rglob("*.html")
        if not p.relative_to(SITE).parts[0].startswith(("_", "."))
        and p.name not in ("genindex.html", "search.html")
    )
    if SITE.exists()
    else []
)
KEY_EQ_RE = re.compile(r"^equation-eq-(\d+|[A-Ca-c])-(\d+)$")


def _browser_or_skip():
    """A headless Chromium through Selenium, or a skip that says what is missing."""
    try:
        from selenium import webdriver
    except ImportError:
        pytest.skip(
            "Selenium is not installed (pip install selenium); the browser test did not run"
        )
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.skip(
            "no Chromium or chromedriver on this machine (Debian: apt install chromium "
            "chromium-driver); the browser test did not run"
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # offline: every host but localhost resolves to nothing
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost",
        # a phone's width: the overflow and sidebar checks need it, the others do not mind, and
        # one width means one layout per page (resizing re-lays out the whole page)
        f"--window-size={PHONE},900",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = webdriver.ChromeService(executable_path=driver)
    opts.page_load_strategy = "eager"  # return at DOMContentLoaded; MathJax is awaited below
    return webdriver.Chrome(options=opts, service=service)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a page loads about 50 files

    def log_message(self, *args):
        pass


def _serve(folder: Path):
    """Serve ``folder`` on a free localhost port; yield its base URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def server():
    if not PAGES:
        pytest.skip("no built site in _build/html (run `make book` first)")
    yield from _serve(SITE)


@pytest.fixture(scope="module")
def browsers(server):
    """Two browsers (the pages are split between them: one per CPU core of a small machine)."""
    drivers = [_browser_or_skip() for _ in range(BROWSERS)]
    yield drivers
    for d in drivers:
        d.quit()


# --- links and anchors, read from the HTML files (no browser needed) ------------------------------


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids, self.images = [], set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])


@functools.cache
def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def missing_images(page: str, site: Path = SITE) -> list[str]:
    """Local images of ``page`` whose file is missing or empty (the browser checks the others)."""
    here = site / page
    bad = []
    for src in _parse(here).images:
        if urlparse(src).scheme in ("", "file"):
            target = (here.parent / unquote(urldefrag(src)[0])).resolve()
            if not target.is_file() or target.stat().st_size == 0:
                bad.append(src)
    return bad


def broken_links(page: str, site: Path = SITE) -> list[str]:
    """Internal links of ``page`` whose target file or anchor does not exist."""
    here = site / page
    bad = []
    for href in _parse(here).hrefs:
        url = urlparse(href)
        if url.scheme or url.netloc or href.startswith(("mailto:", "javascript:")):
            continue
        path, frag = urldefrag(unquote(href))
        target = (here.parent / path).resolve() if path else here
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            bad.append(href)
        elif frag and target.suffix == ".html" and frag not in _parse(target).ids:
            bad.append(href)
    return bad


# --- what the browser sees ------------------------------------------------------------------------

_WAIT_FOR_MATH = """
const done = arguments[arguments.length - 1];
const mj = window.MathJax;
if (!document.querySelector('.math')) { done('none'); }
else if (!mj || !mj.startup) { done('no MathJax'); }
else { mj.startup.promise.then(() => done('ok'), (e) => done('error: ' + e)); }
"""

_PAGE_FACTS = """
const facts = {};
facts.raw_math = [...document.querySelectorAll('.math')]
  .filter(e => !e.querySelector('mjx-container'))
  .filter(e => /\\\\[(\\[]|\\$\\$|\\\\begin/.test(e.textContent))
  .map(e => e.textContent.trim().slice(0, 60));
facts.math_errors = [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
  .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80));
facts.broken_images = [...document.images]
  .filter(i => i.complete && i.naturalWidth === 0).map(i => i.getAttribute('src'));
facts.eqno = [...document.querySelectorAll('div.math[id^="equation-"]')].map(d => {
  const n = d.querySelector('.eqno');
  return [d.id, n ? n.textContent.replace(/[#¶\\s]/g, '') : ''];
});
return facts;
"""

_OVERFLOW = """
const w = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth <= w + 1) return [w, w, []];  // fits: nothing to name
const wide = [...document.querySelectorAll('body *')].filter(e => {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.right <= w + 1) return false;
  for (let p = e.parentElement; p; p = p.parentElement) {   // inside its own scroll box: fine
    const s = getComputedStyle(p);
    const boxed = ['auto', 'scroll', 'hidden'].includes(s.overflowX);
    if (boxed && p.getBoundingClientRect().right <= w + 1) return false;
  }
  return true;
}).map(e => e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : '')
   + ': ' + (e.textContent || '').trim().slice(0, 40));
return [document.documentElement.scrollWidth, w, wide.slice(0, 3)];
"""

_SIDEBAR = """
// the button is what is tested, not its 0.3 s slide: open without the animation, on the
// sidebar alone (a rule for every element restyles the whole page: a sixth of the test's time)
const bar = document.querySelector('#pst-primary-sidebar, .bd-sidebar-primary');
if (bar) bar.style.transition = 'none';
const toggle = [...document.querySelectorAll('.primary-toggle')]
  .find(e => e.getBoundingClientRect().width > 0);
if (!toggle) return 'no sidebar button visible';
toggle.click();
return null;
"""

_SIDEBAR_OPEN = """
const bar = document.querySelector('#pst-primary-sidebar, .bd-sidebar-primary');
if (!bar) return 'no sidebar';
const r = bar.getBoundingClientRect();
const s = getComputedStyle(bar);
const open = r.width > 150 && r.left >= -1 && r.right > 150 && s.visibility !== 'hidden';
const where = `left ${Math.round(r.left)}, width ${Math.round(r.width)}`;
return open ? null : `sidebar stays closed (${where})`;
"""


def page_problems(driver, base: str, page: str, site: Path = SITE) -> dict[str, list[str]]:
    """What fails on one page of ``site`` served at ``base``, by check (only the failing ones)."""
    driver.get_log("browser")  # drop what earlier pages left
    driver.get_log("performance")
    driver.get(f"{base}/{page}")
    driver.set_script_timeout(30)
    math_state = driver.execute_async_script(_WAIT_FOR_MATH)
    facts = driver.execute_script(_PAGE_FACTS)
    found: dict[str, list[str]] = {
        k: []
        for k in ("math", "console", "offline", "images", "links", "overflow", "sidebar", "eqno")
    }
    if math_state not in ("ok", "none"):
        found["math"].append(f"MathJax: {math_state}")
    found["math"] += [f"raw TeX: {t}" for t in facts["raw_math"][:3]]
    found["math"] += [f"MathJax error: {t}" for t in facts["math_errors"][:3]]
    for entry in driver.get_log("browser"):
        if entry["level"] == "SEVERE":
            found["console"].append(entry["message"][:160])
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if url.startswith("http") and urlparse(url).hostname not in ("localhost", "127.0.0.1"):
                found["offline"].append(url[:120])
    found["images"] = sorted(set(facts["broken_images"]) | set(missing_images(page, site)))
    found["links"] = broken_links(page, site)
    for ident, shown in facts["eqno"]:
        m = KEY_EQ_RE.match(ident)
        if m and shown != f"({m.group(1).upper()}.{m.group(2)})":
            found["eqno"].append(f"{ident} shows {shown or 'no number'}")
    scroll_w, client_w, wide = driver.execute_script(_OVERFLOW)
    if scroll_w > client_w + 1:
        found["overflow"].append(f"page is {scroll_w} px wide at {client_w} px: {wide}")
    if problem := open_sidebar(driver):
        found["sidebar"].append(problem)
    return {k: v for k, v in found.items() if v}


def open_sidebar(driver) -> str | None:
    """Click the sidebar button of the page in ``driver``; None once the table of contents is
    open, else what went wrong."""
    problem = driver.execute_script(_SIDEBAR)
    if problem is None:  # clicked: the sidebar opens at once (transitions are off)
        deadline = time.monotonic() + 2.0
        while (problem := driver.execute_script(_SIDEBAR_OPEN)) and time.monotonic() < deadline:
            time.sleep(0.05)
    return problem


def test_every_page_works_offline_on_desktop_and_phone(browsers, server):
    from concurrent.futures import ThreadPoolExecutor
    from queue import SimpleQueue

    # one task per page, largest first; a task borrows whichever browser is free (there are as
    # many threads as browsers, so one always is), and neither browser waits for the other
    idle = SimpleQueue()
    for driver in browsers:
        idle.put(driver)

    def check(page):
        driver = idle.get()
        try:
            return page_problems(driver, server, page)
        finally:
            idle.put(driver)

    order = sorted(PAGES, key=lambda p: (SITE / p).stat().st_size, reverse=True)
    with ThreadPoolExecutor(len(browsers)) as pool:
        results = dict(zip(order, pool.map(check, order), strict=True))
    failures = {p: results[p] for p in PAGES if results[p]}
    counts = {}
    for problems in failures.values():
        for k in problems:
            counts[k] = counts.get(k, 0) + 1
    summary = f"{len(PAGES) - len(failures)} of {len(PAGES)} pages pass; failing checks: {counts}"
    print(summary)
    detail = "\n".join(
        f"{page}:\n" + "\n".join(f"  {k}: {v[:3]}" for k, v in problems.items())
        for page, problems in failures.items()
    )
    assert not failures, summary + "\n" + detail


BROKEN_PAGE = """<!DOCTYPE html><html><head>
<script src="https://cdn.example.org/mathjax.js"></script></head><body>
<p><span class="math">\\(x^2\\)</span></p>
<div class="math" id="equation-eq-3-1"><span class="eqno">(7)</span></div>
<img src="missing.png"><a href="nowhere.html">a link</a><a href="#no-anchor">an anchor</a>
<div style="width: 900px">too wide for a phone</div>
</body></html>"""


def test_the_checks_catch_a_broken_page(tmp_path):
    """Each check can fail: a page that breaks every rule fails every check."""
    (tmp_path / "broken.html").write_text(BROKEN_PAGE, encoding="utf-8")
    driver = _browser_or_skip()
    try:
        base = next(served := _serve(tmp_path))
        found = page_problems(driver, base, "broken.html", tmp_path)
        next(served, None)
    finally:
        driver.quit()
    assert set(found) == {
        "math",
        "console",
        "offline",
        "images",
        "links",
        "overflow",
        "sidebar",
        "eqno",
    }, found
    assert found["eqno"] == ["equation-eq-3-1 shows (7)"]
    assert sorted(found["links"]) == ["#no-anchor", "nowhere.html"]
