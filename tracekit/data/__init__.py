"""Stage 1, the data model: what a capture is on disk and in memory.

schema (the declarative column list, SCHEMA_VERSION, the Parquet metadata), store (the `Capture` object,
atomic Parquet writing and reading, the version check), arrow (numpy ↔ Arrow buffers without pandas),
fs (local paths and URIs: S3 and any filesystem pyarrow or fsspec knows; atomic writes to object stores).

May import: tracekit.errors only. Every later stage reads captures through this package.
"""
