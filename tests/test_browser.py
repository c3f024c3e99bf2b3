"""TensorBoard in a real browser: headless Debian Chromium against a TensorBoard this test starts.

GIVEN two probe captures laid out as `tracekit capture` lays out OUT, with tracekit's event files
WHEN `tracekit view OUT` serves them on localhost and Chromium opens the dashboards
THEN the Scalars dashboard shows tracekit's tags for both runs, the Text dashboard the markdown reports,
and the PyTorch Profiler tab lists both captured runs. Screenshots are kept in tests/artifacts/.

Skipped only when Chromium is absent (CI installs Debian's `chromium` in .ci/run).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chromium import CHROMIUM, Chromium
from tests.test_tensorboard import make_logdir, start_view, stop_view
from tracekit.analysis.pipeline import analyze
from tracekit.export.tensorboard import write_run_summaries
from tracekit.parse.parser import load_capture

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not installed (apt-get install chromium)"
)

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
RUNS = ("probe/dataloader", "probe/sync")

# Open the profiler plugin's "Runs" select (a MUI Select in the plugin's iframe) and list its options.
PROFILER_RUN_OPTIONS_JS = """
(async () => {
  const find = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.tagName === 'IFRAME' && el.contentDocument &&
          el.contentDocument.querySelector('[aria-haspopup="listbox"]')) return el.contentDocument;
      if (el.shadowRoot) { const d = find(el.shadowRoot); if (d) return d; }
    }
    return null;
  };
  const doc = find(document);
  if (!doc) return null;
  const select = doc.querySelector('[aria-haspopup="listbox"]');  // the first select is "Runs"
  select.dispatchEvent(new MouseEvent('mousedown', {bubbles: true, button: 0}));
  await new Promise((r) => setTimeout(r, 500));
  return Array.from(doc.querySelectorAll('li[role="option"]')).map((li) => li.textContent.trim());
})()
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = make_logdir(tmp_path_factory.mktemp("out"), ("dataloader", "sync"))
    for run in RUNS:
        run_dir = logdir / run
        write_run_summaries(run_dir, analyze(load_capture(run_dir)))
    proc, url = start_view(logdir)
    try:
        with Chromium() as browser:
            yield browser, url
    finally:
        rc, out, err = stop_view(proc)
        assert rc == 0, out + err


def shot(browser: Chromium, name: str) -> Path:
    path = browser.screenshot(ARTIFACTS / name)
    print(f"screenshot: {path}")
    return path


def test_scalars_dashboard_shows_tracekit_tags_for_two_runs(served):
    browser, url = served
    browser.goto(url + "#scalars")
    # category names (tag prefixes), card titles of the first category, and both runs in the selector
    text = browser.wait_for_text([*RUNS, "host", "idle_ms", "step", "host/dispatch_gaps"])
    assert "No scalar data was found" not in text
    # the step category lists its four tags once expanded: filter the tags to it (state in the URL)
    browser.goto(url + "#scalars&tagFilter=%5Estep%2F")
    browser.wait_for_text(
        ["step/time_ms", "step/gpu_utilization", "step/collective_wait_ms", "step/dispatch_gap_ms"]
    )
    assert shot(browser, "tensorboard_scalars.png").stat().st_size > 10_000


def test_text_dashboard_shows_the_markdown_report_per_run(served):
    browser, url = served
    browser.goto(url + "#text")
    text = browser.wait_for_text([*RUNS, "tracekit analysis", "idle: dataloader", "idle: sync"])
    assert text.count("tracekit analysis") >= 2
    shot(browser, "tensorboard_text.png")


def test_pytorch_profiler_tab_lists_the_captured_runs(served):
    browser, url = served
    browser.goto(url + "#pytorch_profiler")
    browser.wait_for_text(["Runs", "Views", "Overview", "Workers"])
    options = None
    for _ in range(20):  # the plugin loads runs in the background; the select fills in when done
        options = browser.eval(PROFILER_RUN_OPTIONS_JS)
        if options and sorted(options) == sorted(RUNS):
            break
        browser.goto(url + "#pytorch_profiler")
        browser.wait_for_text(["Runs", "Workers"])
    assert options is not None and sorted(options) == sorted(RUNS)
    shot(browser, "tensorboard_pytorch_profiler.png")
