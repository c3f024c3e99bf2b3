"""stats.py: the exact Mann–Whitney distribution, the Hodges–Lehmann interval, the bootstrap, and the
algebra the diff relies on (antisymmetry, zero self-difference, determinism)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.compare.stats import (
    METHOD_BOOTSTRAP,
    METHOD_RANK,
    Interval,
    _mann_whitney_cdf,
    _rank_k,
    bootstrap_shift,
    rank_shift,
    single_values,
)

values = st.lists(st.floats(min_value=0.001, max_value=1e6, allow_nan=False), min_size=1, max_size=9)
signed = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=9)


def _brute_cdf(n: int, m: int) -> list[float]:
    """P(U <= u) by enumerating which of the n+m ranks belong to A (U = #{a > b})."""
    counts = [0] * (n * m + 1)
    for ranks_a in itertools.combinations(range(n + m), n):
        in_a = set(ranks_a)
        u = sum(sum(1 for r in range(i) if r not in in_a) for i in ranks_a)
        counts[u] += 1
    total = sum(counts)
    return list(itertools.accumulate(c / total for c in counts))


@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (3, 3), (4, 2), (5, 5), (6, 4)])
def test_mann_whitney_distribution_matches_enumeration(n, m):
    assert _mann_whitney_cdf(n, m) == pytest.approx(_brute_cdf(n, m), abs=1e-12)


@pytest.mark.parametrize(
    "n,m,k",
    # k - 1 is the two-sided 5 % critical value of U in the published tables (Mann & Whitney 1947);
    # 0 means the sample is too small for any 95 % interval.
    [(3, 3, 0), (4, 4, 1), (5, 5, 3), (6, 6, 6), (8, 8, 14), (10, 10, 24)],
)
def test_interval_index_matches_published_critical_values(n, m, k):
    assert _rank_k(n, m, 0.95) == k


def test_large_samples_use_the_normal_approximation_close_to_exact():
    # 40 x 60 = 2400 pairs is still exact; compare with the normal rule just above the limit.
    exact = _rank_k(40, 60, 0.95)
    z = 1.959963984540054
    approx = math.floor(40 * 60 / 2 - z * math.sqrt(40 * 60 * 101 / 12))
    assert abs(exact - approx) <= 2
    assert _rank_k(60, 60, 0.95) > 0


def test_hodges_lehmann_on_a_known_example():
    # GIVEN B = A + 1 exactly  WHEN compared  THEN the shift is 1 and significant with 6 steps each
    a = [10.0, 10.4, 10.1, 9.8, 10.3, 10.0]
    b = [x + 1.0 for x in a]
    e = rank_shift(a, b)
    assert e.method == METHOD_RANK
    assert e.shift == pytest.approx(1.0)
    assert e.significant
    assert e.log_ratio == pytest.approx(math.log(11.0 / 10.0), abs=0.01)


def test_three_steps_against_three_is_never_significant():
    e = rank_shift([1.0, 1.1, 1.2], [100.0, 101.0, 102.0])
    assert e.shift_ci == Interval(-math.inf, math.inf)
    assert not e.significant


def test_zero_values_have_a_shift_but_no_ratio():
    e = rank_shift([0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 2.0, 1.0])
    assert e.log_ratio is None and e.log_ratio_ci is None
    assert e.shift == 1.0
    assert e.significant  # 4 vs 4 with every b above every a: the interval is [min, max] of differences


def test_empty_side_gives_no_estimate():
    assert rank_shift([], [1.0]) is None
    assert bootstrap_shift(np.array([]), np.array([1.0]), lambda x: x.sum(axis=-1)) is None


def test_false_positive_rate_under_no_change_is_at_most_nominal():
    # 6 vs 6 steps from the same distribution, 400 times: the exact test rejects at most 5 % (+ noise).
    rng = random.Random(7)
    hits = 0
    for _ in range(400):
        a = [rng.lognormvariate(0, 0.1) for _ in range(6)]
        b = [rng.lognormvariate(0, 0.1) for _ in range(6)]
        hits += rank_shift(a, b).significant
    assert hits / 400 <= 0.07


def test_a_real_shift_is_found_most_of_the_time():
    rng = random.Random(8)
    hits = 0
    for _ in range(200):
        a = [rng.gauss(10, 0.2) for _ in range(6)]
        b = [rng.gauss(11, 0.2) for _ in range(6)]  # +10 %, five standard deviations
        hits += rank_shift(a, b).significant
    assert hits / 200 >= 0.95


@settings(max_examples=200, deadline=None)
@given(signed, signed)
def test_rank_shift_is_exactly_antisymmetric(a, b):
    assert rank_shift(b, a) == rank_shift(a, b).reversed()


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_rank_log_ratio_is_exactly_antisymmetric(a, b):
    ab, ba = rank_shift(a, b), rank_shift(b, a)
    assert ab.log_ratio is not None
    assert ba.log_ratio == -ab.log_ratio
    assert ba.log_ratio_ci == -ab.log_ratio_ci


@settings(max_examples=200, deadline=None)
@given(signed)
def test_rank_shift_against_itself_is_zero_and_not_significant(a):
    e = rank_shift(a, a)
    assert e.shift == 0.0
    assert not e.significant


def _ratio(x: np.ndarray) -> np.ndarray:
    return x[..., 0].sum(axis=-1) / x[..., 1].sum(axis=-1)


pairs = st.lists(st.tuples(st.floats(0.0, 100.0), st.floats(100.0, 200.0)), min_size=1, max_size=8).map(
    lambda rows: np.array(rows, dtype=np.float64)
)


@settings(max_examples=60, deadline=None)
@given(pairs, pairs)
def test_bootstrap_is_exactly_antisymmetric(a, b):
    ab = bootstrap_shift(a, b, _ratio, resamples=200)
    ba = bootstrap_shift(b, a, _ratio, resamples=200)
    assert ab.method == METHOD_BOOTSTRAP
    assert ba == ab.reversed()


@settings(max_examples=60, deadline=None)
@given(pairs)
def test_bootstrap_against_itself_is_zero(a):
    e = bootstrap_shift(a, a.copy(), _ratio, resamples=200)
    assert e.shift == 0.0
    # the same content is resampled the same way on both sides: every resampled difference is 0
    assert e.shift_ci == (Interval(0.0, 0.0) if len(a) >= 4 else Interval(-math.inf, math.inf))
    assert not e.significant


def test_bootstrap_gives_no_interval_for_three_steps():
    a = np.array([[50.0, 100.0], [51.0, 100.0], [50.5, 100.0]])
    b = a + [30.0, 0.0]
    e = bootstrap_shift(a, b, _ratio)
    assert not e.shift_ci.bounded and not e.significant
    assert e.shift == pytest.approx(0.3)


def test_bootstrap_is_deterministic_and_finds_a_clear_change():
    a = np.array([[50.0, 100.0], [52.0, 100.0], [49.0, 100.0], [51.0, 100.0], [50.0, 100.0], [50.5, 100.0]])
    b = a.copy()
    b[:, 0] += 20.0  # utilisation 0.5 -> 0.7
    first = bootstrap_shift(a, b, _ratio)
    assert first == bootstrap_shift(a, b, _ratio)
    assert first.significant
    assert first.shift == pytest.approx(0.2)


def test_single_values_are_never_significant():
    e = single_values(1.0, 2.0)
    assert e.shift == 1.0 and e.log_ratio == pytest.approx(math.log(2.0))
    assert not e.significant
    assert single_values(2.0, 1.0) == e.reversed()
