"""HTTP server on PORT: /health is 200 until the file DOWNFILE exists (then 503)."""
import http.server
import os
import sys

port, downfile = int(sys.argv[1]), sys.argv[2]


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 503 if os.path.exists(downfile) else 200
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"ok" if code == 200 else b"down")

    def log_message(self, *a):
        pass


print(f"serving on {port}", flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
