"""Chart downsampling: Largest-Triangle-Three-Buckets (Steinarsson, 2013).

A learning curve of a million points is drawn from about a thousand of them:
the first and the last point are kept, the points between are cut into
`max_points - 2` buckets of (nearly) equal counts, and from each bucket the
point is kept that makes the largest triangle with the point kept from the
previous bucket and the mean of the next bucket. Peaks, dips and the curve's
overall shape stay visible, unlike every-nth-point sampling, which misses
spikes.

Pure: no I/O; the points come sorted by x (steps completed).
"""

from collections.abc import Sequence

# A chart point: (x, y), e.g. (steps completed, metric value).
Point = tuple[float, float]


def lttb(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most `max_points` (at least 3) of `points`, chosen by LTTB; all of
    them when they are that few already."""
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3, not {max_points}")
    count = len(points)
    if count <= max_points:
        return list(points)
    buckets = max_points - 2
    inner = count - 2  # the points between the first and the last

    def bound(bucket: int) -> int:  # where bucket `bucket` starts
        return 1 + bucket * inner // buckets

    kept = [points[0]]
    ax, ay = points[0]
    for bucket in range(buckets):
        start, end = bound(bucket), bound(bucket + 1)
        # The next bucket's mean; the last point stands for the bucket after the last.
        next_end = bound(bucket + 2) if bucket < buckets - 1 else count
        following = points[end:next_end]
        cx = sum(x for x, _ in following) / len(following)
        cy = sum(y for _, y in following) / len(following)
        # Twice the triangle's area, up to sign: |(ax - cx)(by - ay) - (ax - bx)(cy - ay)|.
        best = start
        best_area = -1.0
        dx, dy = ax - cx, cy - ay
        for index in range(start, end):
            bx, by = points[index]
            area = abs(dx * (by - ay) - (ax - bx) * dy)
            if area > best_area:
                best, best_area = index, area
        kept.append(points[best])
        ax, ay = points[best]
    kept.append(points[-1])
    return kept
