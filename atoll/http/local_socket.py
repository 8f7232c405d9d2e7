"""A server's HTTP port, also on this host: an abstract Unix socket (Linux), which a cluster
endpoint on the same host and network namespace reaches instead of TCP loopback.

Over loopback the sender pays for both ends of TCP: a 600 KB tensor is ten 64 KB segments through
the IP stack, the receiver's softirq and its ACKs, on the sending process's CPU (~half the relay's
CPU a request, docs/cluster.md). A Unix stream socket queues the same pages on the peer's socket.

The address a server gives out names the host it is valid on (`host_identity`: the kernel's boot id
and the network namespace), so an endpoint elsewhere, or in another container of the same machine,
never takes it for one of its own: it goes on over TCP. An abstract name needs no file and goes with
its last descriptor; any local user may connect to it, as to a port on loopback.
"""

from __future__ import annotations

import os
import socket

BOOT_ID = "/proc/sys/kernel/random/boot_id"
NETNS = "/proc/self/ns/net"


def host_identity() -> str | None:
    """This kernel's boot and network namespace, as "<boot id>:<namespace inode>" (None where
    either cannot be read: not Linux)."""
    try:
        with open(BOOT_ID) as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat(NETNS).st_ino}"
    except OSError:
        return None


def listen(name: str, backlog: int) -> tuple[socket.socket, str] | None:
    """A listening socket on the abstract name `name`, non-blocking, and the address to give out
    ("<host identity>/<name>"); None where this host has none (not Linux, or the name is taken)."""
    identity = host_identity()
    if identity is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind("\0" + name)
        sock.listen(backlog)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock, f"{identity}/{name}"


def reachable(address: str) -> str | None:
    """The abstract name of a server's local `address` where it is on this very host and network
    namespace (None: elsewhere, or no address)."""
    identity, _, name = address.rpartition("/")
    return name if name and identity == host_identity() else None
