"""Several runs of one configuration as one side of a diff (`tracekit diff A1,A2,A3 B1,B2,B3`).

The steps of one run share the machine's state while it ran (other load, clock, cache): they vary less
among themselves than between runs, so intervals from one run per side understate the noise when that
state drifts. Repeating each configuration and alternating the runs (A B B A ...) spreads the drift over
both sides; `merge_reports` then pools the steps of the repeats, so that the intervals see the
run-to-run variation too.

Pooling is refused unless the runs are repeats: the same workload, knobs, schedule, versions and Python
(`comparable.compare_manifests`; only notes such as the host name may differ).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from tracekit.analysis.memory_model import DeviceMemory
from tracekit.analysis.model import DeviceReport, HostReport, HostStep, OpStat, Report
from tracekit.compare import comparable
from tracekit.compare.comparable import Role
from tracekit.compare.diff import STEP_OFFSET, facts, step_values
from tracekit.data import files
from tracekit.data.store import is_capture, read_meta
from tracekit.errors import NotComparableError
from tracekit.parse.parser import find_manifest


def group_label(runs: Sequence[str]) -> str:
    """'py3.9-1', 'py3.9-2' → 'py3.9 ×2' (the common name, less a trailing run number)."""
    names = [r for r in runs if r]
    if not names:
        return f"×{len(runs)}"
    prefix = names[0]
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    prefix = re.sub(r"[-_ #.]*\d*$", "", prefix) if len(set(names)) > 1 else prefix
    return f"{prefix or names[0]} ×{len(runs)}"


def _check_repeats(reports: Sequence[Report], names: Sequence[str]) -> None:
    first = reports[0]
    first_facts = facts(first, step_values(first))
    for r, name in zip(reports[1:], names[1:]):
        verdict = comparable.check(first.capture, r.capture, first_facts, facts(r, step_values(r)))
        diffs = [d for d in verdict.differences if d.role is not Role.NOTE]
        if diffs:
            raise NotComparableError(
                f"{names[0]} and {name} are grouped with ',' but are not repeats of one configuration "
                f"({'; '.join(d.describe() for d in diffs)}); group only runs of the same configuration"
            )


def _merge_manifests(manifests: Sequence[Mapping[str, Any]], label: str) -> dict[str, Any]:
    merged = dict(manifests[0])
    merged["run"] = label
    merged["group"] = [m.get("run") for m in manifests]
    merged["group_calibration"] = [m.get("calibration") for m in manifests]  # compare.control reads each
    for key in ("unprofiled_step_ms", "unprofiled_step_ns"):
        lists = [v for v in (m.get(key) for m in manifests) if isinstance(v, (list, tuple))]
        if len(lists) == len(manifests):
            merged[key] = [x for v in lists for x in v]
            merged["group_unprofiled_counts"] = [len(v) for v in lists]
    # the loader waits of the same unprofiled steps (tracekit.capture.loader), where every run timed them
    waits = [
        v for v in (m.get("unprofiled_loader_wait_ms") for m in manifests) if isinstance(v, (list, tuple))
    ]
    merged["unprofiled_loader_wait_ms"] = (
        [x for v in waits for x in v] if len(waits) == len(manifests) else None
    )
    # per-step peak memory: each rank's profiled steps, run after run
    rank_lists = [m.get("ranks") or [] for m in manifests]
    records = all(isinstance(rec, Mapping) for runs in rank_lists for rec in runs)
    if records and rank_lists[0] and all(len(r) == len(rank_lists[0]) for r in rank_lists):
        ranks = []
        for j, rec in enumerate(rank_lists[0]):
            peaks: list[Any] = []
            for runs in rank_lists:
                p = (runs[j].get("profiled") or {}).get("peak_memory_bytes")
                peaks.extend(p if isinstance(p, (list, tuple)) else [])
            ranks.append({**rec, "profiled": {**(rec.get("profiled") or {}), "peak_memory_bytes": peaks}})
        merged["ranks"] = ranks
    return merged


def check_distinct_runs(paths: Sequence[Any]) -> None:
    """Each run of a pooled side once: a path named twice (`A,A,A,A`), or two copies of one run (the
    same trace bytes, by the digests a capture records or of the trace files), counted its steps several
    times ("24 steps in 4 runs" of one capture: zero-width intervals, a change called significant)."""
    seen: dict[Any, Any] = {}
    for path in paths:
        key = _run_identity(path)
        if key in seen:
            what = (
                "name one run twice" if _same_file(seen[key], path) else "are one run (the same trace bytes)"
            )
            raise NotComparableError(
                f"{seen[key]} and {path} {what} in one side: pooled, its steps would count twice "
                "(intervals of zero width); name each run once"
            )
        seen[key] = path


def _same_file(a: Any, b: Any) -> bool:
    import os

    from tracekit.data import files

    if files.is_uri(a) or files.is_uri(b):
        return str(a) == str(b)
    return os.path.realpath(a) == os.path.realpath(b)


def _run_identity(path: Any) -> Any:
    """What makes a run itself: the digests of its trace files (a capture's recorded ones, or of the
    trace files named), else its real path."""
    import os

    from tracekit.data import files
    from tracekit.data.store import file_digest, is_capture, read_meta, source_digest
    from tracekit.parse.parser import find_trace_files

    if is_capture(path):
        digests = [source_digest(s) for s in read_meta(path).get("sources") or []]
        if digests and all(d is not None for d in digests):
            return tuple(sorted(digests))
    elif files.exists(path):
        return tuple(sorted(file_digest(p) for p, _ in find_trace_files([path])))
    return str(path) if files.is_uri(path) else os.path.realpath(path)


def merge_reports(reports: Sequence[Report], names: Sequence[str] | None = None) -> Report:
    """The steps of several runs of one configuration as one Report (step numbers offset per run)."""
    if len(reports) == 1:
        return reports[0]
    names = (
        list(names)
        if names
        else [str((r.capture or {}).get("run") or f"run {i + 1}") for i, r in enumerate(reports)]
    )
    _check_repeats(reports, names)

    devices: dict[tuple[int, int], list] = {}
    first_device: dict[tuple[int, int], DeviceReport] = {}
    peaks: dict[tuple[int, int], int] = {}
    host: list[HostStep] = []
    ops: dict[str, list[tuple[int, int, int]]] = {}
    memory: dict[tuple[int, int], DeviceMemory] = {}
    for i, r in enumerate(reports):
        off = i * STEP_OFFSET
        for m in r.memory:
            shifted = tuple(replace(s, step=s.step + off) for s in m.steps)
            got = memory.get((m.rank, m.device))
            memory[(m.rank, m.device)] = replace(m, steps=shifted if got is None else got.steps + shifted)
        for d in r.devices:
            key = (d.rank, d.device)
            first_device.setdefault(key, d)
            devices.setdefault(key, []).extend(replace(s, step=s.step + off) for s in d.samples)
            if d.peak_memory_bytes:
                peaks[key] = max(peaks.get(key, 0), d.peak_memory_bytes)
        host.extend(replace(h, step=h.step + off) for h in r.host.steps)
        for op in r.op_stats:
            ops.setdefault(op.name, []).extend(
                (s + off, c, ns) for s, c, ns in zip(op.steps, op.calls_per_step, op.ns_per_step)
            )
    label = group_label(names)
    return replace(
        reports[0],
        capture=_merge_manifests([r.capture or {} for r in reports], label),
        devices=tuple(
            replace(first_device[k], samples=tuple(v), peak_memory_bytes=peaks.get(k))
            for k, v in devices.items()
        ),
        host=HostReport(tuple(host)),
        memory=tuple(memory.values()),
        op_stats=tuple(
            OpStat(name, tuple(s for s, _, _ in v), tuple(c for _, c, _ in v), tuple(ns for _, _, ns in v))
            for name, v in ops.items()
        ),
    )


# -- runs grouped by what varies (`tracekit diff OUT/<workload> --by python`) -------------------------------

BY_ALIASES = {"python": "python.version", "torch": "torch.version", "device": "device.name"}


def _by_path(by: str) -> str:
    """`python` → python.version; a dotted manifest field as it is; a bare knob name → knobs.<name>."""
    if by in BY_ALIASES:
        return BY_ALIASES[by]
    return by if "." in by else f"knobs.{by}"


def _natural(value: Any) -> tuple:
    """'3.10.13' after '3.9.18': numbers compared as numbers."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-_ ]", str(value)))


def find_runs(folder: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The captures in a folder `tracekit capture` wrote (OUT/<workload>/): each `<run>.parquet`, and each
    run folder (traces + manifest.json) that has no Parquet file beside it (`capture --no-parse`), with
    its manifest. Sorted by name."""

    files.check_input(folder)
    if not files.is_dir(folder):
        raise NotComparableError(
            f"{folder} is a file: --by pools the runs in a folder `tracekit capture -o OUT` wrote "
            "(OUT/<workload>); name that folder, or compare captures by name (tracekit diff A B)"
        )
    found: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for name in sorted(files.list_dir(folder)):
        loc = files.join(folder, name)
        if name.endswith(".parquet") or (files.is_dir(loc) and is_capture(loc)):
            manifest = (read_meta(loc) or {}).get("manifest")
            stem = name[: -len(".parquet")] if name.endswith(".parquet") else name
            if isinstance(manifest, Mapping):
                found[stem] = (str(loc), manifest)
    for name in sorted(files.list_dir(folder)):
        loc = files.join(folder, name)
        if name not in found and files.is_dir(loc):
            manifest = find_manifest([loc])  # type: ignore[list-item]  # a Location: local or a URI
            if manifest is not None:
                found[name] = (str(loc), manifest)
    return [found[k] for k in sorted(found)]


def group_runs(runs: Sequence[tuple[str, Mapping[str, Any]]], by: str) -> list[tuple[str, list[str]]]:
    """(value, paths) per value of the manifest field `by` (see `_by_path`), in natural order of the
    values (3.9 before 3.10): the sides of a diff, the first one the baseline. Runs without the field are
    refused: they cannot be placed."""
    path = _by_path(by)
    groups: dict[str, list[str]] = {}
    for loc, manifest in runs:
        value: Any = manifest
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            raise NotComparableError(
                f"--by {by}: {loc} has no {path} in its manifest; name the captures instead of a folder"
            )
        groups.setdefault(str(value), []).append(loc)
    return [(k, groups[k]) for k in sorted(groups, key=_natural)]
