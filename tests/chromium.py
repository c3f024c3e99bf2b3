"""A headless Debian Chromium driven over the DevTools protocol, for the browser tests.

The protocol runs over ``--remote-debugging-pipe`` (file descriptors 3 and 4, NUL-separated JSON), so no
websocket client and no downloaded browser build are needed: only ``/usr/bin/chromium``.
"""

from __future__ import annotations

import base64
import contextlib
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

CHROMIUM = os.environ.get("TRACEKIT_CHROMIUM", "/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
    "--remote-debugging-pipe",
)

# All text of the page, through shadow roots and same-origin iframes (TensorBoard is Polymer + Angular,
# the profiler plugin a React app in an iframe). `root` defaults to the document.
DEEP_TEXT_JS = """
(() => {
  const out = [];
  const walk = (root) => {
    const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = w.nextNode(); n; n = w.nextNode()) {
      const p = n.parentElement;
      if (p && ['SCRIPT', 'STYLE', 'NOSCRIPT'].includes(p.tagName)) continue;
      const t = n.textContent.trim();
      if (t) out.push(t);
    }
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.tagName === 'IFRAME') { try { if (el.contentDocument) walk(el.contentDocument); } catch (e) {} }
    }
  };
  walk(document);
  return out.join('\\n');
})()
"""


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser with one page. Use as a context manager."""

    def __init__(self, binary: str = CHROMIUM, timeout_s: float = 30.0) -> None:
        self.binary = binary
        self.timeout_s = timeout_s
        self._id = 0
        self._buf = b""
        self.session: str | None = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="tracekit-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()

        def fds() -> None:  # in the child: the pipe's ends become fds 3 and 4 (moved up first: no clash)
            r, w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(resp_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [self.binary, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=fds,
        )
        os.close(cmd_r)
        os.close(resp_w)
        try:
            targets = self._call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            attached = self._call("Target.attachToTarget", targetId=page["targetId"], flatten=True)
            self.session = attached["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self._call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._resp_r)
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- protocol ------------------------------------------------------------------------------------
    def _send(self, method: str, params: dict, session: str | None) -> int:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        return self._id

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._resp_r], [], [], left)[0]:
                raise BrowserError("no answer from chromium in time")
            chunk = os.read(self._resp_r, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def _call(self, method: str, session: str | None = None, **params: Any) -> dict:
        want = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout_s
        while True:
            msg = self._read(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, **params: Any) -> dict:
        """A DevTools command on the page."""
        return self._call(method, self.session, **params)

    # -- page helpers --------------------------------------------------------------------------------
    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self) -> str:
        """All visible-ish text of the page, through shadow roots and iframes."""
        return self.eval(DEEP_TEXT_JS) or ""

    def wait_for_text(self, needles: list[str], timeout_s: float = 60.0) -> str:
        """Poll the page text until every needle is in it; return the text, or raise naming the missing."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.5)
        missing = [n for n in needles if n not in text]
        raise BrowserError(f"page never showed {missing}; it shows:\n{text[:3000]}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
