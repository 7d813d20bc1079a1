"""What the broker's log looks like to an operator: plain lines when its output is a
file or a pipe (no terminal colour codes to strip before grepping), colour only at a
terminal unless NO_COLOR is set."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import time

from conftest import corelog_bin

ESC = b"\x1b["


def test_no_colour_codes_when_the_output_is_not_a_terminal(broker):
    text = broker.log_path.read_bytes()
    assert b"corelog is serving" in text
    assert ESC not in text, "escape codes in a log written to a file"


def _serve_on_a_terminal(tmp_path, env) -> bytes:
    """The first lines `corelog serve` prints on a pseudo-terminal (it stops once it
    serves)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [str(corelog_bin()), "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
         "--controller-listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
         "--shards", "1"],
        stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env)
    os.close(child)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while b"serving" not in out and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    out += os.read(main, 65536)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(30)
        os.close(main)
    return out


def test_colour_at_a_terminal_unless_no_color(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = _serve_on_a_terminal(tmp_path / "a", env)
    assert b"serving" in coloured, coloured[-2000:]
    assert ESC in coloured, "a person at a terminal gets colour"
    plain = _serve_on_a_terminal(tmp_path / "b", {**env, "NO_COLOR": "1"})
    assert b"serving" in plain, plain[-2000:]
    assert ESC not in plain, "NO_COLOR turns colour off"
