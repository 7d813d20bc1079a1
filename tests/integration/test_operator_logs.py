"""What the broker's log looks like to an operator: plain lines when its output is a
file or a pipe (no terminal colour codes to strip before grepping), colour only at a
terminal unless NO_COLOR is set."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest

from launcher import corelog_bin

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


def _lines_since(broker, mark: int) -> list[str]:
    return broker.log_path.read_bytes()[mark:].decode("utf-8", "replace").splitlines()


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_a_voter_down_is_reported_once_not_every_500_ms(broker_factory, role):
    """With one voter of three killed, the others log its loss once (then at most once a
    minute, and its return), instead of openraft's warning and error for every failed
    replication or vote call (every 500 ms per peer). The quorum's leader killed, the
    survivors' votes to it fail too, and the new leader's replication to it."""
    import kwire
    brokers = broker_factory.cluster(voters=3)
    leader = kwire.describe_quorum_leader(brokers[0].bootstrap)
    victim = next(b for b in brokers if (b.node_id == leader) == (role == "leader"))
    survivors = [b for b in brokers if b is not victim]
    marks = {b.name: b.log_path.stat().st_size for b in survivors}
    victim.kill()
    time.sleep(8)  # 16 rounds of openraft's retries
    noisy, reported = [], []
    for b in survivors:
        for line in _lines_since(b, marks[b.name]):
            if " WARN " in line or " ERROR " in line:
                noisy.append(f"{b.name}: {line}")
            if "controller peer is unreachable" in line:
                reported.append(line)
    assert reported, "the leader reports the voter it lost"
    assert not [l for l in noisy if "RPCError" in l or "error replication" in l], noisy[:5]
    assert len(noisy) <= 4, f"{len(noisy)} warnings and errors in 8 s:\n" + "\n".join(noisy[:10])
    # Back: reported once more.
    marks = {b.name: b.log_path.stat().st_size for b in survivors}
    victim.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(
            "controller peer is reachable again" in l
            for b in survivors for l in _lines_since(b, marks[b.name])):
        time.sleep(0.2)
    assert any("controller peer is reachable again" in l
               for b in survivors for l in _lines_since(b, marks[b.name]))
