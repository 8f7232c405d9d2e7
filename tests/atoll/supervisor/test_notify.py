"""The notify protocol as a service manager sees it: datagrams on a Unix socket of the test's own."""

from __future__ import annotations

import logging
import socket

import pytest

from atoll.supervisor.notify import Notifier


@pytest.fixture
def manager(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(5)
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    """Every datagram waiting, each as its text."""
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.setblocking(True)


def test_each_call_is_one_datagram_of_key_value_lines(manager):
    environ = {"NOTIFY_SOCKET": manager.getsockname()}
    n = Notifier(environ, pid=42)
    n.status("starting: loading models")
    n.ready("serving on http://127.0.0.1:8000")
    n.watchdog()
    n.stopping("stopping: answering requests in flight")
    assert received(manager) == ["STATUS=starting: loading models",
                                 "READY=1\nSTATUS=serving on http://127.0.0.1:8000", "WATCHDOG=1",
                                 "STOPPING=1\nSTATUS=stopping: answering requests in flight"]  # fmt: skip
    assert environ == {}  # children started later do not inherit it


def test_an_abstract_socket_is_named_with_a_leading_at():
    name = f"atoll-test-notify-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        Notifier({"NOTIFY_SOCKET": "@" + name}).ready("up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_without_a_socket_nothing_is_sent_and_nothing_fails():
    n = Notifier({})
    n.ready("up")
    n.watchdog()
    assert n.watchdog_s is None


@pytest.mark.parametrize(("environ", "period_s"), [
    ({"WATCHDOG_USEC": "30000000"}, 15.0),  # any process may answer
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 15.0),  # this one
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"}, None),  # another one
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "soon"}, None),
])  # fmt: skip
def test_the_watchdog_is_fed_twice_per_period_by_the_process_it_names(environ, period_s):
    assert Notifier({"NOTIFY_SOCKET": "/nonexistent", **environ}, pid=42).watchdog_s == period_s


def test_a_manager_gone_is_reported_once_and_never_raises(tmp_path, caplog):
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    with caplog.at_level(logging.WARNING, logger="atoll.supervisor.notify"):
        n.status("one")
        n.status("two")
    assert len(caplog.records) == 1 and "cannot notify the service manager" in caplog.records[0].getMessage()
