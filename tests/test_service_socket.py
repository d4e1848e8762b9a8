"""The service's listening socket: every connection it accepts sends without Nagle's delay
(TCP_NODELAY), so an answer written in two parts is not held back until the client's
delayed ACK: before, a request on a kept-alive connection took 44 ms (bench/keepalive.py
measures it: 0.37 ms now)."""

from __future__ import annotations

import socket

import pytest

from nodeprov.errors import ConfigError
from nodeprov.service.server import listening_socket


def test_the_connections_it_accepts_send_at_once() -> None:
    with listening_socket("127.0.0.1", 0) as server:
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as client:
            accepted, _ = server.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
                client.sendall(b"x")
                assert accepted.recv(1) == b"x"


def test_an_address_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match=r"cannot listen on 127\.0\.0\.1:"):
            listening_socket("127.0.0.1", taken.getsockname()[1])
