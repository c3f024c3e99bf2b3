"""Fixtures shared by test modules: a real S3-compatible server, and one local Ray for the session.

Both tools are in the dev extra (`make test` installs them); without them the tests that need them
are skipped, saying what to install.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass

import pytest


@dataclass
class S3Server:
    """moto's S3 server on 127.0.0.1 and a boto3 client of it (an independent reader and writer)."""

    endpoint: str
    client: object

    def new_bucket(self) -> str:
        name = f"tk-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> dict[str, int]:
        """{key: size} of every object in the bucket."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (moto's server mode, in a process of its own) on a free port of 127.0.0.1,
    with the environment pointing pyarrow and boto3 at it for the session: tracekit reads and writes
    through pyarrow's own S3 client, as it would against AWS. (Not moto's in-process thread: pyarrow
    holds the GIL in places while it waits for the server, which then never answers.)"""
    pytest.importorskip("moto.server", reason="needs moto[server] (pip install -e '.[dev]')")
    boto3 = pytest.importorskip("boto3", reason="needs boto3 (pip install -e '.[dev]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = pytest.MonkeyPatch()
    try:
        _wait_for(endpoint, server)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_REGION", "us-east-1")
        env.setenv("AWS_ENDPOINT_URL", endpoint)  # read by pyarrow (>= 15) and boto3 alike
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield S3Server(endpoint, boto3.client("s3", endpoint_url=endpoint))
    finally:
        env.undo()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_for(endpoint: str, server: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"moto's S3 server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(endpoint, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's S3 server did not answer at {endpoint} within {timeout_s:g} s")


@pytest.fixture
def bucket(s3_server) -> str:
    """A new, empty bucket on the session's S3 server."""
    return s3_server.new_bucket()


@pytest.fixture(scope="session")
def ray_executor(request):
    """One local Ray for the whole session (it takes seconds to start), started the way `--ray` starts
    it; every RayExecutor made while it runs (the commands' `--ray`) joins it instead of starting one.

    The S3 server starts first: Ray's local workers inherit the environment Ray starts with."""
    pytest.importorskip("ray", reason="needs ray (pip install -e '.[dev]' or '.[ray]')")
    request.getfixturevalue("s3_server")
    from tracekit.scale.ray_backend import RayExecutor

    executor = RayExecutor(None)
    try:
        yield executor
    finally:
        executor.close()
