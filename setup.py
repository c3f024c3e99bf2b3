"""Build the optional C decoder (tracekit/parse/_fastscan.c); everything else is configured in pyproject.toml.

The extension is optional: when it cannot be compiled, the install goes on and tracekit decodes with
msgspec (`tracekit info` says which decoder runs)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.parse._fastscan",
            sources=["tracekit/parse/_fastscan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # Moving a part file's row groups when a parse's workers' Parquet files are stitched into one
        # (tracekit.data.stitch; its Python path when this cannot be compiled).
        Extension(
            "tracekit.data._stitch",
            sources=["tracekit/data/_stitch.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # The what-if replay's loops (tracekit.whatif.loops; their Python definitions run when this
        # cannot be compiled, much slower on a large capture).
        Extension(
            "tracekit.whatif._loops",
            sources=["tracekit/whatif/_loops.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
