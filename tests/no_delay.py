"""Every server a test runs in its own process answers without Nagle's delay.

Python's socketserver leaves Nagle's algorithm on. http.server and Django's live server write a
response's headers and its body separately, so the body waits for the client to acknowledge the
headers, and a client that delays its acknowledgements (Linux does, on a busy connection) holds
it for up to 40 ms: about 45 ms for each request to the live server, 1.5 ms without. gunicorn
and aiohttp, which serve the product, set TCP_NODELAY themselves.
"""

import socket
import socketserver

_accept = socketserver.TCPServer.get_request


def _get_request_without_delay(
    self: socketserver.TCPServer,
) -> tuple[socket.socket, object]:
    connection, address = _accept(self)
    if connection.family in (socket.AF_INET, socket.AF_INET6):
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection, address


socketserver.TCPServer.get_request = _get_request_without_delay  # type: ignore[method-assign]
