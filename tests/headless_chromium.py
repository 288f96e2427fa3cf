"""Headless Chromium for the dashboard tests: find it, or install Debian's ``chromium`` once.

The install runs only as root and only where it is allowed: ``CI`` is set (CI runs
``./run.sh test`` on a fresh Debian machine as root) or ``LTR_INSTALL_CHROMIUM=1``. It is
bounded in time (``apt-get update`` and ``apt-get install -y chromium`` share 300 s) and tried
once per machine: the outcome is kept in a stamp file, so a failed attempt is not repeated by
every test run (delete the stamp to try again). A lock keeps parallel test processes from
running apt at the same time. CI may also call it ahead of the tests:
``python tests/headless_chromium.py``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_SECONDS = 300
STAMP = Path(os.environ.get("LTR_CHROMIUM_STAMP", "/var/cache/scarce-ltr/chromium-install.txt"))
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def install_allowed() -> str | None:
    """None when this process may install; otherwise why not."""
    if sys.platform != "linux" or not shutil.which("apt-get"):
        return "not a Debian-like system (no apt-get)"
    if os.geteuid() != 0:
        return "not running as root"
    if not (os.environ.get("CI") or os.environ.get("LTR_INSTALL_CHROMIUM") == "1"):
        return "installing is allowed only when CI or LTR_INSTALL_CHROMIUM=1 is set"
    return None


def ensure_chromium() -> tuple[str | None, str]:
    """``(path, "")`` of a usable chromium, or ``(None, why it is missing)``."""
    path = find_chromium()
    if path:
        return path, ""
    refusal = install_allowed()
    if refusal:
        return None, f"chromium is not installed and {refusal}"
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    with open(STAMP.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits, then finds the outcome
        path = find_chromium()
        if path:
            return path, ""
        if STAMP.is_file():
            return None, f"an earlier install attempt failed (see {STAMP}; delete it to retry)"
        outcome = _apt_install()
        STAMP.write_text(outcome + "\n")
    path = find_chromium()
    return (path, "") if path else (None, f"apt-get install chromium failed: {outcome}")


def _apt_install() -> str:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    deadline = time.monotonic() + INSTALL_SECONDS
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        left = deadline - time.monotonic()
        if left <= 0:
            return f"out of time before {' '.join(command)}"
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} ran past {INSTALL_SECONDS} s"
        except OSError as exc:
            return f"{' '.join(command)}: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            return f"{' '.join(command)} exited {done.returncode}: {tail[0]}"
    return "installed"


def render(
    chromium: str, page: Path, work: Path, *, timeout: float = 120.0
) -> tuple[Path, str, list[str]]:
    """A 1280x2000 screenshot of ``page``, its DOM after load and its console (`dump_dom`), by
    headless Chromium."""
    png = work / "screenshot.png"
    common = [chromium, *FLAGS, f"--user-data-dir={work / 'profile'}"]
    url = page.resolve().as_uri()
    shot = [*common, f"--screenshot={png}", "--window-size=1280,2000", url]
    subprocess.run(shot, capture_output=True, timeout=timeout, check=True)
    dom, console = dump_dom(chromium, page, work, timeout=timeout)
    return png, dom, console


def dump_dom(
    chromium: str, page: Path, work: Path, *, fragment: str = "", timeout: float = 120.0
) -> tuple[str, list[str]]:
    """The DOM of ``page`` after its scripts ran, and every message the page wrote to the
    console (uncaught errors included): Chromium logs each as an ``INFO:CONSOLE`` line on
    stderr under ``--enable-logging=stderr``."""
    command = [chromium, *FLAGS, f"--user-data-dir={work / 'profile'}"]
    url = page.resolve().as_uri() + fragment
    command += ["--enable-logging=stderr", "--v=0", "--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


class _Tags(HTMLParser):
    """Every start tag and its attributes; a script's text is text, never tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    """``[(tag, {attribute: value})]`` of every element of ``html`` (a file or a dumped DOM)."""
    parser = _Tags()
    parser.feed(html)
    parser.close()
    return parser.tags


def external_urls(html: str) -> list[str]:
    """The ``src``/``href`` attributes that point off the page (``http:``, ``https:``, ``//``):
    what a browser would fetch. Strings inside scripts (plotly.js names its web site) are not
    attributes and do not count."""
    found = []
    for _, attrs in tags(html):
        for name in ("src", "href"):
            value = (attrs.get(name) or "").strip()
            if re.match(r"(https?:|//)", value, re.IGNORECASE):
                found.append(value)
    return found


def event_handlers(html: str) -> list[str]:
    """``tag on...=value`` of every inline event handler attribute (``onerror``, ``onload``)."""
    return [
        f"{tag} {name}={value}"
        for tag, attrs in tags(html)
        for name, value in attrs.items()
        if name.startswith("on")
    ]


if __name__ == "__main__":
    found, reason = ensure_chromium()
    print(found or f"no chromium: {reason}")
    sys.exit(0 if found else 1)
