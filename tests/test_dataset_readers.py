"""The folder form of a capture is one Hive-partitioned dataset for other readers, not only for tracekit.
pyarrow always runs; DuckDB and Polars run where they are installed (they are not tracekit dependencies:
`pip install duckdb polars` to run these too)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tracekit.scale.job import parse_job

DDP = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "ddp_slow_rank1"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "capture"
    parse_job([DDP], out, folder=True)  # what `tracekit parse DDP -o capture/` writes
    assert (out / "rank=1" / "part-0.parquet").is_file()
    return out


def _rows_per_rank_pyarrow(folder: Path) -> dict[int, int]:
    table = ds.dataset(folder, format="parquet", partitioning="hive").to_table(columns=["rank"])
    ranks = table.column("rank").to_pylist()
    return {r: ranks.count(r) for r in sorted(set(ranks))}


def test_pyarrow_reads_the_folder_as_one_table_with_its_ranks(folder):
    counts = _rows_per_rank_pyarrow(folder)
    assert sorted(counts) == [0, 1] and all(n > 1000 for n in counts.values())


def test_duckdb_reads_it_alike(folder):
    duckdb = pytest.importorskip("duckdb")
    rows = duckdb.sql(
        f"select rank, count(*) from read_parquet('{folder}/*/*.parquet', hive_partitioning=true) "
        "group by rank order by rank"
    ).fetchall()
    assert dict(rows) == _rows_per_rank_pyarrow(folder)


def test_polars_reads_it_alike(folder):
    pl = pytest.importorskip("polars")
    df = pl.scan_parquet(f"{folder}/*/*.parquet", hive_partitioning=True).group_by("rank").len().collect()
    assert dict(zip(df["rank"].to_list(), df["len"].to_list())) == _rows_per_rank_pyarrow(folder)
