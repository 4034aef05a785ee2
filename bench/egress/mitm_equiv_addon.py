"""mitmproxy addon with the policy the vak benchmark gives the vak gateway.

One allow rule (GET/POST to BENCH_HOST, everything else 403), one header
secret substitution (BENCH_PLACEHOLDER -> BENCH_VALUE in Authorization), and
the equivalent of vak's DNS override (BENCH_HOST -> 127.0.0.1).
"""

import os

from mitmproxy import http

HOST = os.environ["BENCH_HOST"]
PLACEHOLDER = os.environ["BENCH_PLACEHOLDER"]
VALUE = os.environ["BENCH_VALUE"]


class Equivalent:
    def server_connect(self, data):
        addr = data.server.address
        if addr and addr[0] == HOST:
            data.server.address = ("127.0.0.1", addr[1])

    def request(self, flow: http.HTTPFlow):
        if flow.request.pretty_host != HOST or flow.request.method not in ("GET", "POST"):
            flow.response = http.Response.make(403, b"denied\n", {"Content-Type": "text/plain"})
            return
        auth = flow.request.headers.get("authorization")
        if auth and PLACEHOLDER in auth:
            flow.request.headers["authorization"] = auth.replace(PLACEHOLDER, VALUE)


addons = [Equivalent()]
