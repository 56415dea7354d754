"""The console's output rules as plain functions, without a game: the cap of lines a second and
its notice, lines cut from chunks of any size, and the log written in batches."""

from __future__ import annotations

import asyncio

from gshost_agent.console_output import (
    THROTTLED,
    ConsoleLog,
    Line,
    LineBatcher,
    LineLimiter,
    OutputLines,
)


def test_it_lets_through_the_cap_in_a_second_then_drops_with_one_notice():
    limiter = LineLimiter(per_second=10)
    assert limiter.admit(6, now=100.0) == (6, False)
    assert limiter.admit(6, now=100.5) == (4, True)
    assert limiter.admit(6, now=100.9) == (0, False)  # said once a second
    assert limiter.admit(6, now=101.0) == (6, False)  # a new second


def test_it_splits_chunks_into_lines_wherever_they_break():
    output = OutputLines(LineLimiter())
    lines = output.feed(b"one\ntw", now=0.0) + output.feed(b"o\r\nthree\n", now=0.0)
    assert lines == [Line("one"), Line("two"), Line("three")]
    assert output.feed(b"last, without a newline", now=0.0) == []
    assert output.end(now=0.0) == [Line("last, without a newline")]


def test_it_keeps_the_first_lines_of_a_flood_and_puts_the_notice_where_it_dropped():
    output = OutputLines(LineLimiter(per_second=3))
    chunk = b"".join(b"line %d\n" % n for n in range(1000))
    kept = [Line("line 0"), Line("line 1"), Line("line 2"), THROTTLED]
    assert output.feed(chunk, now=0.0) == kept
    assert output.feed(b"line 1000\n", now=1.0) == [Line("line 1000")]


def test_output_past_the_cap_or_past_a_megabyte_a_second_is_a_flood():
    by_lines, by_bytes = OutputLines(LineLimiter(per_second=3)), OutputLines(LineLimiter())
    by_lines.feed(b"1\n2\n3\n", now=0.0)
    by_bytes.feed(b"x" * 1000 + b"\n", now=0.0)
    assert not by_lines.flooded and not by_bytes.flooded
    by_lines.feed(b"4\n", now=0.5)
    by_bytes.feed(b"y" * (1 << 20), now=0.5)
    assert by_lines.flooded and by_bytes.flooded


def test_it_cuts_a_line_that_never_ends_into_pieces():
    output = OutputLines(LineLimiter(), line_limit=4)
    assert output.feed(b"abcdefghij", now=0.0) == [Line("abcd"), Line("efgh")]
    assert output.feed(b"\n", now=0.0) == [Line("ij")]


def test_the_log_moves_aside_past_its_limit(tmp_path):
    log = ConsoleLog(tmp_path / "console.log", limit=10)
    log.write(["first", "second"])
    log.write(["third"])
    log.close()
    assert (tmp_path / "console.log.1").read_text() == "first\nsecond\n"
    assert (tmp_path / "console.log").read_text() == "third\n"


def test_lines_in_quick_succession_are_handed_on_in_one_batch():
    batches: list[list[str]] = []

    async def prints() -> None:
        second = asyncio.Event()

        def publish(lines: list[Line]) -> None:
            batches.append([line.text for line in lines])
            if len(batches) == 2:
                second.set()

        batcher = LineBatcher(publish)
        batcher.add([Line("after a quiet while: at once")])
        batcher.add([Line("soon after")])
        batcher.add([Line("and again")])
        assert len(batches) == 1
        await asyncio.wait_for(second.wait(), 5)  # the timer hands on the rest together

    asyncio.run(prints())
    assert batches == [["after a quiet while: at once"], ["soon after", "and again"]]
