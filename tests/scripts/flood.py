"""Write N lines as fast as possible (about 100 bytes each); every 1000th is a progress line."""
import sys

n = int(sys.argv[1])
out = sys.stdout
pad = "x" * 70
w = out.write
for i in range(1, n + 1):
    if i % 1000 == 0:
        w(f"Step {i // 1000}/{n // 1000} | loss 0.{i % 997:03d} | reward 0.5 {pad[:50]}\n")
    else:
        w(f"line {i:09d} {pad} end\n")
out.flush()
