"""Log capture: normalisation, the ring, byte-exact rotation, and a full disk that never blocks."""

from __future__ import annotations

import threading

from rlsup.supervisor.logs import LineNormaliser, LogRing, LogWriter, RotatingLog, fold_cr


def test_ansi_stripped_cr_folded_utf8_replaced():
    n = LineNormaliser(line_cap=100)
    lines, _ = n.feed(b"\x1b[1;31mred\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07\n 10%\r 50%\r100%\r\nbad \xff\n")
    assert lines == ["red link", "100%", "bad \ufffd"]


def test_utf8_split_across_chunks_and_partial_line():
    n = LineNormaliser()
    data = "héllo wörld 你好\n".encode()
    a, b = data[:2], data[2:]  # split inside 'é'
    assert n.feed(a) == ([], "")
    assert n.partial == "h\ufffd"
    lines, text = n.feed(b)
    assert lines == ["héllo wörld 你好"] and text == "héllo wörld 你好\n"


def test_long_lines_capped_with_marker():
    n = LineNormaliser(line_cap=100)
    lines, _ = n.feed(b"a" * 250 + b"\nshort\n")
    assert lines[0] == "a" * 100 + " …[truncated 150 chars]" and lines[1] == "short"


def test_unterminated_progress_bar_stays_bounded():
    n = LineNormaliser(line_cap=100)
    for i in range(10_000):
        n.feed(f"\r{i:5d}/10000 [{'#' * (i % 50)}]".encode())
    assert n.partial.startswith(" 9999/10000")
    assert len(n._pending) < 100 * 4
    lines, _ = n.feed(b"\n")
    assert lines == [" 9999/10000 [" + "#" * (9999 % 50) + "]"]


def test_flush_emits_tail_without_newline():
    n = LineNormaliser()
    n.feed(b"last words")
    assert n.flush()[0] == ["last words"]
    assert n.flush() == ([], "")


def test_fold_cr():
    assert fold_cr("a\rb\rc") == "c" and fold_cr("abc\r") == "abc" and fold_cr("x") == "x"


def test_ring_sequence_numbers():
    r = LogRing(maxlen=5)
    r.extend([f"l{i}" for i in range(3)])
    assert r.since(0) == (0, ["l0", "l1", "l2"])
    r.extend([f"l{i}" for i in range(3, 9)])
    assert r.first_seq == 4 and r.next_seq == 9
    assert r.since(0) == (4, ["l4", "l5", "l6", "l7", "l8"])  # fell out: from the oldest kept
    assert r.since(7) == (7, ["l7", "l8"])
    assert r.since(9) == (9, [])
    assert r.tail(2) == (7, ["l7", "l8"])
    assert r.since(5, limit=2) == (5, ["l5", "l6"])


def test_rotation_is_byte_exact(tmp_path):
    log = RotatingLog(tmp_path / "c.log", max_bytes=1000, backups=3)
    chunks = [bytes([65 + i % 26]) * 300 for i in range(20)]
    for c in chunks:
        log.write(c)
    log.close()
    files = [tmp_path / "c.log.3", tmp_path / "c.log.2", tmp_path / "c.log.1", tmp_path / "c.log"]
    assert not (tmp_path / "c.log.4").exists()
    kept = b"".join(f.read_bytes() for f in files)
    assert b"".join(chunks).endswith(kept) and len(kept) == 11 * 300  # 3 full backups of 3 chunks + 2 current
    assert all(f.stat().st_size <= 1000 for f in files)


def test_writer_reports_full_disk_and_never_blocks(tmp_path):
    log = RotatingLog(tmp_path / "x.log", 1 << 30, 0)
    log.path = tmp_path / "full"
    import os

    os.close(log._fd)
    log._fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
    errors: list[OSError] = []
    got = threading.Event()
    w = LogWriter(log, on_error=lambda e: (errors.append(e), got.set()), retry_s=0.01)
    for _ in range(100):
        w.put(b"x" * 1000)  # returns at once
    assert got.wait(5)
    assert errors[0].errno == 28  # ENOSPC, reported once
    assert w.drain(10)
    assert len(errors) == 1 and w.lost == 100_000
    w.close()


def test_writer_bounded_memory_counts_lost(tmp_path):
    log = RotatingLog(tmp_path / "y.log", 1 << 30, 0)
    block = threading.Event()
    orig = log.write

    def slow_write(data):
        block.wait(10)  # a stuck disk
        orig(data)

    log.write = slow_write
    w = LogWriter(log, max_pending=10_000)
    for _ in range(50):
        w.put(b"y" * 1000)
    assert w.lost >= 39_000  # beyond max_pending: dropped and counted, put never blocked
    block.set()
    assert w.drain(10)
    w.close()
    data = (tmp_path / "y.log").read_bytes()
    assert b"bytes of output were lost while the log could not be written" in data
