"""Statistics for the diff: is a change between two captures real, or noise between steps?

A capture holds a handful of profiled steps (the default schedule records 6). Every figure the diff
shows is compared on those per-step values, with an interval, never as two single numbers:

- `rank_shift` — the Hodges–Lehmann estimate of the shift B − A (the median of all pairwise differences
  ``b_j − a_i``) with its distribution-free confidence interval from the exact Mann–Whitney distribution
  (Hollander & Wolfe, *Nonparametric Statistical Methods*, §4.3). It makes no normality assumption and
  is honest about tiny samples: with 3 steps against 3 no 95 % interval exists (the smallest two-sided
  p-value is 2/20), so the interval is unbounded and the change is never called significant.
  The same estimate on ``log`` values is the log ratio B/A (for positive quantities).
- `bootstrap_shift` — for figures that are ratios of sums over steps (GPU utilisation = Σbusy / Σdur,
  total time = Σdur): a percentile bootstrap over steps. It gives no interval where the rank test could
  not either (too few steps).

Both are deterministic and **exactly antisymmetric**: ``estimate(B, A) == -estimate(A, B)`` bit for bit,
and ``estimate(A, A)`` is 0 and never significant. The rank estimate gets this from the symmetry of the
pairwise differences (IEEE subtraction is antisymmetric) and order-statistic intervals
``[D(k), D(N+1-k)]``; the bootstrap gets it by seeding each sample's resampling from the sample's own
content (`_seed_for`), so a sample is resampled the same way whichever side it is on, and by taking the
interval as symmetric order statistics rather than interpolated quantiles.

A change is *significant* only when its interval excludes zero.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Callable, Optional, Sequence

import numpy as np

DEFAULT_CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000  # resamples of the bootstrap; enough for stable 2.5 % / 97.5 % order statistics
BOOTSTRAP_SEED = 20240607  # mixed into every sample's content seed
EXACT_MAX_PAIRS = 2500  # up to n·m pairs the Mann–Whitney distribution is computed exactly, else normal
MAX_PAIRS = 4_000_000  # above this the pairwise differences are taken on evenly spaced quantiles

METHOD_RANK = "hodges-lehmann"
METHOD_BOOTSTRAP = "bootstrap"
METHOD_SINGLE = "single value"
# pooled repeats (compare.group): the change of the median of the runs' values, with the rank test's
# interval over the runs (`median_shift`)
METHOD_RUNS = "median over runs"


@dataclass(frozen=True)
class Interval:
    """A closed interval; bounds may be infinite (too few samples for the requested confidence)."""

    low: float
    high: float

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def __neg__(self) -> Interval:
        return Interval(-self.high, -self.low)


@dataclass(frozen=True)
class Estimate:
    """The change from A to B of one figure.

    `shift` is B − A in the figure's unit; `log_ratio` is log(B/A) (None when a value is not positive).
    Both are antisymmetric: swapping A and B negates them and their intervals. `significant` is true only
    when the interval of `shift` excludes zero. `method` names how the interval was computed.
    """

    method: str
    n_a: int
    n_b: int
    shift: float
    shift_ci: Optional[Interval]
    log_ratio: Optional[float] = None
    log_ratio_ci: Optional[Interval] = None
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def significant(self) -> bool:
        return self.shift_ci is not None and self.shift_ci.excludes_zero()

    @property
    def ratio(self) -> Optional[float]:
        """B/A (from the log ratio): 1.10 means B is 10 % higher."""
        return None if self.log_ratio is None else math.exp(self.log_ratio)

    def reversed(self) -> Estimate:
        """The same comparison seen from B (what `estimate(B, A)` returns)."""
        return Estimate(
            method=self.method,
            n_a=self.n_b,
            n_b=self.n_a,
            shift=-self.shift,
            shift_ci=None if self.shift_ci is None else -self.shift_ci,
            log_ratio=None if self.log_ratio is None else -self.log_ratio,
            log_ratio_ci=None if self.log_ratio_ci is None else -self.log_ratio_ci,
            confidence=self.confidence,
        )


def _as_array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


# -- rank test: Hodges–Lehmann shift with the Mann–Whitney interval --------------------------------------


@lru_cache(maxsize=256)
def _mann_whitney_cdf(n: int, m: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..n·m under H0 (no ties), by the recurrence
    p(n, m, u) = n/(n+m)·p(n-1, m, u-m) + m/(n+m)·p(n, m-1, u)."""
    # prev[j] holds the distribution for (i-1, j); built row by row over i.
    size = n * m + 1
    row_prev = [np.zeros(size) for _ in range(m + 1)]
    for j in range(m + 1):
        row_prev[j][0] = 1.0  # i = 0: U is 0
    for i in range(1, n + 1):
        row = [np.zeros(size) for _ in range(m + 1)]
        row[0][0] = 1.0  # j = 0: U is 0
        for j in range(1, m + 1):
            # The largest of the i+j values is from A (prob i/(i+j)): it adds j to U (it beats all j B's
            # under U = #{a > b}); or from B (prob j/(i+j)): it adds nothing.
            shifted = np.zeros(size)
            shifted[j:] = row_prev[j][: size - j]
            row[j] = (i / (i + j)) * shifted + (j / (i + j)) * row[j - 1]
        row_prev = row
    return tuple(np.cumsum(row_prev[m]).tolist())


def _rank_k(n: int, m: int, confidence: float) -> int:
    """The order statistic index k (1-based) of the interval [D(k), D(N+1-k)]: the largest k with
    P(U <= k-1) <= alpha/2. 0 means no interval of this confidence exists (too few samples)."""
    alpha = 1.0 - confidence
    pairs = n * m
    if pairs <= EXACT_MAX_PAIRS:
        cdf = _mann_whitney_cdf(n, m)
        k = 0
        while k < pairs and cdf[k] <= alpha / 2 + 1e-12:
            k += 1
        return k

    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(0, int(math.floor(pairs / 2 - z * math.sqrt(n * m * (n + m + 1) / 12.0))))


def _thin(x: np.ndarray, limit: int) -> np.ndarray:
    """At most `limit` evenly spaced order statistics of x (keeps the pairwise step bounded)."""
    if len(x) <= limit:
        return x
    idx = np.linspace(0, len(x) - 1, limit).round().astype(int)
    return np.sort(x)[idx]


def _hl(a: np.ndarray, b: np.ndarray, k: int) -> tuple[float, Interval]:
    d = np.sort((b[None, :] - a[:, None]).ravel())
    n = len(d)
    # The median of the pairwise differences: for an even count the two middle values are averaged as
    # (x + y) / 2, which negates exactly when every difference does.
    mid = n // 2
    est = float(d[mid]) if n % 2 else float((d[mid - 1] + d[mid]) / 2.0)
    if k <= 0:
        return est, Interval(-math.inf, math.inf)
    return est, Interval(float(d[k - 1]), float(d[n - k]))


def rank_shift(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> Optional[Estimate]:
    """Hodges–Lehmann shift B − A with its Mann–Whitney confidence interval; also on log values when
    every value is positive. None when either side has no values."""
    xa, xb = _as_array(a), _as_array(b)
    if len(xa) == 0 or len(xb) == 0:
        return None
    if len(xa) * len(xb) > MAX_PAIRS:
        side = int(math.sqrt(MAX_PAIRS))
        xa, xb = _thin(xa, side), _thin(xb, side)
    k = _rank_k(len(xa), len(xb), confidence)
    shift, shift_ci = _hl(xa, xb, k)
    log_ratio = log_ci = None
    if (xa > 0).all() and (xb > 0).all():
        log_ratio, log_ci = _hl(np.log(xa), np.log(xb), k)
    return Estimate(METHOD_RANK, len(xa), len(xb), shift, shift_ci, log_ratio, log_ci, confidence)


def median_shift(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> Optional[Estimate]:
    """The change of the median, median(B) − median(A) (and log of their ratio), with the Mann–Whitney
    interval of `rank_shift`: for pooled runs (a few run medians per side), where the figures shown are
    the medians of the runs, so that the change shown is the change of the figures shown (the
    Hodges–Lehmann shift of 3 against 3 values can have the other sign). Antisymmetric like rank_shift."""
    est = rank_shift(a, b, confidence)
    if est is None:
        return None
    ma, mb = float(np.median(_as_array(a))), float(np.median(_as_array(b)))
    log_ratio = math.log(mb / ma) if est.log_ratio is not None and ma > 0 and mb > 0 else None
    return replace(est, method=METHOD_RUNS, shift=mb - ma, log_ratio=log_ratio)


# -- bootstrap over steps, for ratios of sums --------------------------------------------------------------


def _seed_for(x: np.ndarray) -> int:
    """A seed that depends only on the sample's content, so it is resampled alike on either side."""
    h = hashlib.blake2b(np.ascontiguousarray(x, dtype=np.float64).tobytes(), digest_size=8)
    h.update(str(x.shape).encode())
    return int.from_bytes(h.digest(), "little") ^ BOOTSTRAP_SEED


def _resampled_stats(x: np.ndarray, stat: Callable[[np.ndarray], np.ndarray], resamples: int) -> np.ndarray:
    rng = np.random.default_rng(_seed_for(x))
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    return stat(x[idx])


def _symmetric_interval(d: np.ndarray, confidence: float) -> Interval:
    d = np.sort(d)
    n = len(d)
    k = int(math.floor((1.0 - confidence) / 2 * n))
    return Interval(float(d[k]), float(d[n - 1 - k]))


def bootstrap_shift(
    a: np.ndarray,
    b: np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Optional[Estimate]:
    """Percentile bootstrap of stat(B) − stat(A) (and of log(stat(B)/stat(A))) over steps.

    `a` and `b` are arrays of shape (steps, columns) (or (steps,)); `stat` maps a stack of resamples of
    shape (resamples, steps, columns) to one value per resample and must also accept a single sample of
    shape (1, steps, columns). None when either side has no steps.
    """
    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(xa) == 0 or len(xb) == 0:
        return None
    pa = float(stat(xa[None, ...])[0])
    pb = float(stat(xb[None, ...])[0])
    log_ratio = math.log(pb) - math.log(pa) if pa > 0 and pb > 0 else None
    if _rank_k(len(xa), len(xb), confidence) == 0:
        # A handful of steps has only a handful of distinct resamples, and their spread understates the
        # noise badly (3 steps: 10 resamples). Where not even the exact rank test could give an interval
        # of this confidence, the bootstrap gives none either.
        unbounded = Interval(-math.inf, math.inf)
        return Estimate(
            METHOD_BOOTSTRAP,
            len(xa),
            len(xb),
            pb - pa,
            unbounded,
            log_ratio,
            unbounded if log_ratio is not None else None,
            confidence,
        )
    ra = _resampled_stats(xa, stat, resamples)
    rb = _resampled_stats(xb, stat, resamples)
    shift_ci = _symmetric_interval(rb - ra, confidence)
    log_ci = None
    if log_ratio is not None and (ra > 0).all() and (rb > 0).all():
        log_ci = _symmetric_interval(np.log(rb) - np.log(ra), confidence)
    elif log_ratio is not None:
        log_ratio = None  # a resample with a zero: no interval on the ratio, so no ratio either
    return Estimate(METHOD_BOOTSTRAP, len(xa), len(xb), pb - pa, shift_ci, log_ratio, log_ci, confidence)


def single_values(a: float, b: float) -> Estimate:
    """A figure with one value per capture (a peak): the change, with no interval, never significant."""
    log_ratio = math.log(b) - math.log(a) if a > 0 and b > 0 else None
    return Estimate(METHOD_SINGLE, 1, 1, b - a, None, log_ratio, None)


def runs_for_interval(confidence: float = DEFAULT_CONFIDENCE, limit: int = 64) -> int:
    """The fewest runs per side (n against n) for which the rank test has an interval of `confidence`:
    4 at 95 % (the exact test's smallest two-sided p-value is then 2/70)."""
    for n in range(1, limit + 1):
        if _rank_k(n, n, confidence) > 0:
            return n
    return limit
