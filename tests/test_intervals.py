"""advisor.trace.intervals: the union of [start, end) intervals and how much of a window it covers."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.trace.intervals import coverage, intersect, merge, union_length

NAN = float("nan")


def test_overlapping_and_nested_intervals_merge_into_one():
    ms, me = merge([5, 0, 2, 20], [8, 6, 3, 25])
    assert ms.tolist() == [0, 20] and me.tolist() == [8, 25]


def test_touching_intervals_merge_and_a_gap_does_not():
    assert [a.tolist() for a in merge([0, 10], [10, 20])] == [[0], [20]]
    assert [a.tolist() for a in merge([0, 10.5], [10, 20])] == [[0, 10.5], [10, 20]]


def test_nan_bounds_are_dropped():
    ms, me = merge([0, NAN, 4, 7], [2, 3, NAN, 9])
    assert ms.tolist() == [0, 7] and me.tolist() == [2, 9]
    assert union_length([NAN], [1.0]) == 0.0


def test_an_end_before_its_start_is_empty_not_negative():
    ms, me = merge([5, 0], [3, 1])  # [5, 3) is a broken event: it covers nothing
    assert (me - ms).tolist() == [1, 0] and union_length([5], [3]) == 0.0
    # and it cannot shorten a real interval it falls inside
    assert union_length([0, 4], [10, 2]) == 10.0


def test_empty_input():
    ms, me = merge([], [])
    assert ms.size == me.size == 0 and ms.dtype == np.float64
    assert union_length([], []) == 0.0
    assert coverage(ms, me, [0, 5], [1, 9]).tolist() == [0, 0]
    assert coverage(*merge([0], [1]), [], []).tolist() == []


def test_union_length_counts_overlap_once():
    assert union_length([0, 5, 20], [10, 15, 25]) == 20.0
    assert union_length(np.array([3.0, 0.0, 1.0]), np.array([4.0, 10.0, 2.0])) == 10.0


def test_coverage_clips_to_each_window():
    ms, me = merge([0, 20], [10, 30])
    lo = [-5, 5, 12, 8, 25, 40]
    hi = [5, 8, 18, 22, 100, 50]
    assert coverage(ms, me, lo, hi).tolist() == [5, 3, 0, 4, 5, 0]


def test_coverage_of_degenerate_windows_is_zero():
    ms, me = merge([0], [10])
    assert coverage(ms, me, [5, 6, NAN, 1], [5, 4, 8, NAN]).tolist() == [0, 0, 0, 0]


def test_coverage_accepts_scalars_and_lists():
    ms, me = merge([0, 4], [2, 6])
    assert coverage(ms, me, 1, 5).tolist() == [2.0]


def test_coverage_matches_a_brute_force_union():
    rng = np.random.default_rng(0)
    s = rng.uniform(0, 100, 60)
    e = s + rng.exponential(3, 60)
    lo = rng.uniform(-10, 110, 40)
    hi = lo + rng.uniform(0, 30, 40)
    grid = np.linspace(-10, 140, 150_001)  # 0.001 resolution
    busy = np.zeros(grid.size, bool)
    for a, b in zip(s, e):
        busy |= (grid >= a) & (grid < b)
    step = grid[1] - grid[0]
    brute = [busy[(grid >= a) & (grid < b)].sum() * step for a, b in zip(lo, hi)]
    assert coverage(*merge(s, e), lo, hi) == pytest.approx(brute, abs=0.01)


def test_intersect_keeps_what_both_cover():
    a = merge([0, 10, 30], [5, 20, 40])
    b = merge([3, 15], [12, 35])
    s, e = intersect(*a, *b)
    assert list(zip(s.tolist(), e.tolist())) == [(3.0, 5.0), (10.0, 12.0), (15.0, 20.0), (30.0, 35.0)]
    assert intersect(*a, *merge([], []))[0].size == 0
