"""LTTB chart downsampling (services/gateway/downsample.py)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway.downsample import Point, lttb


def curve(count: int) -> list[Point]:
    """A smooth learning curve: a decaying loss with a slow wave on it."""
    return [(float(step), math.exp(-step / 2000) + 0.05 * math.sin(step / 300)) for step in range(count)]


def test_few_points_are_kept_as_they_are() -> None:
    points = curve(10)
    assert lttb(points, 10) == points
    assert lttb(points, 1000) == points
    assert lttb([], 3) == []


def test_a_million_points_become_max_points_keeping_first_and_last() -> None:
    points = curve(1_000_000)
    kept = lttb(points, 1000)
    assert len(kept) == 1000
    assert kept[0] == points[0]
    assert kept[-1] == points[-1]


def test_kept_points_are_points_of_the_curve_in_order() -> None:
    points = curve(50_000)
    kept = lttb(points, 500)
    xs = [x for x, _ in kept]
    assert xs == sorted(set(xs))
    assert set(kept) <= set(points)


def test_a_single_spike_is_kept() -> None:
    """Every-nth-point sampling would miss it; LTTB keeps the peak."""
    points = [(float(step), 1.0) for step in range(100_000)]
    points[54_321] = (54_321.0, 100.0)
    kept = lttb(points, 100)
    assert (54_321.0, 100.0) in kept


def test_the_shape_is_kept() -> None:
    """Between kept points, the straight line stays close to the curve."""
    points = curve(200_000)
    kept = lttb(points, 1000)
    kept_x = [x for x, _ in kept]
    worst = 0.0
    for x, y in points[::97]:
        right = next(i for i, kx in enumerate(kept_x) if kx >= x)
        (x0, y0), (x1, y1) = kept[max(right - 1, 0)], kept[right]
        shown = y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        worst = max(worst, abs(shown - y))
    assert worst < 0.01  # the curve spans about 1.0


def test_max_points_below_three_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        lttb(curve(10), 2)


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=300),
    st.integers(3, 50),
)
def test_any_series_gives_at_most_max_points_with_its_ends(values: list[float], max_points: int) -> None:
    points = [(float(i), value) for i, value in enumerate(values)]
    kept = lttb(points, max_points)
    assert len(kept) == min(len(points), max_points)
    if points:
        assert kept[0] == points[0] and kept[-1] == points[-1]
