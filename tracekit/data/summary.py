"""What a capture holds (`tracekit info`): ranks, devices, steps, row counts by kind and by category.

    summarize(path)              # a capture file or folder on disk: constant memory, nothing loaded
    Capture.summary()            # the same document of a capture in memory (store.Capture)

Both feed one `Summary`, so the two cannot disagree. On disk, the file is read row group by row group,
only what the summary needs: each row group's `kind` and `rank` statistics (written by CaptureWriter)
say which kinds and ranks it holds, so the `kind` column is read only for a group of mixed kinds (a
file written whole, `analyze --store`) and `rank` only for a group of several ranks; event rows cost
two columns (`cat`, counted on its codes, and `device`: a rank's devices are those its device
activity ran on), step rows are read whole (one per step). The memory is one row group's few columns,
whatever the capture's size.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import arrow, files
from tracekit.data.files import Location
from tracekit.data.schema import DEVICE_ACTIVITY_CATS, KIND_EVENT, KIND_STEP

STEP_COLUMNS = ["step", "name", "ts_ns", "dur_ns"]  # a step row's figures (besides its rank)
NO_CAT = "(no cat)"


class Summary:
    """The summary document, accumulated from rows given kind by kind, in the table's order."""

    def __init__(self) -> None:
        self.by_kind: dict[str, int] = {}
        self.by_cat: dict[str, int] = {}
        self.ranks: set[int] = set()
        self.devices: set[tuple[int, int]] = set()
        self.step_rows: list[dict] = []

    def count(self, kind: Optional[str], rows: int) -> None:
        if kind and rows:
            self.by_kind[kind] = self.by_kind.get(kind, 0) + rows

    def add_ranks(self, ranks) -> None:
        self.ranks.update(int(r) for r in ranks if r is not None)

    def add_events(self, cat: pa.ChunkedArray | pa.Array) -> None:
        """Event rows' categories (a dictionary column is counted on its codes, not decoded)."""
        chunks = cat.chunks if isinstance(cat, pa.ChunkedArray) else [cat]
        for chunk in chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            codes, names = arrow.codes(chunk)
            counts = np.bincount(codes + 1, minlength=len(names) + 1)  # code -1: null
            self._add_cat(NO_CAT, int(counts[0]))
            for code in np.flatnonzero(counts[1:]):
                self._add_cat(NO_CAT if names[code] is None else names[code], int(counts[code + 1]))

    def _add_cat(self, cat: str, n: int) -> None:
        if n:
            self.by_cat[cat] = self.by_cat.get(cat, 0) + n

    def add_steps(self, table: pa.Table, rank: Optional[int]) -> None:
        """Step rows: `table` has STEP_COLUMNS and, unless `rank` is given, a rank column."""
        for row in table.select(["rank", *STEP_COLUMNS] if rank is None else STEP_COLUMNS).to_pylist():
            self.step_rows.append({"rank": rank, **row} if rank is not None else row)

    def add_devices(self, cat: pa.ChunkedArray, device: pa.ChunkedArray, ranks: np.ndarray) -> None:
        """Event rows' categories, devices (null: none) and ranks: the (rank, device) pairs of their
        device activity (kernels, copies, sets)."""
        is_device = np.zeros(len(ranks), dtype=bool)
        at = 0
        for chunk in cat.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            codes, names = arrow.codes(chunk)
            wanted = np.array([n in DEVICE_ACTIVITY_CATS for n in names] + [False], dtype=bool)
            is_device[at : at + len(codes)] = wanted[codes]  # code -1 (null) reads the last: False
            at += len(codes)
        devices = arrow.values(device, fill=-1)
        ok = is_device & (devices >= 0) & (ranks >= 0)
        keys = np.unique((ranks[ok].astype(np.int64) << 32) | devices[ok].astype(np.int64))
        self.devices.update((int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys)

    def result(self) -> dict:
        return {
            "events": self.by_kind.get(KIND_EVENT, 0),
            "ranks": sorted(self.ranks),
            "devices": [{"rank": r, "device": d} for r, d in sorted(self.devices)],
            "steps": len(self.step_rows),
            "step_rows": self.step_rows,
            "rows_by_kind": dict(self.by_kind),
            "events_by_cat": dict(sorted(self.by_cat.items(), key=lambda x: (-x[1], x[0]))),
        }


def summarize_table(table: pa.Table) -> dict:
    """The summary of a capture table in memory (schema.SCHEMA columns)."""
    summary = Summary()
    _add_rows(summary, table, rank=None)
    return summary.result()


def summarize(path: Location, meta: dict) -> dict:
    """The summary of the capture (file or folder) at `path`, whose metadata document is `meta`,
    read from disk row group by row group (module docstring): the same as Capture.summary()."""
    summary = Summary()
    if meta.get("form") == "folder":
        for part in sorted(meta.get("parts") or [], key=lambda p: int(p["rank"])):
            for rel in (part["path"], part.get("idle")):  # as store.read_rank concatenates them
                if rel:
                    _add_file(summary, files.join(path, *rel.split("/")), rank=int(part["rank"]))
    else:
        _add_file(summary, path, rank=None)
    return summary.result()


def _add_file(summary: Summary, loc: Location, rank: Optional[int]) -> None:
    """One Parquet file's rows; `rank`: a part file of the folder form (no rank column)."""
    with files.open_read(loc) as fh:
        pf = pq.ParquetFile(fh)
        names = pf.schema_arrow.names
        for i in range(pf.metadata.num_row_groups):
            group = pf.metadata.row_group(i)
            if group.num_rows == 0:
                continue
            kind = only_value(group, "kind")
            mine = rank if rank is not None else only_value(group, "rank")
            if kind is None:  # several kinds in the group: read its kind column and split it
                wanted = {"kind", "cat", "device", *STEP_COLUMNS} | ({"rank"} if rank is None else set())
                _add_rows(summary, pf.read_row_group(i, columns=[c for c in names if c in wanted]), rank)
                continue
            if mine is not None:
                summary.add_ranks([mine])
            elif kind not in (KIND_STEP, KIND_EVENT):  # those two read their rank column anyway
                summary.add_ranks(pf.read_row_group(i, columns=["rank"]).column(0).unique().to_pylist())
            _add_kind(summary, kind, group.num_rows, functools.partial(_read_group, pf, i), mine)


def _read_group(pf: pq.ParquetFile, i: int, columns: list[str]) -> pa.Table:
    return pf.read_row_group(i, columns=columns)


def _add_kind(summary: Summary, kind: str, rows: int, read, rank: Optional[int]) -> None:
    """`rows` rows of one kind; `read(columns)` gives those columns of them."""
    summary.count(kind, rows)
    need_rank = [] if rank is not None else ["rank"]
    if kind == KIND_EVENT:
        t = read(["cat", "device", *need_rank])
        summary.add_events(t.column("cat"))
        ranks = arrow.values(t.column("rank"), fill=-1) if rank is None else np.full(t.num_rows, rank)
        summary.add_devices(t.column("cat"), t.column("device"), ranks)
        if rank is None:
            summary.add_ranks(r for r in np.unique(ranks) if r >= 0)
    elif kind == KIND_STEP:
        t = read([*need_rank, *STEP_COLUMNS])
        summary.add_steps(t, rank)
        if rank is None:
            summary.add_ranks(t.column("rank").unique().to_pylist())


def _add_rows(summary: Summary, table: pa.Table, rank: Optional[int]) -> None:
    """Rows of any kinds, kind by kind in the order the kinds first appear."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return
    kind = table.column("kind").combine_chunks()
    kind = kind.dictionary_decode() if pa.types.is_dictionary(kind.type) else kind
    if rank is not None:
        summary.add_ranks([rank])
    else:
        summary.add_ranks(table.column("rank").unique().to_pylist())
    for value in pc.unique(kind).to_pylist():
        if not value:
            continue
        rows = table.filter(pc.equal(kind, value))
        _add_kind(summary, value, rows.num_rows, rows.select, rank)


def only_value(group: pq.RowGroupMetaData, column: str):
    """The one value `column` takes in a row group, by its statistics (None: several, or unknown)."""
    at = next((j for j in range(group.num_columns) if group.column(j).path_in_schema == column), None)
    if at is None:
        return None
    stats = group.column(at).statistics
    if stats is None or not stats.has_min_max or stats.null_count:
        return None
    return stats.min if stats.min == stats.max else None
