"""A real headless browser for the tests: Debian's chromium driven through the DevTools protocol
over ``--remote-debugging-pipe`` (file descriptors 3 and 4, NUL-separated JSON; the standard
library only, no websocket client, no downloaded browser).

:func:`open_page` loads a file and returns what a person checking it would see: every request
the page made (:attr:`Page.requests`), its console messages, log entries and uncaught exceptions
(:attr:`Page.errors`), and the value of a JavaScript expression evaluated after the load event
(:meth:`Page.evaluate`). :func:`chromium` is the browser's path, or None (the tests skip, saying
how to install it; .ci/run installs it).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--remote-debugging-pipe"]
INSTALL = "apt-get install -y chromium"


def chromium() -> str | None:
    """The chromium executable ($BBB_CHROMIUM, else chromium or chromium-browser on PATH), or None."""
    given = os.environ.get("BBB_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One page of a chromium process (see the module's notes); a context manager."""

    def __init__(self, exe: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="bbb-chromium-")
        r_cmd, w_cmd = os.pipe()  # we write commands -> the browser's fd 3
        r_evt, w_evt = os.pipe()  # the browser's fd 4 -> we read
        for fd in (r_cmd, w_evt):  # the child's ends above 4, so that the moves below cannot collide
            high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
            os.close(fd)
            if fd == r_cmd:
                r_cmd = high
            else:
                w_evt = high
        self.log = Path(self.profile) / "stderr.log"
        with self.log.open("wb") as err:
            # bash moves the pipe ends to the fds 3 and 4 that --remote-debugging-pipe reads and writes
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec "$0" "$@" 3<&{r_cmd} 4>&{w_evt} {r_cmd}<&- {w_evt}>&-', exe, *FLAGS,
                 f"--user-data-dir={self.profile}/profile", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, pass_fds=(r_cmd, w_evt))
        os.close(r_cmd)
        os.close(w_evt)
        self.w, self.r = w_cmd, r_evt
        self.buf = b""
        self.next_id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    # -- the protocol -------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                err = self.log.read_text(errors="replace") if self.log.exists() else ""
                raise RuntimeError(f"chromium closed the DevTools pipe: {err[-2000:]}")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile are kept in :attr:`events`)."""
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The next event ``method`` (already received or still to come)."""
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def drain(self, seconds: float = 0.3) -> None:
        """Keep the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read_message(deadline))
        except TimeoutError:
            pass

    # -- a page -------------------------------------------------------------------------------

    def open(self, path: Path) -> Page:
        """Attach to the first page, enable what is recorded, load ``path``, wait for its load event."""
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_for("Page.loadEventFired")
        self.drain()
        return self

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    @property
    def requests(self) -> list[str]:
        """Every URL the page requested (the document itself included)."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    @property
    def errors(self) -> list[str]:
        """Console errors and warnings, error log entries (a failed load...), uncaught exceptions."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description")))
                                                               for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')}")
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - the browser is gone either way
            self.proc.kill()
            self.proc.wait()
        finally:
            for fd in (self.w, self.r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_page(path: Path, exe: str | None = None, timeout: float = 60.0) -> Page:
    """A chromium page with ``path`` loaded (close it: ``with open_page(p) as page: ...``)."""
    page = Page(exe or chromium() or "chromium", timeout)
    try:
        return page.open(path)
    except BaseException:
        page.close()
        raise
