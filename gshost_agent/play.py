"""`gshost-play HOST PORT`: play a game server from a terminal, line by line.

What `nc HOST PORT` does, with nothing but Python: every line typed goes to the game, and every
line the game sends is printed. It ends when the game closes the connection or at end of input
(Ctrl-D).

    python -m gshost_agent.play 127.0.0.1 27000     then type: JOIN alice
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from typing import TextIO

CONNECT_SECONDS = 10


def _print_replies(connection: socket.socket, out: TextIO) -> None:
    try:
        while chunk := connection.recv(4096):
            out.write(chunk.decode(errors="replace"))
            out.flush()
    except OSError:
        pass  # the connection was reset: the game is gone


def _send_lines(connection: socket.socket, lines: TextIO) -> None:
    try:
        for line in lines:
            connection.sendall(line.encode())
        connection.shutdown(socket.SHUT_WR)  # end of input: the game sees the player leave
    except OSError:
        pass  # the game closed the connection while a line was on its way


def play(host: str, port: int, lines: TextIO, out: TextIO) -> int:
    """Relay ``lines`` to the game and its answers to ``out`` until the game closes the
    connection; 0, or 1 when the game cannot be reached."""
    try:
        connection = socket.create_connection((host, port), timeout=CONNECT_SECONDS)
    except OSError as error:
        print(f"gshost-play: cannot reach {host}:{port}: {error}", file=sys.stderr)
        return 1
    connection.settimeout(None)
    with connection:
        # Reading the terminal blocks: a daemon thread, so the game's end ends the program.
        threading.Thread(target=_send_lines, args=(connection, lines), daemon=True).start()
        _print_replies(connection, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host", help="the game server's address, e.g. 127.0.0.1")
    parser.add_argument("port", type=int, help="its port, e.g. 27000")
    args = parser.parse_args(argv)
    return play(args.host, args.port, sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
