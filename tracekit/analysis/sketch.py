"""A mergeable summary of a distribution of durations (ns): exact while small, a log histogram beyond.

The per-rank analyses of a job each summarise their kernels' durations; the driver merges the
summaries of all ranks. Count, total, min and max merge exactly. The median needs the values: a
summary keeps them while the merged count is at most EXACT_VALUES, so a capture of a few ranks (and
every single-rank capture below that) gets the exact median `np.median` gives. Beyond, values are
counted in buckets of relative width RELATIVE_ERROR × 2 (bucket k holds [γ^k, γ^(k+1)) ns with
γ = 1 + 2·RELATIVE_ERROR, 0 its own bucket), and the median is the middle of the median's bucket:
within RELATIVE_ERROR of the exact one. What is exact and what is bucketed depends only on the
merged count, never on how the values were split between ranks or merged: every path (one
process, a pool, Ray) gives the same figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

EXACT_VALUES = 4096
RELATIVE_ERROR = 0.005
_LOG_GAMMA = math.log1p(2 * RELATIVE_ERROR)
_ZERO = np.iinfo(np.int64).min  # the bucket of the value 0


@dataclass(frozen=True)
class Sketch:
    count: int = 0
    total: int = 0
    min: int = 0
    max: int = 0
    values: Optional[np.ndarray] = None  # int64, while count <= EXACT_VALUES
    keys: Optional[np.ndarray] = None  # bucket keys (sorted), beyond
    counts: Optional[np.ndarray] = None  # values per bucket

    @classmethod
    def of(cls, values: np.ndarray) -> Sketch:
        values = np.asarray(values, dtype=np.int64)
        if values.size == 0:
            return cls()
        s = cls(int(values.size), int(values.sum()), int(values.min()), int(values.max()), values)
        return s if values.size <= EXACT_VALUES else s._bucketed()

    def _bucketed(self) -> Sketch:
        if self.values is None:
            return self
        keys, counts = np.unique(_bucket(self.values), return_counts=True)
        return Sketch(self.count, self.total, self.min, self.max, None, keys, counts.astype(np.int64))

    @staticmethod
    def merge(sketches: Iterable[Sketch]) -> Sketch:
        parts = [s for s in sketches if s.count]
        if not parts:
            return Sketch()
        if len(parts) == 1:
            return parts[0]
        count = sum(s.count for s in parts)
        head = (count, sum(s.total for s in parts), min(s.min for s in parts), max(s.max for s in parts))
        if count <= EXACT_VALUES:
            return Sketch(*head, values=np.concatenate([s.values for s in parts]))
        bucketed = [s._bucketed() for s in parts]
        keys = np.concatenate([s.keys for s in bucketed])
        counts = np.concatenate([s.counts for s in bucketed])
        uniq, inverse = np.unique(keys, return_inverse=True)
        return Sketch(*head, keys=uniq, counts=np.bincount(inverse, weights=counts).astype(np.int64))

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def median(self) -> float:
        if not self.count:
            return 0.0
        if self.values is not None:
            return float(np.median(self.values))
        assert self.keys is not None and self.counts is not None
        cum = np.cumsum(self.counts)
        lo, hi = (self.count - 1) // 2, self.count // 2  # the middle value(s), 0-based
        at = np.searchsorted(cum, [lo + 1, hi + 1])
        mids = [self._middle(int(self.keys[i])) for i in at]
        return float(sum(mids) / 2)

    def _middle(self, key: int) -> float:
        if key == _ZERO:
            return 0.0
        return min(max(math.exp((key + 0.5) * _LOG_GAMMA), float(self.min)), float(self.max))


def _bucket(values: np.ndarray) -> np.ndarray:
    out = np.full(values.size, _ZERO, dtype=np.int64)
    pos = values > 0
    out[pos] = np.floor(np.log(values[pos].astype(np.float64)) / _LOG_GAMMA).astype(np.int64)
    return out
