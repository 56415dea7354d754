"""What the console socket counts of a frame waiting for a slow reader: the bytes it takes on
the wire (UTF-8), which the 1 MiB limit is of, not its characters."""

from gshost_agent.console_socket import frame, utf8_size


def test_a_frame_counts_its_utf8_bytes_not_its_characters() -> None:
    line = frame("console output", "Spieler Jürgen hat das Spiel betreten ✓")
    assert utf8_size(line) == len(line.encode()) > len(line)


def test_an_ascii_frame_counts_its_length() -> None:
    line = frame("console output", "Player joined")
    assert utf8_size(line) == len(line) == len(line.encode())
