"""Build the optional C decoder (tracekit/parse/_fastscan.c); everything else is configured in pyproject.toml.

The extension is optional: when it cannot be compiled, the install goes on and tracekit decodes with
msgspec (`tracekit info` says which decoder runs)."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup


def _sha(source: str) -> list:
    """The source's hash compiled into its module (tracekit.native: a build from other sources is not run)."""
    digest = hashlib.sha256(Path(__file__).with_name("tracekit").joinpath(source).read_bytes()).hexdigest()
    return [("SOURCE_SHA", f'"{digest[:16]}"')]


setup(
    ext_modules=[
        Extension(
            "tracekit.parse._fastscan",
            sources=["tracekit/parse/_fastscan.c"],
            extra_compile_args=["-O2"],
            define_macros=_sha("parse/_fastscan.c"),
            optional=True,
        ),
        # Moving a part file's row groups when a parse's workers' Parquet files are stitched into one
        # (tracekit.data.stitch; its Python path when this cannot be compiled).
        Extension(
            "tracekit.data._stitch",
            sources=["tracekit/data/_stitch.c"],
            extra_compile_args=["-O2"],
            define_macros=_sha("data/_stitch.c"),
            optional=True,
        ),
        # The what-if replay's loops (tracekit.whatif.loops; their Python definitions run when this
        # cannot be compiled, much slower on a large capture).
        Extension(
            "tracekit.whatif._loops",
            sources=["tracekit/whatif/_loops.c"],
            extra_compile_args=["-O2"],
            define_macros=_sha("whatif/_loops.c"),
            optional=True,
        ),
    ]
)
