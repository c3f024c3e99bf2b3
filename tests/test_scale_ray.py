"""`--ray` end to end: the same capture and the same report (and straggler) with and without Ray, from
local disk and from a real S3 server; joining a running Ray by address; an unreachable cluster.

The Ray here is the session's one local instance (conftest.py `ray_executor`); commands run in this
process join it. Tests that must start their own driver (joining by address, failing to) run
`python -m tracekit` in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests.clirun import run_main
from tests.test_scale import DDP, make_job, same_report
from tracekit.data.store import capture_ranks, read_meta, read_rank
from tracekit.scale.executor import LocalExecutor
from tracekit.scale.job import analyze_capture, parse_job

ROOT = Path(__file__).resolve().parent.parent


def _rows(path, meta, rank):
    return read_rank(path, rank, meta).to_pylist()


def _same_capture(a, b) -> None:
    """Two captures hold the same rows, rank by rank, and the same metadata (but where they are)."""
    ma, mb = read_meta(a), read_meta(b)
    assert capture_ranks(ma) == capture_ranks(mb)
    for key in ("sources", "traces", "manifest", "failed"):
        assert ma.get(key) == mb.get(key), key
    for rank in capture_ranks(ma):
        assert _rows(a, ma, rank) == _rows(b, mb, rank), rank


def test_ray_parses_and_analyses_exactly_as_one_process(tmp_path, ray_executor):
    job = make_job(tmp_path / "job", 16, straggler=11)
    serial = LocalExecutor(1)  # in this process: the reference
    for folder, name in ((True, "cap"), (False, "cap.parquet")):
        here = parse_job([job], tmp_path / "here" / name, folder=folder, executor=serial).output
        on_ray = parse_job([job], tmp_path / "ray" / name, folder=folder, executor=ray_executor).output
        _same_capture(here, on_ray)
    reference = analyze_capture(tmp_path / "here" / "cap", executor=serial)
    report = analyze_capture(tmp_path / "ray" / "cap", executor=ray_executor)
    same_report(reference, report)
    same_report(reference, analyze_capture(tmp_path / "here" / "cap.parquet", executor=ray_executor))
    # the straggler is named the same: rank 11, on every rank that waited for it
    for r in (reference, report):
        assert {d.straggler_rank for d in r.devices if d.rank != 11} == {11}
        assert r.job.stragglers[0].rank == 11


def _upload(s3_server, bucket: str, folder: Path, prefix: str) -> str:
    for f in sorted(folder.iterdir()):
        s3_server.client.upload_file(str(f), bucket, f"{prefix}/{f.name}")
    return f"s3://{bucket}/{prefix}/"


def _report(out: str) -> dict:
    doc = json.loads(out)
    doc["capture"].pop("path", None)
    doc["capture"]["sources"] = [s.rsplit("/", 1)[-1] for s in doc["capture"]["sources"]]
    return doc


def test_parse_and_analyze_between_s3_and_ray(ray_executor, s3_server, bucket, capsys):
    job = _upload(s3_server, bucket, DDP, "job")
    code, out, err = run_main(["analyze", str(DDP), "--json"], capsys)
    assert code == 0, err
    local = _report(out)

    # --ray and a job of two files: a capture folder, whatever -o is called; each rank's file is
    # written to S3 by the task that parsed it
    code, out, err = run_main(["parse", job, "-o", f"s3://{bucket}/cap.parquet", "--ray"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"wrote s3://{bucket}/cap.parquet/: 24820 events, 2 rank(s), 16 step(s)")
    keys = {k for k in s3_server.keys(bucket) if k.startswith("cap.parquet/") and not k.endswith("/")}
    assert keys == {
        "cap.parquet/_tracekit.json",
        "cap.parquet/rank=0/part-0.parquet",
        "cap.parquet/rank=1/part-0.parquet",
    }
    code, out, err = run_main(["analyze", f"s3://{bucket}/cap.parquet", "--json", "--ray"], capsys)
    assert (code, err) == (0, "")
    assert _report(out) == local

    # without Ray: a capture file on S3, read by the driver
    code, out, err = run_main(["parse", job.rstrip("/"), "-o", f"s3://{bucket}/one.parquet"], capsys)
    assert (code, err) == (0, "") and out.startswith(f"wrote s3://{bucket}/one.parquet: 24820 events")
    code, out, err = run_main(["analyze", f"s3://{bucket}/one.parquet", "--json"], capsys)
    assert (code, err) == (0, "") and _report(out) == local
    code, out, err = run_main(["info", f"s3://{bucket}/cap.parquet", "--json"], capsys)
    assert code == 0 and [s["rank"] for s in json.loads(out)["sources"]] == [0, 1]

    # traces on S3 analysed on the fly, and diff, with and without Ray
    code, out, _ = run_main(["analyze", job, "--json", "--ray"], capsys)
    assert code == 0 and _report(out) == local
    diffs = [
        run_main(["diff", f"s3://{bucket}/one.parquet", f"s3://{bucket}/cap.parquet", "--json", *ray], capsys)
        for ray in ([], ["--ray"])
    ]
    assert diffs[0][0] == diffs[1][0] == 0 and diffs[0][1] == diffs[1][1]


def _tracekit(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env if env is not None else dict(os.environ),
        timeout=timeout,
    )


@pytest.mark.parametrize("how", ["address", "auto", "client"])
def test_a_running_ray_is_joined_by_address_auto_or_ray_client(tmp_path, ray_executor, how, capsys):
    import ray

    job = make_job(tmp_path / "job", 4, straggler=2)
    cap = str(tmp_path / "cap/")
    assert run_main(["parse", str(job), "-o", cap], capsys)[0] == 0
    expected = run_main(["analyze", cap, "--json"], capsys)[1]
    address = ray.get_runtime_context().gcs_address
    # The session's Ray requires Ray's token (~/.ray/auth_token), as clusters do by default; a driver
    # started as users start one has no RAY_AUTH_MODE in its environment.
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    if how == "address":
        done = _tracekit("analyze", cap, "--json", "--ray", address, env=env)
    elif how == "auto":
        done = _tracekit("analyze", cap, "--json", "--ray", "auto", env={**env, "RAY_ADDRESS": address})
    else:
        port = _free_port()
        server = subprocess.Popen(  # a Ray Client server in front of the session's Ray
            [sys.executable, "-m", "ray.util.client.server", "--address", address, "--host", "127.0.0.1"]
            + ["--port", str(port), "--mode", "legacy"],
            env={**env, "RAY_AUTH_MODE": "token"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for_port(port)
            done = _tracekit("analyze", cap, "--json", "--ray", f"ray://127.0.0.1:{port}", env=env)
        finally:
            server.terminate()
            server.wait(30)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == json.loads(expected)


def _wait_for_port(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:g} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_cluster_is_one_line_and_exit_2():
    port = _free_port()
    started = time.monotonic()
    done = _tracekit("analyze", str(DDP), "--ray", f"127.0.0.1:{port}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"tracekit: error: --ray 127.0.0.1:{port}: cannot reach a Ray cluster there (Connection refused); "
        "is it running (`ray status` on the head)? `--ray` alone starts a local Ray instead\n"
    )
    assert time.monotonic() - started < 60  # not Ray's own minutes of retries


def test_an_address_that_does_not_answer_as_ray_gives_up_in_time():
    with socket.socket() as listener:  # accepts connections (the kernel does), never speaks
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        done = _tracekit(
            "analyze",
            str(DDP),
            "--ray",
            f"127.0.0.1:{port}",
            env={**os.environ, "TRACEKIT_RAY_CONNECT_TIMEOUT_S": "3"},
        )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"tracekit: error: --ray 127.0.0.1:{port}: no answer from a Ray cluster")
    assert done.stderr.count("\n") == 1


def test_bare_ray_before_an_input_is_a_local_ray(ray_executor, capsys):
    # `--ray run/` reads run/ as the input, not as an address
    code, out, err = run_main(["analyze", "--ray", str(DDP), "--json"], capsys)
    assert (code, err) == (0, "") and json.loads(out)["devices"]


def test_a_folder_written_by_ray_tasks_is_one_dataset_on_s3(ray_executor, s3_server, bucket, tmp_path):
    # the folder written by Ray tasks is one dataset for pyarrow, read straight from S3
    import pyarrow.dataset as ds

    job = make_job(tmp_path / "job", 3, straggler=1)
    parse_job([str(job)], f"s3://{bucket}/cap/", folder=True, executor=ray_executor)
    table = ds.dataset(f"s3://{bucket}/cap/", format="parquet", partitioning="hive").to_table()
    assert sorted(pc.unique(table["rank"]).to_pylist()) == [0, 1, 2]


def test_whatif_parses_on_ray_and_replays_the_same(ray_executor, capsys):
    args = ["whatif", str(DDP), "--set", "interpreter=0", "--json"]
    here = run_main(args, capsys)
    on_ray = run_main([*args, "--ray"], capsys)
    assert here[0] == on_ray[0] == 0 and here[2] == on_ray[2] == ""
    assert json.loads(here[1]) == json.loads(on_ray[1])


def test_traces_are_not_staged_locally_for_a_cluster_of_several_nodes(tmp_path):
    from tracekit import api
    from tracekit.errors import TracekitError

    class TwoNodes:  # what RayExecutor says of a cluster of two machines
        nodes, workers = 2, 8

        def map(self, fn, items):
            raise AssertionError("nothing may run: the temporary folder is on this machine only")

    job = make_job(tmp_path / "job", 2, straggler=1)
    with pytest.raises(TracekitError, match="the other 1 node\\(s\\) of the Ray cluster cannot write"):
        api.analyze([str(job)], savings=False, executor=TwoNodes())


def test_a_bad_rank_file_on_s3_is_named_by_its_uri_and_the_others_parse_on_ray(
    ray_executor, s3_server, bucket, capsys
):
    import gzip

    rank0, rank1 = sorted(DDP.glob("rank*.pt.trace.json.gz"))
    cut = gzip.decompress(rank1.read_bytes())
    s3_server.client.upload_file(str(rank0), bucket, "job/rank0.pt.trace.json.gz")
    s3_server.client.put_object(Bucket=bucket, Key="job/rank1.pt.trace.json", Body=cut[: len(cut) // 2])
    code, out, err = run_main(["parse", f"s3://{bucket}/job/", "-o", f"s3://{bucket}/cap/", "--ray"], capsys)
    assert code == 2
    assert out.startswith(f"wrote s3://{bucket}/cap/: 12540 events, 1 rank(s), 8 step(s) from 1 file(s)")
    first = err.splitlines()[0]
    assert first.startswith(
        f"tracekit: error: rank 1 (job/rank1.pt.trace.json) left out: s3://{bucket}/job/rank1.pt.trace.json: "
        "the JSON ends early"
    )
    assert read_meta(f"s3://{bucket}/cap/")["failed"][0]["rank"] == 1
