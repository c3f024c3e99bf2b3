"""tracekit.native: a C extension built from other sources than the ones beside it is not run."""

from __future__ import annotations

import types

import pytest

from tracekit import native


def _module(sha: str | None) -> types.ModuleType:
    m = types.ModuleType("tracekit.fake._ext")
    if sha is not None:
        m.SOURCE_SHA = sha  # type: ignore[attr-defined]
    return m


def test_a_build_of_this_source_runs():
    m = _module(native.source_sha(native.ROOT / "whatif" / "_loops.c"))
    assert native.current(m, "whatif/_loops.c") is m


@pytest.mark.parametrize("sha", [None, "", "0123456789abcdef"])
def test_a_build_of_other_sources_is_not_run_and_says_how_to_rebuild(sha):
    with pytest.warns(
        RuntimeWarning, match=r"built from another version of tracekit/whatif/_loops\.c.*rebuild"
    ):
        assert native.current(_module(sha), "whatif/_loops.c") is None


def test_without_its_source_a_build_is_taken_as_it_is_and_none_stays_none():
    m = _module(None)
    assert native.current(m, "no/such/source.c") is m
    assert native.current(None, "whatif/_loops.c") is None


def test_the_extensions_here_are_built_from_their_sources():
    # the ones this checkout built (make's editable install): each runs, with its source's hash
    from tracekit.data import stitch
    from tracekit.parse import fast
    from tracekit.whatif import loops

    for mod, source in (
        (fast._fastscan, "parse/_fastscan.c"),
        (stitch._stitch, "data/_stitch.c"),
        (loops._loops, "whatif/_loops.c"),
    ):
        if mod is not None:
            assert native.source_sha(native.ROOT / source) == mod.SOURCE_SHA
