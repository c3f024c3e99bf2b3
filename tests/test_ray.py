"""tracekit.scale.ray_backend: per-rank work as Ray tasks on one local Ray shared by the session (see
conftest.py), and its one-line errors. The commands' `--ray` is tested in test_scale_ray_cli.py."""

from __future__ import annotations

import math
import sys

import pytest

from tests import ray_tasks
from tracekit.data import files
from tracekit.errors import ClusterError, InputNotFound
from tracekit.scale import ray_backend


def test_results_come_back_in_input_order(ray_executor):
    items = list(range(40))
    assert list(ray_executor.map(ray_tasks.slow_negate, items)) == [-x for x in items]
    assert list(ray_executor.map(ray_tasks.slow_negate, iter([]))) == []


def test_tasks_run_in_worker_processes(ray_executor):
    import os

    pids = set(ray_executor.map(ray_tasks.worker_pid, range(8)))
    assert os.getpid() not in pids
    assert ray_executor.workers == os.cpu_count() and ray_executor.nodes == 1


def test_a_tracekit_error_in_a_task_is_the_same_one_line_error(ray_executor, s3_server, bucket):
    s3_server.client.put_object(Bucket=bucket, Key="job/rank0.json", Body=b"{}")
    # The workers read the object store themselves, with the environment Ray started with.
    assert list(ray_executor.map(files.size, [f"s3://{bucket}/job/rank0.json"])) == [2]
    with pytest.raises(InputNotFound) as exc:
        list(ray_executor.map(files.read_bytes, [f"s3://{bucket}/job/rank1.json"]))
    assert str(exc.value) == f"s3://{bucket}/job/rank1.json: no such file or folder"


def test_other_failures_keep_their_type_and_remote_traceback(ray_executor):
    with pytest.raises(ValueError) as exc:
        list(ray_executor.map(math.sqrt, [4.0, -1.0]))
    assert "math domain error" in str(exc.value)


def test_a_second_executor_joins_the_running_ray(ray_executor):
    joined = ray_backend.RayExecutor("local")
    assert list(joined.map(abs, [-3])) == [3]
    joined.close()  # it did not start Ray: Ray keeps running
    assert list(ray_executor.map(abs, [-4])) == [4]


@pytest.mark.parametrize("address", ["nonsense", "host:port", "http://h:1"])
def test_an_address_that_is_none_is_one_line(address):
    with pytest.raises(ClusterError) as exc:
        ray_backend.RayExecutor(address)
    assert "expected nothing (a local Ray), 'auto', HOST:PORT" in str(exc.value)


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when absent
    with pytest.raises(ClusterError) as exc:
        ray_backend.RayExecutor(None)
    assert str(exc.value) == "--ray needs Ray, which is not installed; pip install 'tracekit[ray]'"


def test_address_forms():
    assert all(map(ray_backend.looks_like_address, ["local", "auto", "10.0.0.1:6379", "ray://h:10001"]))
    assert ray_backend.looks_like_address("[::1]:6379") and ray_backend.looks_like_address("head-0.svc:6379")
    assert not any(map(ray_backend.looks_like_address, ["run/", "c.parquet", "s3://b/k", "h:port"]))


@pytest.mark.parametrize("command", ["parse", "analyze", "diff", "whatif"])
def test_every_per_rank_command_has_ray(command, capsys):
    from tests.clirun import run_main

    code, out, _ = run_main([command, "--help"], capsys)
    assert code == 0 and "--ray" in out and "[ADDRESS]" in out
    if command != "whatif":
        assert "'tracekit[ray]'" in out  # not eaten as a markup tag by the help's renderer


def test_an_error_from_another_node_names_it(ray_executor):
    import ray

    here = ray.util.get_node_ip_address()
    error = InputNotFound("runs/job/rank3.json: no such file or folder")
    assert ray_backend._on_node(error, here, ray) is error  # this machine: as it was
    moved = ray_backend._on_node(error, "10.9.9.9", ray)
    assert type(moved) is InputNotFound
    assert str(moved) == "runs/job/rank3.json: no such file or folder (on Ray node 10.9.9.9)"


def test_a_missing_local_file_in_a_task_is_one_line_naming_the_node(ray_executor, tmp_path):
    import os

    missing = str(tmp_path / "rank3.pt.trace.json")
    with pytest.raises(ClusterError) as exc:
        list(ray_executor.map(os.path.getsize, [missing]))
    assert str(exc.value).startswith(f"{missing}: No such file or directory on Ray node ")
    assert str(exc.value).endswith(
        "a local path must be on a filesystem every node mounts at the same path (or use s3://...)"
    )
