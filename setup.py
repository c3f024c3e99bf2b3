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
        )
    ]
)
