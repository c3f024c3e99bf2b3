"""What a capture holds (`tracekit info`): ranks, devices, steps, row counts by kind and by category.

    summarize(path)              # a capture file or folder on disk: constant memory, nothing loaded
    Capture.summary()            # the same document of a capture in memory (store.Capture)

Both feed one `Summary`, so the two cannot disagree. A capture file's writer (store.CaptureWriter,
store.write_capture) keeps the `Summary` of the rows it writes, all but the list of step rows, in the
file's footer (ROWS_KEY: `Summary.stored`, computed by the same methods as below, in the decode
workers for the rows they encode): on disk, a file whose stored document counts as many rows as its
footer says is summarised from that document and its step row groups (one row per step), whatever
its size: nothing else is read. A file without it (written before it, or by another writer), or
whose count disagrees, is read row group by row group, only what the summary needs: each row
group's `kind` and `rank` statistics (written by CaptureWriter) say which kinds and ranks it holds,
so the `kind` column is read only for a group of mixed kinds (a file written whole, `analyze
--store`) and `rank` only for a group of several ranks; event rows cost two columns (`cat`, counted
on its codes, and `device`: a rank's devices are those its device activity ran on), step rows are
read whole. The memory is then one row group's few columns.
"""

from __future__ import annotations

import functools
import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import arrow, files
from tracekit.data.files import Location
from tracekit.data.schema import DEVICE_ACTIVITY_CATS, KIND_EVENT, KIND_STEP

STEP_COLUMNS = ["step", "name", "ts_ns", "dur_ns"]  # a step row's figures (besides its rank)
NO_CAT = "(no cat)"
# The Parquet footer key of a capture file's stored summary of its rows (module docstring).
ROWS_KEY = b"tracekit.rows"


class Summary:
    """The summary document, accumulated from rows given kind by kind, in the table's order.
    `steps`: keep the step rows' list (False: count them only, as a file's stored summary does)."""

    def __init__(self, steps: bool = True) -> None:
        self.by_kind: dict[str, int] = {}
        self.by_cat: dict[str, int] = {}
        self.ranks: set[int] = set()
        self.devices: set[tuple[int, int]] = set()
        self.step_rows: list[dict] = []
        self._steps = steps

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
        if not self._steps:
            return
        for row in table.select(["rank", *STEP_COLUMNS] if rank is None else STEP_COLUMNS).to_pylist():
            self.step_rows.append({"rank": rank, **row} if rank is not None else row)

    def add_devices(self, cat: pa.ChunkedArray, device: pa.ChunkedArray, ranks: np.ndarray) -> None:
        """Event rows' categories, devices (null: none) and ranks: the (rank, device) pairs of their
        device activity (kernels, copies, sets)."""
        rows, start = [], 0
        for chunk in cat.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            codes, names = arrow.codes(chunk)
            is_device = np.zeros(len(codes), dtype=bool)
            for code in (i for i, n in enumerate(names) if n in DEVICE_ACTIVITY_CATS):
                is_device |= codes == code
            rows.append(np.flatnonzero(is_device) + start)
            start += len(codes)
        if not rows or not (at := np.concatenate(rows)).size:
            return
        d = _values_at(device, at)
        r = ranks[at]
        ok = (d >= 0) & (r >= 0)
        r, d = r[ok], d[ok]
        if len(r) and r.min() == r.max():  # one rank (a parse's chunk, a part file): its devices
            self.devices.update((int(r[0]), int(x)) for x in arrow.distinct(d))
            return
        keys = arrow.distinct((r.astype(np.int64) << 32) | d.astype(np.int64))
        self.devices.update((int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys)

    def add_table(self, table: pa.Table, rank: Optional[int] = None) -> None:
        """Rows of any kinds (schema.SCHEMA columns; without rank when `rank` is given), kind by kind
        in the order the kinds first appear."""
        _add_rows(self, table, rank)

    def stored(self) -> dict:
        """The document a capture file stores of its rows (ROWS_KEY, beside the writer's row count):
        all of the summary but the step rows' list."""
        return {
            "by_kind": dict(self.by_kind),
            "by_cat": dict(self.by_cat),
            "ranks": sorted(self.ranks),
            "devices": [[r, d] for r, d in sorted(self.devices)],
        }

    def merge(self, doc: dict) -> None:
        """Add the rows a `stored` document summarises."""
        for kind, n in doc["by_kind"].items():
            self.count(kind, int(n))
        for cat, n in doc["by_cat"].items():
            self._add_cat(cat, int(n))
        self.add_ranks(doc["ranks"])
        self.devices.update((int(r), int(d)) for r, d in doc["devices"])

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


def rows_metadata(summary: Summary, rows: int) -> dict[bytes, bytes]:
    """The footer entry (ROWS_KEY) a capture file's writer adds for the `rows` rows it wrote, whose
    Summary(steps=False) is `summary`."""
    return {ROWS_KEY: json.dumps({"rows": rows, **summary.stored()}).encode()}


def stored_rows(kv: Optional[dict], num_rows: int) -> Optional[dict]:
    """A file's stored summary of its rows (ROWS_KEY of its footer's key-value metadata `kv`), or None:
    none stored, not readable, or counting other than the file's `num_rows` rows."""
    raw = (kv or {}).get(ROWS_KEY)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        ok = isinstance(doc, dict) and doc.get("rows") == num_rows
        ok = ok and all(isinstance(doc.get(k), t) for k, t in _STORED_TYPES.items())
    except ValueError:
        return None
    return doc if ok else None


_STORED_TYPES = {"by_kind": dict, "by_cat": dict, "ranks": list, "devices": list}


def _add_file(summary: Summary, loc: Location, rank: Optional[int]) -> None:
    """One Parquet file's rows; `rank`: a part file of the folder form (no rank column)."""
    with files.open_read(loc) as fh:
        pf = pq.ParquetFile(fh)
        names = pf.schema_arrow.names
        stored = stored_rows(pf.metadata.metadata, pf.metadata.num_rows)
        if stored is not None:
            summary.merge(stored)
            _add_step_rows(summary, pf, rank)
            return
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


def _add_step_rows(summary: Summary, pf: pq.ParquetFile, rank: Optional[int]) -> None:
    """The step rows' list of a file whose other figures are stored: its step row groups, and the step
    rows of its groups of mixed kinds."""
    need_rank = [] if rank is not None else ["rank"]
    for i in range(pf.metadata.num_row_groups):
        group = pf.metadata.row_group(i)
        kind = only_value(group, "kind")
        if group.num_rows == 0 or kind not in (KIND_STEP, None):
            continue
        if kind == KIND_STEP:
            summary.add_steps(pf.read_row_group(i, columns=[*need_rank, *STEP_COLUMNS]), rank)
            continue
        t = pf.read_row_group(i, columns=["kind", *need_rank, *STEP_COLUMNS])
        codes, names = kind_codes(t.column("kind"))
        if KIND_STEP in names:
            summary.add_steps(arrow.filter_rows(t, codes == names.index(KIND_STEP)), rank)


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
            summary.add_ranks(r for r in arrow.distinct(ranks) if r >= 0)
    elif kind == KIND_STEP:
        t = read([*need_rank, *STEP_COLUMNS])
        summary.add_steps(t, rank)
        if rank is None:
            summary.add_ranks(_ranks(t.column("rank")))


def _add_rows(summary: Summary, table: pa.Table, rank: Optional[int]) -> None:
    """Rows of any kinds, kind by kind in the order the kinds first appear (no pyarrow.compute: the
    decode workers summarise their chunks with this)."""
    if table.num_rows == 0:
        return
    codes, names = kind_codes(table.column("kind"))
    summary.add_ranks([rank] if rank is not None else _ranks(table.column("rank")))
    if codes.min() == codes.max():  # one kind (or none): every chunk of a parse
        order = codes[:1]
    else:
        present, first = np.unique(codes, return_index=True)
        order = present[np.argsort(first)]
    for code in order:
        value = names[code] if code >= 0 else None
        if not value:
            continue
        rows = table if len(order) == 1 else arrow.filter_rows(table, codes == code)
        _add_kind(summary, value, rows.num_rows, rows.select, rank)


def kind_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """A string (or dictionary) column's codes (-1: null) and the names they index, over its chunks
    (whose dictionaries may differ)."""
    names: list = []
    index: dict = {}
    parts = []
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
        if not pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_encode()
        codes, local = arrow.codes(chunk)
        remap = np.array([index.setdefault(n, len(index)) for n in local] + [-1], dtype=np.int32)
        parts.append(remap[codes])  # code -1 (null) reads the last: -1
    names = list(index)
    return (np.concatenate(parts) if parts else np.zeros(0, np.int32)), names


def _ranks(column: pa.ChunkedArray) -> np.ndarray:
    """The distinct ranks of a rank column (nulls left out)."""
    values = arrow.values(column, fill=0)
    return arrow.distinct(values[arrow.valid(column)] if column.null_count else values)


def _values_at(column: pa.ChunkedArray, at: np.ndarray) -> np.ndarray:
    """arrow.values(column, fill=-1)[at] (sorted row numbers), without converting the other rows."""
    chunks = column.chunks
    if len(chunks) != 1 or len(at) * 4 > len(column):
        return arrow.values(column, fill=-1)[at]
    [chunk] = chunks
    if chunk.null_count == len(chunk):
        return np.full(len(at), -1, np.int64)
    raw = np.frombuffer(
        chunk.buffers()[1], dtype=arrow._np_dtype(chunk.type), count=chunk.offset + len(chunk)
    )
    out = raw[chunk.offset + at].astype(np.int64)
    if chunk.null_count:
        bitmap = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)
        pos = chunk.offset + at
        out[(bitmap[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1 == 0] = -1
    return out


def only_value(group: pq.RowGroupMetaData, column: str):
    """The one value `column` takes in a row group, by its statistics (None: several, or unknown)."""
    at = next((j for j in range(group.num_columns) if group.column(j).path_in_schema == column), None)
    if at is None:
        return None
    stats = group.column(at).statistics
    if stats is None or not stats.has_min_max or stats.null_count:
        return None
    return stats.min if stats.min == stats.max else None


def may_hold_category(path: Location, meta: dict, cat: str) -> bool:
    """Whether a capture (file or folder) may hold events of category `cat`, by the summaries its files'
    footers store (nothing else is read): False only where every file says it holds none."""
    parts = (
        [files.join(path, *p["path"].split("/")) for p in meta.get("parts") or []]
        if meta.get("form") == "folder"
        else [path]
    )
    for loc in parts:
        with files.open_read(loc) as fh:
            md = pq.ParquetFile(fh).metadata
        stored = stored_rows(md.metadata, md.num_rows)
        if stored is None or stored["by_cat"].get(cat):
            return True
    return False
