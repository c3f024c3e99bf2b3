"""tracekit's version, in one place (the package face, the Parquet metadata and the manifests read it)."""

__version__ = "0.1.0"
