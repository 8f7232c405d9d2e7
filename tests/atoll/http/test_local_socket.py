"""A server's local socket (`http/local_socket.py`): an abstract Unix name given out with the host
it is valid on, taken only by a process on that host and network namespace."""

from __future__ import annotations

import os
import socket

from atoll.http import local_socket


def test_the_address_names_this_host_and_its_socket_which_answers():
    made = local_socket.listen(f"atoll-test-{os.getpid()}-a", 4)
    assert made is not None
    sock, address = made
    try:
        boot = open(local_socket.BOOT_ID).read().strip()
        assert address == f"{boot}:{os.stat(local_socket.NETNS).st_ino}/atoll-test-{os.getpid()}-a"
        name = local_socket.reachable(address)
        assert name == f"atoll-test-{os.getpid()}-a"
        assert sock.getblocking() is False  # every front end polls it
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect("\0" + name)
            accepted, _ = sock.accept()
            accepted.close()
    finally:
        sock.close()


def test_a_name_already_taken_gives_no_socket():
    made = local_socket.listen(f"atoll-test-{os.getpid()}-b", 4)
    try:
        assert local_socket.listen(f"atoll-test-{os.getpid()}-b", 4) is None
    finally:
        made[0].close()
    again = local_socket.listen(f"atoll-test-{os.getpid()}-b", 4)  # the name goes with its last descriptor
    assert again is not None
    again[0].close()


def test_an_address_of_another_host_or_namespace_or_none_is_not_reachable():
    identity = local_socket.host_identity()
    boot, netns = identity.split(":")
    assert local_socket.reachable(f"{identity}/n") == "n"
    assert local_socket.reachable(f"00000000-0000-0000-0000-000000000000:{netns}/n") is None  # another boot
    assert local_socket.reachable(f"{boot}:1/n") is None  # another network namespace (another container)
    assert local_socket.reachable("") is None
    assert local_socket.reachable(f"{identity}/") is None
