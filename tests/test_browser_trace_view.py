"""The annotated trace in TensorBoard's trace viewer (catapult, as bundled by torch-tb-profiler), offline.

The plugin's Trace view cannot draw offline (docs/tensorboard.md): its page waits for Google Charts and
its trace_embedding.html loads the HTML-imports polyfill from a CDN. This test serves the plugin's own
trace_embedding.html and trace_viewer_full.html from localhost with that polyfill taken from its npm
package (webcomponents.js 0.7.24, the version the page names), embeds it the way the plugin does (an
iframe that answers 'ready' with the trace), and checks what catapult's importer made of the trace:
GIVEN the sync probe annotated by `tracekit annotate`
THEN the GPU process has a thread "tracekit idle gaps" holding one slice per gap and cause piece, and the
import raises no error and no warning that the original trace does not raise too.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch_tb_profiler

from tests.chromium import CHROMIUM, Chromium
from tracekit.api import annotate
from tracekit.export.annotate import CATEGORY, TRACK_NAME

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "fixtures" / "h200_probe"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
STATIC = Path(torch_tb_profiler.__file__).parent / "static"
POLYFILL_CDN = "https://cdnjs.cloudflare.com/ajax/libs/webcomponentsjs/0.7.24/webcomponents.min.js"
POLYFILL_NPM = "webcomponents.js@0.7.24"

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not installed (apt-get install chromium)"
)

# The plugin's TraceView: an iframe on trace_embedding.html; when it says 'ready', post it the trace.
INDEX = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="trace_embedding.html" style="border:0;width:100vw;height:100vh"></iframe>
<script>
window.addEventListener('message', (e) => {
  if ((e.data || {}).msg !== 'ready') return;
  fetch('trace.json').then((r) => r.text()).then((t) =>
    document.getElementById('f').contentWindow.postMessage({msg: 'data', data: t, name: 'trace'}, '*'));
});
</script></body></html>
"""

MODEL_JS = """
(() => {
  const d = document.getElementById('f').contentDocument;
  const v = d && d.getElementById('trace-viewer');
  if (!v || !v.model) return null;
  const threads = [];
  for (const p of v.model.getAllProcesses())
    for (const t of Object.values(p.threads))
      threads.push([String(p.pid), t.name, t.sliceGroup.slices.length]);
  const errors = Array.from(d.querySelectorAll('tr-ui-b-overlay')).filter((o) => o.visible)
    .map((o) => o.textContent);
  return {threads, errors, warnings: v.model.importWarnings.map((w) => w.message)};
})()
"""


@pytest.fixture(scope="module")
def polyfill(tmp_path_factory) -> Path:
    """webcomponents.min.js 0.7.24 from its npm package (cached in tests/artifacts/)."""
    cached = ARTIFACTS / "webcomponents-0.7.24.min.js"
    if cached.is_file():
        return cached
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm not installed: cannot fetch the webcomponents.js polyfill the trace viewer needs")
    tmp = tmp_path_factory.mktemp("npm")
    proc = subprocess.run(
        [npm, "pack", POLYFILL_NPM, "--silent"], cwd=tmp, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        pytest.skip(f"npm pack {POLYFILL_NPM} failed (no registry access?): {proc.stderr.strip()[-300:]}")
    with tarfile.open(tmp / proc.stdout.strip().splitlines()[-1]) as tar:
        data = tar.extractfile("package/webcomponents.min.js").read()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return cached


def load_in_trace_viewer(site: Path, trace_json: bytes, shot: Path | None = None) -> dict:
    (site / "trace.json").write_bytes(trace_json)
    srv = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", str(site)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        port = int(srv.stdout.readline().split(" port ")[1].split()[0])
        with Chromium() as browser:
            browser.goto(f"http://127.0.0.1:{port}/index.html")
            deadline = time.monotonic() + 60
            model = None
            while model is None and time.monotonic() < deadline:
                time.sleep(0.5)
                model = browser.eval(MODEL_JS)
            if shot is not None:
                browser.screenshot(shot)
                print(f"screenshot: {shot}")
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    assert model is not None, "the trace viewer never built a model"
    return model


def test_annotated_trace_opens_in_the_plugins_trace_viewer(tmp_path, polyfill):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(STATIC / "trace_viewer_full.html", site)
    embedding = (STATIC / "trace_embedding.html").read_text(encoding="utf-8")
    assert POLYFILL_CDN in embedding
    (site / "trace_embedding.html").write_text(embedding.replace(POLYFILL_CDN, "webcomponents.min.js"))
    shutil.copy(polyfill, site / "webcomponents.min.js")
    (site / "index.html").write_text(INDEX)

    out = tmp_path / "sync.annotated.pt.trace.json.gz"
    annotate(PROBE / "sync.pt.trace.json.gz", out)
    annotated_json = gzip.decompress(out.read_bytes())
    ours = annotated_json.count(f'"cat":"{CATEGORY}"'.encode())

    model = load_in_trace_viewer(site, annotated_json, ARTIFACTS / "trace_viewer_annotated.png")
    original = load_in_trace_viewer(site, gzip.decompress((PROBE / "sync.pt.trace.json.gz").read_bytes()))

    assert model["errors"] == []
    tracks = [t for t in model["threads"] if t[1] == TRACK_NAME]
    assert tracks == [["0", TRACK_NAME, ours]]  # in the GPU's process (pid 0), every slice imported
    assert sorted(t for t in model["threads"] if t[1] != TRACK_NAME) == sorted(original["threads"])
    assert sorted(model["warnings"]) == sorted(original["warnings"])
