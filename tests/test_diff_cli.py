"""`tracekit diff` as users run it, on the real H200 probe traces (fixtures/h200_probe/): different
workloads are called not comparable, a capture against itself changes nothing, errors are one line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.clirun import run_main
from tracekit.cli import get_app

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "h200_probe"
MLP = str(PROBE / "mlp.pt.trace.json.gz")
SYNC = str(PROBE / "sync.pt.trace.json.gz")
TINY = str(PROBE / "tiny.pt.trace.json.gz")


def _run(*args: str):
    return CliRunner().invoke(get_app(), ["diff", *args], catch_exceptions=False)


def _main(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(["diff", *args], capsys)


@pytest.fixture(scope="module")
def probe_json() -> dict:
    result = _run(MLP, SYNC, TINY, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_different_workloads_are_not_comparable(probe_json):
    for pair in probe_json["pairs"]:
        assert pair["comparable"] is False
        assert pair["summary"].startswith("NOT comparable: framework op calls per step overlap")
        assert any("no capture manifest" in u for u in pair["unchecked"])
    assert [p["b"] for p in probe_json["pairs"]] == ["sync", "tiny"]


def test_real_gpu_figures_are_there(probe_json):
    keys = {f["key"] for f in probe_json["pairs"][0]["figures"]}
    assert {"step_time", "gpu_util_mean", "gpu_util_peak", "idle", "idle.sync", "dispatch_gap"} <= keys
    mlp, sync = probe_json["compositions"][:2]
    assert mlp["kind"] == "device"
    # the sync probe spends its steps draining the queue: its sync idle dwarfs the MLP's
    assert sync["ms_per_step"]["sync"] > 10 * mlp["ms_per_step"]["sync"]
    # 3 profiled steps each: the rank test cannot give a 95 % interval, so nothing is called significant
    pair = probe_json["pairs"][0]
    step = next(f for f in pair["figures"] if f["key"] == "step_time")
    assert step["verdict"] == "too few steps" and not step["significant"]


def test_a_real_capture_against_itself_changes_nothing():
    result = _run(MLP, MLP, "--json")
    doc = json.loads(result.output)
    pair = doc["pairs"][0]
    assert pair["comparable"] is True and pair["differences"] == []
    for f in pair["figures"] + pair["ops"]:
        assert f["shift"] == 0.0, f["key"]
        assert f["log_ratio"] in (None, 0.0), f["key"]
        assert not f["significant"], f["key"]


def test_terminal_and_markdown(tmp_path):
    text = _run(MLP, SYNC, "--width", "120").output
    assert "sync against mlp" in text
    assert "NOT comparable" in text
    assert "too few steps" in text
    md = _run(MLP, SYNC, "--markdown").output
    assert md.startswith("### sync against mlp")
    assert "| figure | mlp | sync | change | interval | verdict |" in md


def test_labels_and_plot(tmp_path):
    png = tmp_path / "probe.png"
    result = _run(MLP, SYNC, "--label", "compute", "--label", "item", "--plot", str(png))
    assert result.exit_code == 0
    assert "item against compute" in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plot_is_not_overwritten_without_force(tmp_path, capsys):
    png = tmp_path / "p.png"
    png.write_bytes(b"mine")
    code, out, err = _main(capsys, MLP, SYNC, "--plot", str(png))
    assert code == 2 and "exists; pass --force" in err and "Traceback" not in err
    assert png.read_bytes() == b"mine"
    code, _, _ = _main(capsys, MLP, SYNC, "--plot", str(png), "--force")
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args,message",
    [
        ((MLP,), "at least two captures"),
        ((MLP, "no/such/trace.json"), "no such file"),
        ((MLP, SYNC, "--json", "--markdown"), "pick one"),
        ((MLP, SYNC, "--label", "only-one"), "one per capture"),
        ((MLP, SYNC, "--plot", "out.svg"), "PNG"),
        ((MLP, SYNC, "--confidence", "1.5"), "confidence"),
    ],
)
def test_mistakes_are_one_line_errors(capsys, args, message):
    code, _, err = _main(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_python_dash_m_tracekit_diff():
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "diff", MLP, MLP, "--markdown"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "- comparable" in proc.stdout


def test_real_diff_is_exactly_antisymmetric():
    ab = json.loads(_run(MLP, SYNC, "--json").output)["pairs"][0]
    ba = json.loads(_run(SYNC, MLP, "--json").output)["pairs"][0]
    assert [f["key"] for f in ab["figures"]] == [f["key"] for f in ba["figures"]]
    for fab, fba in zip(ab["figures"] + ab["ops"], ba["figures"] + ba["ops"]):
        assert (fab["a"], fab["b"]) == (fba["b"], fba["a"])
        assert fab["shift"] == -fba["shift"], fab["key"]
        if fab["log_ratio"] is not None:
            assert fab["log_ratio"] == -fba["log_ratio"], fab["key"]


def test_stored_analysis_is_used_when_this_tracekit_wrote_it(tmp_path, monkeypatch):
    import tracekit.analysis.pipeline as analysis
    from tracekit.analysis.store import store_report
    from tracekit.api import analysis_of as load_report
    from tracekit.data.store import write_capture
    from tracekit.parse.parser import load_capture, parse_to_file

    paths = []
    for trace in (MLP, SYNC):
        path = tmp_path / Path(trace).name.replace(".pt.trace.json.gz", ".parquet")
        parse_to_file([Path(trace)], path)
        capture = load_capture(path)
        store_report(capture, analysis.analyze(capture))
        paths.append(str(path))
    before = json.loads(_run(MLP, SYNC, "--json").output)

    def no_analysis(*_args, **_kwargs):
        raise AssertionError("analysed again instead of using the stored analysis")

    import tracekit.api.run as api_module
    import tracekit.scale.job as job

    monkeypatch.setattr(job, "analyze_capture", no_analysis)  # by ranks
    monkeypatch.setattr(api_module, "_analyze_here", no_analysis)  # in this process (one rank)
    after = json.loads(_run(*paths, "--json").output)
    # the diff from the stored analyses is the diff from fresh ones
    assert after["pairs"][0]["figures"] == before["pairs"][0]["figures"]
    assert after["pairs"][0]["ops"] == before["pairs"][0]["ops"]

    # stored by another tracekit version: analysed again
    import tracekit.version

    with monkeypatch.context() as m:
        m.setattr(tracekit.version, "__version__", "0.0.0-other")
        with pytest.raises(AssertionError, match="analysed again"):
            load_report(Path(paths[0]))
    # a stored report of another report version: analysed again
    capture = load_capture(Path(paths[0]))
    capture.meta["analysis"]["tracekit_report"] = 999
    write_capture(capture, Path(paths[0]), force=True)
    with pytest.raises(AssertionError, match="analysed again"):
        load_report(Path(paths[0]))


def test_repeats_joined_with_a_comma_are_pooled(capsys, tmp_path):
    # a second run of the same events: other bytes (one run pooled twice is refused: its steps would
    # count twice, tracekit.compare.group.check_distinct_runs)
    doc = json.loads(gzip.decompress(Path(MLP).read_bytes()))
    again = tmp_path / "mlp.pt.trace.json"
    again.write_text(json.dumps({**doc, "repeat": 2}))
    doc = json.loads(_run(f"{MLP},{again}", MLP, "--json").output)
    assert [c["steps"] for c in doc["captures"]] == [6, 3]
    assert doc["captures"][0]["label"] == "mlp ×2"
    pair = doc["pairs"][0]
    assert pair["comparable"] and not any(f["significant"] for f in pair["figures"])
    code, _, err = _main(capsys, f"{MLP},{SYNC}", MLP)
    assert code == 2 and "not repeats of one configuration" in err
    code, _, err = _main(capsys, f"{MLP},{MLP}", MLP)
    assert code == 2 and "name one run twice in one side" in err


def test_compare_names_the_knob_that_varies(tmp_path):
    import tracekit.analysis.pipeline as analysis
    from tracekit.analysis.store import store_report
    from tracekit.data.store import write_capture
    from tracekit.parse.parser import load_capture, parse_to_file

    paths = []
    for workers in (0, 4):
        path = tmp_path / f"w{workers}.parquet"
        parse_to_file([Path(MLP)], path)
        capture = load_capture(path)
        capture.meta["manifest"] = {"workload": "dataloader_train", "knobs": {"num_workers": workers}}
        write_capture(capture, path, force=True)
        store_report(capture, analysis.analyze(capture))
        paths.append(str(path))
    assert "NOT comparable: knob num_workers: 0 vs 4" in _run(*paths, "--width", "120").output
    out = _run(*paths, "--compare", "num_workers", "--width", "120").output
    assert "comparable (knob num_workers: 0 vs 4)" in out and "NOT comparable" not in out
