"""Hypothesis strategies for what a lying box answers: real documents of the real helper
(tests/data) mutated the way a hostile job on the box could rewrite them.

A mutation starts from a real snapshot (or queue event) and, at any depth, swaps a value for
something worse: a string of markup, escapes, bidi controls or a path; a huge, negative or
non-finite number; the wrong type; a deeply nested list; an empty or a repeated element.
``raw_answer`` writes a document as JSON text with duplicate keys, NaN and Infinity, as a box
can (json accepts them). The values come from Hypothesis (they shrink); which nodes change is
decided by a seeded ``random.Random``, so a document of hundreds of nodes stays one small
example.
"""

from __future__ import annotations

import json
import math
import os
import random
from functools import cache
from typing import Any

from hypothesis import strategies as st
from paths import DATA

from harness.hostile_text import ESCAPES, MARKUP, OTHER


def examples(n: int) -> int:
    """A fuzz test's example count: ``n`` in CI (a few seconds), times GPUROOM_FUZZ_SCALE when
    exploring (tests/conftest.py's gpuroom-explore profile)."""
    return n * int(os.environ.get("GPUROOM_FUZZ_SCALE", "1"))


PATHS = ("../../../../etc/passwd", "/etc/shadow", "a/../../b", "./.", "..", "~/.ssh/x",
         "a\\..\\b", "C:\\x", "a\x00b", "//x", "x/", "")
CONTROL_CHARS = "\x00\x07\x08\x0b\x1b\x7f\x85\x90\x9b\x9c\x9d\u202a\u202e\u2066\u2069\r\n\t"

def nested(depth: int) -> Any:
    doc: Any = "deep"
    for n in range(depth):
        doc = [doc] if n % 2 else {"x": doc}
    return doc


hostile_strings = st.one_of(
    st.sampled_from((*MARKUP, *ESCAPES, *OTHER, *PATHS)),
    st.text(alphabet=st.sampled_from("[]/=@ab.:\\" + CONTROL_CHARS), max_size=30),
    st.text(max_size=20),
    st.integers(1000, 6000).map(lambda n: "[/]" + "x" * n),
)
hostile_numbers = st.one_of(
    st.sampled_from((0, -1, 2 ** 63, -(2 ** 63), 10 ** 400, -(10 ** 400), 1e308, -1e308,
                     5e-324, math.nan, math.inf, -math.inf, True, False)),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True),
)
leaves = st.one_of(hostile_strings, hostile_numbers, st.none())
hostile_values = st.one_of(
    leaves,
    st.lists(leaves, max_size=3),
    st.dictionaries(hostile_strings, leaves, max_size=3),
    st.integers(50, 400).map(nested),
)


@cache
def real_snapshots() -> tuple[str, ...]:
    """Every snapshot the real helper wrote for tests/data, as JSON text (copied per use)."""
    docs: list[Any] = []
    for path in sorted(DATA.glob("scenario-*.json")):
        for h in json.loads(path.read_text())["hosts"]:
            docs += [h["snapshot"], *(e["snapshot"] for e in h.get("history", []))]
    for path in (DATA / "slurm" / "session.jsonl", DATA / "doctor" / "xid79.jsonl"):
        lines = path.read_text().splitlines()
        docs += [json.loads(line)["snapshot"] for line in lines[:: max(1, len(lines) // 4)]]
    return tuple(json.dumps(d) for d in docs if isinstance(d, dict))


def mutate(doc: Any, rng: random.Random, values: list[Any], rate: float) -> Any:
    """``doc`` with about ``rate`` of its nodes replaced by one of ``values``."""
    if values and rng.random() < rate:
        return values[rng.randrange(len(values))]
    if isinstance(doc, dict):
        out = {k: mutate(v, rng, values, rate) for k, v in doc.items()}
        if values and rng.random() < rate:
            out[str(values[rng.randrange(len(values))])] = values[rng.randrange(len(values))]
        return out
    if isinstance(doc, list):
        items = [mutate(v, rng, values, rate) for v in doc]
        if items and rng.random() < rate:
            items += items  # the same job, GPU or disk twice
        return items
    return doc


@st.composite
def hostile_snapshots(draw: st.DrawFn) -> dict[str, Any]:
    """A real snapshot, mutated."""
    docs = real_snapshots()
    base = json.loads(docs[draw(st.integers(0, len(docs) - 1))])
    values = draw(st.lists(hostile_values, min_size=1, max_size=12))
    rate = draw(st.sampled_from((0.02, 0.1, 0.4)))
    doc = mutate(base, random.Random(draw(st.integers(0, 2 ** 32))), values, rate)
    return doc if isinstance(doc, dict) else {"queue": doc}


@st.composite
def raw_answers(draw: st.DrawFn) -> str:
    """A hostile snapshot as the JSON text a box would send: NaN and Infinity as json writes
    them, and a key repeated (json keeps the last) at the top or inside a section."""
    doc = draw(hostile_snapshots())
    text = json.dumps(doc)
    dup = draw(st.sampled_from(("gpus", "queue", "host", "disks", "errors", "schema")))
    value = json.dumps(draw(hostile_values))
    where = draw(st.sampled_from(("front", "back", "inner")))
    if where == "front":
        return f'{{"{dup}": {value}, ' + text[1:]
    if where == "back" and text != "{}":
        return text[:-1] + f', "{dup}": {value}}}'
    return text.replace('{"', f'{{"{dup}": {value}, "', 2)
