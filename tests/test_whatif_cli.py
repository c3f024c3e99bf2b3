"""`tracekit whatif` as users run it: golden files for text / JSON / Markdown (width pinned), the JSON
contract's fields, the predicted timeline read back by `tracekit parse`, and every user mistake as one
line on stderr with exit code 2.

Regenerate the golden files after an intended change with `UPDATE_GOLDEN=1 pytest tests/test_whatif_cli.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import parse_paths

GOLDEN = Path(__file__).parent / "golden"


def trace(tmp_path: Path) -> Path:
    """Two steps: a DataLoader fetch, an op launching two kernels, an .item() that waits."""
    t = TraceBuilder(device_properties=[{"id": 0, "name": "Test GPU", "totalGlobalMem": 1 << 30}])
    corr = 0
    for n, base in ((1, 0), (2, 300)):
        t.step(n, base, base + 300)
        t.dataloader(base + 5, 40)
        t.op("aten::linear", base + 60, 40)
        for k in range(2):
            corr += 1
            t.launch(base + 65 + 10 * k, 5, corr=corr)
            t.kernel("gemm_kernel", base + 80 + 60 * k, 55, corr=corr)
        t.op("aten::item", base + 110, 100)
        corr += 1
        t.runtime("cudaMemcpyAsync", base + 112, 4, corr=corr)
        t.memcpy(base + 200, 3, corr=corr)
        t.sync(base + 120, 88, name="cudaStreamSynchronize")
    path = tmp_path / "run" / "host.pt.trace.json"
    path.parent.mkdir(parents=True)
    return t.write(path)


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


ARGS = ["--set", "sync=0", "--kernels", "gemm=0.5", "--unprofiled-step-ms", "0.25"]


@pytest.mark.parametrize("fmt,suffix", [("text", "txt"), ("json", "json"), ("markdown", "md")])
def test_golden_outputs(tmp_path, capsys, fmt, suffix):
    path = trace(tmp_path)
    flag = {"text": ["--width", "100"], "json": ["--json"], "markdown": ["--markdown"]}[fmt]
    code, out, err = run_main(["whatif", str(path), *ARGS, *flag], capsys)
    assert code == 0, err
    if fmt == "json":
        doc = json.loads(out)
        doc["capture"] = {}
        out = json.dumps(doc, indent=2) + "\n"
    golden(f"whatif_small.{suffix}", out)


def test_json_contract(tmp_path, capsys):
    code, out, _ = run_main(["whatif", str(trace(tmp_path)), *ARGS, "--json"], capsys)
    doc = json.loads(out)
    assert doc["tracekit_whatif"] == 1
    assert doc["scenario"] == {
        "set": {"sync": 0.0},
        "kernels": {"gemm": 0.5},
        "rank_host": {},
        "comm": 1.0,
        "python_speedup": None,
        "ops": {},
        "cuda_graphs": False,
        "graph_region": None,
        "loader_workers": None,
        "pin_memory": False,
        "channels_last": False,
        "autocast": None,
    }
    (d,) = doc["devices"]
    for key in (
        "rank",
        "device",
        "steps",
        "observed_step_ms",
        "replayed_step_ms",
        "predicted_step_ms",
        "change",
    ):
        assert key in d
    assert d["change"] == pytest.approx(d["predicted_step_ms"] / d["replayed_step_ms"] - 1)
    assert set(d["predicted_idle_ms_per_step"]) == {
        "queued",
        "dataloader",
        "sync",
        "collective",
        "runtime",
        "launch",
        "framework",
        "interpreter",
    }
    assert 0 <= d["predicted_gpu_utilization"] <= 1
    u = doc["unprofiled"]
    assert u["source"] == "flag" and u["observed_step_ms"] == 0.25
    assert u["profiler_cost_us_per_event"] >= 0


def test_predicted_timeline_reads_back(tmp_path, capsys):
    out = tmp_path / "pred.pt.trace.json.gz"
    code, stdout, err = run_main(
        ["whatif", str(trace(tmp_path)), "--set", "dataloader=0", "--trace", str(out), "--json"], capsys
    )
    assert code == 0, err
    cap = parse_paths([out])
    from tracekit.whatif.predict import Replayer

    rp = Replayer.of(cap)
    predicted = json.loads(stdout)["devices"][0]["predicted_step_ms"]
    assert float(rp.observed.dur[0].mean()) / 1e6 == pytest.approx(predicted, rel=1e-6)
    # and it refuses to overwrite without --force
    code, _, err = run_main(["whatif", str(trace(tmp_path / "again")), "--trace", str(out)], capsys)
    assert code == 2 and "--force" in err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--set", "gpu=0"], "unknown cause 'gpu'"),
        (["--set", "interpreter=-1"], "≥ 0"),
        (["--set", "interpreter=fast"], "not a number"),
        (["--set", "sync=0.5"], "sync takes 0"),
        (["--set", "interpreter"], "NAME=FACTOR"),
        (["--kernels", "nomatch=0.5"], "no device activity name matches"),
        (["--kernels", "(=0.5"], "not a regular expression"),
        (["--ops", "aten::nothing=0"], "no framework op (cpu_op) or record_function region matches"),
        (["--ops", "aten::item=-1"], "≥ 0"),
        (["--rank-host", "3=0.5"], "no rank 3"),
        (["--rank-host", "x=0.5"], "not a rank number"),
        (["--python-speedup", "0"], "python-speedup"),
        (["--unprofiled-step-ms", "-2"], "unprofiled-step-ms"),
        (["--json", "--markdown"], "pick one"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    code, out, err = run_main(["whatif", str(trace(tmp_path)), *args], capsys)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_capture(tmp_path, capsys):
    code, _, err = run_main(["whatif", str(tmp_path / "nope")], capsys)
    assert code == 2 and "nope" in err


@pytest.mark.parametrize("name", ["dataloader_train", "ddp_slow_rank1"])
def test_a_prediction_without_its_trace_lets_the_table_go_and_predicts_the_same(tmp_path, name):
    """`tracekit whatif` without --trace reads the capture for the replay alone (api.whatif(keep_trace=
    False)): its table goes once the frames hold it, the prediction is the same, and writing the trace of
    such a prediction is one clear error; a Capture the caller loaded keeps its table."""
    from tracekit import api
    from tracekit.errors import TracekitError
    from tracekit.whatif.scenario import WhatIfOptions

    source = Path(__file__).parent.parent / "fixtures" / "h200" / name
    kept = api.whatif(source, set=["sync=0"])
    lean = api.whatif(source, set=["sync=0"], keep_trace=False)
    assert json.dumps(lean.to_json(), sort_keys=True) == json.dumps(kept.to_json(), sort_keys=True)
    assert lean.capture.table.num_rows < kept.capture.table.num_rows
    # its replay was the last: the graph's edges went before the predicted timeline's attribution
    assert lean.replayer.graph.src.size == 0 and kept.replayer.graph.src.size > 0
    with pytest.raises(RuntimeError, match="let go"):
        lean.replayer.run(WhatIfOptions(set=["sync=0"]))
    with pytest.raises(TracekitError, match="keep_trace=False"):
        lean.write_trace(tmp_path / "x.pt.trace.json.gz")
    assert not (tmp_path / "x.pt.trace.json.gz").exists()
    mine = api.load(source)
    rows = mine.table.num_rows
    api.whatif(mine, set=["sync=0"], keep_trace=False).write_trace(tmp_path / "y.pt.trace.json.gz")
    assert mine.table.num_rows == rows and (tmp_path / "y.pt.trace.json.gz").exists()


def test_each_whatif_flag_is_declared_once_and_read_everywhere(tmp_path, capsys):
    """GIVEN WhatIfOptions, whose fields declare the flags WHEN the CLI, the API and the JSON read it THEN
    every flag field is a `tracekit whatif` option, an API keyword of the same name, parsed the same from
    the command line's text as from a Python value, and (unless it is how the prediction is made, not
    what changes) a key of the result's scenario."""
    from tracekit import api
    from tracekit.errors import TracekitError
    from tracekit.flags import flags_of, from_argv
    from tracekit.whatif.scenario import ScenarioError, WhatIfOptions

    code, help_text, _ = run_main(["whatif", "--help"], capsys)
    assert code == 0
    declared = list(flags_of(WhatIfOptions))
    assert declared and all(flag.name in help_text for _, flag in declared)
    assert {f.name for f, flag in declared if flag.json} | {"python"} >= set(WhatIfOptions().to_json())
    as_typed = WhatIfOptions(set=["sync=0", "launch=0.5"], kernels="gemm=0.5", rank_host=["1=2"])
    as_values = WhatIfOptions(set={"sync": 0, "launch": 0.5}, kernels={"gemm": 0.5}, rank_host={1: 2.0})
    assert as_typed == as_values and as_typed.to_json() == as_values.to_json()
    assert as_typed.describe() == "sync=0, launch=0.5, kernels 'gemm'=0.5, rank 1 host=2"
    assert WhatIfOptions(graph_region="x").cuda_graphs and not WhatIfOptions(graph_region="x").is_identity
    assert WhatIfOptions(set=["launch=1"], unprofiled_step_ms=3.0).is_identity
    for bad in (["launch=-1"], {"launch": -1.0}):
        with pytest.raises(ScenarioError, match=r"--set launch=-1: the factor must be"):
            WhatIfOptions(set=bad)
    path = trace(tmp_path)
    result = api.whatif(path, set=["sync=0"], kernels=["gemm=0.5"], unprofiled_step_ms=0.25).result
    assert result.scenario == WhatIfOptions(set={"sync": 0.0}, kernels={"gemm": 0.5}).to_json()
    with pytest.raises(TracekitError, match="unknown option sets"):
        api.whatif(path, sets=["sync=0"])
    # the same table reads command-line words (what advice's flags are replayed from)
    words = ["--set", "sync=0", "--loader-workers", "3", "--set", "launch=0.5", "--pin-memory"]
    assert from_argv(WhatIfOptions, words) == {
        "set": ["sync=0", "launch=0.5"],
        "loader_workers": 3,
        "pin_memory": True,
    }
    assert from_argv(api.AnalyzeOptions, ["--no-savings", "--rank", "2"]) == {"savings": False, "rank": 2}
    for bad in (["--bogus"], ["--loader-workers"], ["--loader-workers", "x"]):
        with pytest.raises(ValueError):
            from_argv(WhatIfOptions, bad)
