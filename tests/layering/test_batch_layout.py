"""The Python tests' RecordBatch v2 header table (tests/integration/kwire.py) is the Rust
owner's (record-batch/src/layout.rs): every `pub const NAME: Range<usize> = a..b;` and
`pub const NAME: usize = n;` there has the same value in kwire, so a field moved in one
cannot leave the tests reading the old bytes."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kwire  # noqa: E402

LAYOUT = ROOT / "record-batch" / "src" / "layout.rs"
RANGE = re.compile(r"^pub const (\w+): Range<usize> = (\d+)\.\.(\d+);", re.M)
SIZE = re.compile(r"^pub const (\w+): usize = (\d+);", re.M)


def test_kwire_has_the_rust_header_layout():
    text = LAYOUT.read_text()
    ranges = RANGE.findall(text)
    sizes = SIZE.findall(text)
    assert len(ranges) == 13 and sizes, "the layout's constants are found"
    for name, start, end in ranges:
        assert getattr(kwire, name) == slice(int(start), int(end)), name
    for name, value in sizes:
        assert getattr(kwire, name) == int(value), name
