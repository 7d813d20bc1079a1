"""Shared fixtures for the corelog integration tests.

The tests run the real broker binary (``target/release/corelog`` or
``$CORELOG_BIN``) as a child process on free loopback ports with a fresh
on-disk data directory under the system temp dir: launcher.py's ``Broker`` and
``BrokerPool``, the one launcher and port allocator (``free_port``) that the
benches and fuzz/capture_seeds.py use too.

Fixtures
--------
``broker_factory``  callable ``start(**options) -> Broker``; every broker it
                    started is torn down when the test ends.
``module_broker_factory``  the same, but brokers live for the whole module.
``broker``          one broker with the default options (``--shards 2``).

When a test fails, the tail of each of its brokers' logs is attached to the
pytest report (section "corelog log tail ...").

Environment
-----------
``CORELOG_BIN``       path to the broker binary (relative paths are taken
                      relative to the repository root).
``CORELOG_IT_KEEP``   1: keep data dirs and logs of failed tests; all: keep all.
"""

from __future__ import annotations

import pytest

from launcher import Broker, BrokerPool


def pytest_configure(config):
    # kafka-python 3.x loads its protocol schemas through a deprecated importlib API
    config.addinivalue_line(
        "filterwarnings", r"ignore:.*is deprecated\. Use files\(\) instead.*:DeprecationWarning")


def _brokers_of(item) -> list[tuple[Broker, BrokerPool | None]]:
    found: list[tuple[Broker, BrokerPool | None]] = []
    for v in getattr(item, "funcargs", {}).values():
        if isinstance(v, BrokerPool):
            found.extend((b, v) for b in v.brokers)
        elif isinstance(v, Broker):
            found.append((v, None))
    seen, out = set(), []
    for b, pool in found:
        if id(b) not in seen:
            seen.add(id(b))
            out.append((b, pool))
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b, pool in _brokers_of(item):
            report.sections.append((f"corelog log tail ({b.name}, {b.bootstrap})", b.log_tail()))
            if pool is not None:
                pool.failed = True


@pytest.fixture
def broker_factory():
    """``start(shards=2, extra_args=None, name=None) -> Broker`` (already healthy);
    all brokers started through it are stopped when the test ends."""
    pool = BrokerPool()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def module_broker_factory():
    """Like broker_factory, but brokers live for the whole test module."""
    pool = BrokerPool()
    yield pool
    pool.close()


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()
