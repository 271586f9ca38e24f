"""Every formatter of tui/present/format.py takes any float a box can make it see: the
number rule (tui/snapshot.py) lets only finite readings through, but a difference or a ratio
of two forged ones is infinite or NaN, and a time far past year 9999 is refused by the C
library. Each one answers text, never an exception."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuroom.tui.present import format as fmt

ANY = st.floats(allow_nan=True, allow_infinity=True)
EDGES = st.sampled_from((math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, 2.0 ** 63))
NUMBERS = st.one_of(EDGES, ANY, st.integers(-(10 ** 30), 10 ** 30).map(float))


@settings(max_examples=300, deadline=None)
@given(v=NUMBERS, w=NUMBERS, values=st.lists(st.one_of(st.none(), NUMBERS), max_size=8))
def test_every_formatter_answers_text_for_any_number(v: float, w: float,
                                                     values: list[float | None]) -> None:
    out = [
        fmt.fmt_bytes(v), fmt.fmt_rate(v), fmt.fmt_count(v), fmt.fmt_pct(v), fmt.fmt_number(v),
        fmt.fmt_whole(v), fmt.fmt_age(v), fmt.fmt_age(v, ticking=True), fmt.fmt_clock(v),
        fmt.fmt_hhmm(v), fmt.fmt_hhmm(v, utc=True), fmt.fmt_duration(v), fmt.fmt_hours(v),
        fmt.fmt_utc(v), fmt.fmt_mmss(v), fmt.fmt_money(w, v), fmt.sparkline(values, v),
        fmt.sparkline(values),
    ]
    assert all(isinstance(x, str) for x in out)
    assert len(fmt.sparkline(values, w)) == len(values)
