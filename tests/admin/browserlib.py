"""The admin-ui page in a real headless Chromium driven by Selenium, for the browser tests
(tests/admin/test_admin_browser.py, test_admin_history_browser.py): the `Page` helper (waits on
DOM conditions, window.confirm answers, fetch spying) and `start_driver` (used by the `driver`
fixture of conftest.py). Chromium and chromedriver are Debian packages (/usr/bin/chromium,
/usr/bin/chromedriver; tests/run.sh installs them): when they are missing the tests fail, they
do not skip.
"""

import os
import shutil

import pytest

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")
WAIT = 10


def _find_binary(path, name):
    if os.path.exists(path):
        return path
    return shutil.which(name)


def start_driver():
    """A headless Chromium session (the caller quits it)."""
    chromium = _find_binary(CHROMIUM, "chromium")
    chromedriver = _find_binary(CHROMEDRIVER, "chromedriver")
    if not chromium or not chromedriver:
        pytest.fail("the browser tests need Chromium and chromedriver (missing: %s). Install the "
                    "Debian packages: apt-get install chromium chromium-driver "
                    "(tests/run.sh does it)"
                    % ", ".join(p for p, found in ((CHROMIUM, chromium),
                                                   (CHROMEDRIVER, chromedriver)) if not found),
                    pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.fail("selenium is not installed in this Python (%s): pip install -r "
                    "tests/requirements.txt" % e, pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1600,1200", "--disable-gpu"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(chromedriver), options=options)
    d.set_page_load_timeout(WAIT)
    d.set_script_timeout(WAIT)
    return d


class Page:
    """The admin-ui page in the browser."""

    def __init__(self, driver, admin):
        from selenium.webdriver.common.by import By
        self.By = By
        self.d = driver
        self.base = admin.base

    # -- navigation and waiting
    def open(self, route, page):
        """A full load of the page at its path-style URL `route` (under the base path),
        waiting until `page` has rendered."""
        self.d.get("about:blank")
        self.d.get(self.base + route)
        self.wait_loaded(page)

    def wait(self, cond, what, timeout=WAIT):
        from selenium.common.exceptions import (NoSuchElementException,
                                                StaleElementReferenceException)
        from selenium.webdriver.support.ui import WebDriverWait
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05, ignored_exceptions=(
                NoSuchElementException, StaleElementReferenceException)).until(
                    lambda d: cond())
        except Exception as e:
            if type(e).__name__ != "TimeoutException":
                raise
            raise AssertionError("timed out after %ss waiting for %s\nlocation: %s\n#error: %r\n"
                                 "#app: %s" % (timeout, what, self.d.current_url,
                                               self.error_text(), self.app_html()))

    @staticmethod
    def loaded(page):
        return '#app[data-loaded="true"][data-page="%s"]' % page

    def wait_loaded(self, page, timeout=WAIT):
        sel = self.loaded(page)
        self.wait(lambda: self.d.find_elements(self.By.CSS_SELECTOR, sel),
                  "%s (page %r)" % (sel, page), timeout)

    def wait_navigated(self, to_path, page):
        """Waits until the location is `to_path` and `page` has loaded there."""
        self.wait(lambda: self.path() == to_path and self.all(self.loaded(page)),
                  "navigation to %s (page %r)" % (to_path, page))

    def all(self, css):
        return self.d.find_elements(self.By.CSS_SELECTOR, css)

    def one(self, css):
        return self.d.find_element(self.By.CSS_SELECTOR, css)

    def text(self, css):
        return self.one(css).text.strip()

    def visible(self, css):
        """The first displayed element matching css (for buttons shown or hidden by state)."""
        shown = [e for e in self.all(css) if e.is_displayed()]
        assert shown, "no visible element %s (found %d hidden)\n#app: %s" % (
            css, len(self.all(css)), self.app_html())
        return shown[0]

    def error_text(self):
        try:
            return self.d.execute_script(
                "var e = document.getElementById('error'); return e ? e.textContent : null;")
        except Exception:
            return None

    def app_html(self):
        try:
            html = self.d.execute_script(
                "var a = document.getElementById('app'); return a ? a.outerHTML : "
                "document.documentElement.outerHTML;")
        except Exception as e:
            return "<%s>" % e
        return html if len(html) < 4000 else html[:4000] + "..."

    def path(self):
        return self.d.execute_script("return location.pathname + location.hash;")

    # -- window.confirm and fetch spying
    def answer_confirm(self, answer):
        self.d.execute_script(
            "window.__confirms = []; window.confirm = function (m) {"
            " window.__confirms.push(String(m)); return %s; };" % ("true" if answer else "false"))

    def confirms(self):
        return self.d.execute_script("return window.__confirms || [];")

    def spy_fetch(self):
        self.d.execute_script(
            "window.__fetches = []; if (!window.__realFetch) window.__realFetch = window.fetch;"
            "window.fetch = function (input, init) {"
            " var m = (init && init.method) || (input && input.method) || 'GET';"
            " window.__fetches.push([String(m).toUpperCase(), String((input && input.url) || input)]);"
            " return window.__realFetch.apply(this, arguments); };")

    def fetches(self):
        return self.d.execute_script("return window.__fetches || [];")
