"""tracekit.data.files on a real S3 server (moto's, on 127.0.0.1), on fsspec's memory filesystem, and
locally: reads, listings, atomic writes that never leave a partial object, one-line errors."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from tracekit.data import files
from tracekit.errors import InputNotFound, TracekitError

ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "fixtures" / "h200" / "ddp_slow_rank1"
RANK0 = next(DDP.glob("rank0.*.pt.trace.json.gz"))


def _put(s3_server, bucket: str, key: str, data: bytes) -> str:
    s3_server.client.put_object(Bucket=bucket, Key=key, Body=data)
    return f"s3://{bucket}/{key}"


def _get(s3_server, bucket: str, key: str) -> bytes:
    return s3_server.client.get_object(Bucket=bucket, Key=key)["Body"].read()


def _objects(s3_server, bucket: str) -> dict[str, int]:
    """The bucket's objects, without the empty "folder/" markers pyarrow keeps for every folder."""
    return {k: n for k, n in s3_server.keys(bucket).items() if not k.endswith("/")}


def test_is_uri():
    assert files.is_uri("s3://b/k") and files.is_uri("gs://b") and files.is_uri("file:///tmp/x")
    assert not files.is_uri("runs/job") and not files.is_uri("/tmp/x") and not files.is_uri(Path("s3://b"))
    assert not files.is_uri("C:\\runs") and not files.is_uri("dir/x://y")


def test_reads_an_object_written_by_another_client(s3_server, bucket):
    data = RANK0.read_bytes()
    uri = _put(s3_server, bucket, "job/rank0.pt.trace.json.gz", data)
    assert files.exists(uri) and files.is_file(uri) and not files.is_dir(uri)
    assert files.size(uri) == len(data)
    assert files.read_bytes(uri) == data
    assert files.name_of(uri) == "rank0.pt.trace.json.gz"
    with files.local_copy(uri) as path:
        assert path.is_file() and hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
        assert gzip.decompress(path.read_bytes()).lstrip().startswith(b"{")
        copy = path
    assert not copy.exists()  # the download is removed afterwards


def test_a_prefix_is_a_folder(s3_server, bucket):
    for name in ("rank1.json.gz", "rank0.json.gz", "manifest.json", "sub/deeper.json"):
        _put(s3_server, bucket, f"job/{name}", b"{}")
    folder = f"s3://{bucket}/job"
    assert files.is_dir(folder) and files.is_dir(folder + "/")
    assert files.list_dir(folder) == ["manifest.json", "rank0.json.gz", "rank1.json.gz", "sub"]
    assert files.join(folder + "/", "rank=0", "part-0.parquet") == f"s3://{bucket}/job/rank=0/part-0.parquet"
    assert not files.exists(f"s3://{bucket}/nothing-here/")


def test_atomic_write_publishes_whole_objects_only(s3_server, bucket):
    uri = f"s3://{bucket}/out/capture.parquet"
    with files.atomic_write(uri) as out:
        out.write(b"x" * 1000)
        assert s3_server.keys(bucket) == {}  # nothing is visible while the block runs
    assert _get(s3_server, bucket, "out/capture.parquet") == b"x" * 1000
    assert _objects(s3_server, bucket) == {"out/capture.parquet": 1000}  # no temporary key left

    with pytest.raises(RuntimeError), files.atomic_write(uri) as out:
        out.write(b"partial")
        raise RuntimeError("the writer failed")
    assert _get(s3_server, bucket, "out/capture.parquet") == b"x" * 1000  # the old object, whole
    assert _objects(s3_server, bucket) == {"out/capture.parquet": 1000}


def test_write_bytes_and_remove(s3_server, bucket):
    uri = f"s3://{bucket}/a/b/_tracekit.json"
    files.write_bytes(uri, b'{"k": 1}')
    assert files.read_bytes(uri) == b'{"k": 1}'
    files.remove(uri)
    assert not files.exists(uri)
    files.write_bytes(f"s3://{bucket}/a/b/x", b"1")
    files.remove_tree(f"s3://{bucket}/a")
    assert _objects(s3_server, bucket) == {}


def test_store_failures_are_one_line(s3_server, bucket):
    with pytest.raises(InputNotFound) as missing:
        files.read_bytes(f"s3://{bucket}/no/such/key")
    assert str(missing.value) == f"s3://{bucket}/no/such/key: no such file or folder"
    with pytest.raises(TracekitError) as no_bucket:
        files.write_bytes("s3://no-such-bucket-tk/x.parquet", b"1")
    message = str(no_bucket.value)
    assert message.startswith("s3://no-such-bucket-tk/x.parquet: cannot write (") and "\n" not in message
    assert "NO_SUCH_BUCKET" in message
    with pytest.raises(TracekitError) as listing:
        files.list_dir("s3://no-such-bucket-tk/job/")
    assert "\n" not in str(listing.value) and "cannot list" in str(listing.value)


def test_unknown_scheme_is_one_line():
    with pytest.raises(TracekitError) as exc:
        files.exists("zzz://bucket/key")
    assert str(exc.value).startswith("zzz://bucket/key: no filesystem for 'zzz://'")


def test_fsspec_filesystems_are_the_fallback():
    pytest.importorskip("fsspec", reason="needs fsspec (pip install -e '.[dev]')")
    root = "memory://tk-files-test/job"
    files.write_bytes(root + "/rank0.json", b"{}")
    with files.atomic_write(root + "/rank1.json") as out:
        out.write(b"[]")
    assert files.list_dir(root) == ["rank0.json", "rank1.json"]
    assert files.read_bytes(root + "/rank1.json") == b"[]"
    with files.local_copy(root + "/rank0.json") as path:
        assert path.read_bytes() == b"{}"
    files.remove_tree(root)
    assert not files.exists(root + "/rank0.json")


def test_local_paths_unchanged(tmp_path):
    target = tmp_path / "deep" / "c.parquet"
    with files.atomic_write(target) as out:
        out.write(b"abc")
    assert target.read_bytes() == b"abc" and sorted(p.name for p in target.parent.iterdir()) == ["c.parquet"]
    with files.local_copy(target) as path:
        assert path == target
    assert files.join(tmp_path, "a", "b") == tmp_path / "a" / "b"


def test_a_file_too_large_for_one_s3_copy_is_refused_whole(s3_server, bucket, monkeypatch):
    monkeypatch.setattr(files, "S3_COPY_LIMIT", 1000)  # S3's is 5 GiB
    with pytest.raises(TracekitError, match="over S3's 5 GiB limit for the server-side copy"):
        files.write_bytes(f"s3://{bucket}/big.parquet", b"x" * 1001)
    assert _objects(s3_server, bucket) == {}
