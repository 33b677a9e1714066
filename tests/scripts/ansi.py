"""Coloured output, a \\r progress bar, invalid UTF-8, a very long line."""
import sys
import time

w = sys.stdout.buffer.write
w(b"\x1b[32mgreen\x1b[0m plain \x1b]0;title\x07done\n")
for i in range(0, 101, 25):
    w(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100".encode())
    sys.stdout.buffer.flush()
    time.sleep(0.01)
w(b"\n")
w(b"bad \xff\xfe bytes\n")
w(b"L" * 20000 + b"\n")
w("wide 你好 ✓\n".encode())
sys.stdout.buffer.flush()
