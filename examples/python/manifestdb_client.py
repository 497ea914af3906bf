"""A small client of `manifestdb serve`, standard library only.

The server speaks HTTP/1.1 with JSON bodies over a Unix socket (the default: `manifestdb.sock`
in the store's directory) or TCP. `http.client` does the HTTP; the only addition is a
connection class that connects to a Unix socket instead of a host.

    client = Client(socket_path="/srv/jobs/manifestdb.sock")
    ticket = client.post("/v1/attempts/begin", {"dataset": "d", "run": "r", "partition": "p=1"})

Every error answer is {"error": {"exit_code", "kind", "message"}}; it is raised as ServerError.
A call that could not reach the server (refused, reset, timed out) is retried until
`retry_for_s` has passed: every route is safe to retry (a repeated declare, finish or
validate is recognised as the same; a repeated begin numbers a new attempt, which is what a
retried task is anyway).
"""

import http.client
import json
import socket
import time
import urllib.parse


class ServerError(Exception):
    """An error document from the server: its HTTP status, kind, exit code and message."""

    def __init__(self, status, kind, exit_code, message):
        super().__init__(f"{status} {kind}: {message}")
        self.status = status
        self.kind = kind
        self.exit_code = exit_code
        self.message = message


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's connection, over a Unix socket."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Client:
    """One connection to the server (kept alive between calls, reopened when it breaks)."""

    def __init__(self, socket_path=None, url=None, token=None, timeout=60, retry_for_s=0.0):
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path and url")
        self.socket_path = socket_path
        self.url = urllib.parse.urlsplit(url) if url else None
        self.token = token
        self.timeout = timeout
        self.retry_for_s = retry_for_s
        self.connection = None
        self.retries = 0

    def _connect(self):
        if self.socket_path is not None:
            return UnixHTTPConnection(self.socket_path, timeout=self.timeout)
        return http.client.HTTPConnection(self.url.hostname, self.url.port or 80, timeout=self.timeout)

    def close(self):
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(self, method, path, body=None, query=None):
        """Sends one request and returns (status, document); raises ServerError for an error
        document and OSError when the server stayed unreachable for retry_for_s."""
        if query:
            path = path + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        deadline = time.monotonic() + self.retry_for_s
        delay = 0.02
        while True:
            try:
                if self.connection is None:
                    self.connection = self._connect()
                self.connection.request(method, path, body=payload, headers=headers)
                response = self.connection.getresponse()
                status = response.status
                data = response.read()
                break
            except (OSError, http.client.HTTPException):
                self.close()
                if time.monotonic() >= deadline:
                    raise
                self.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        document = json.loads(data) if data else None
        if status >= 400:
            error = (document or {}).get("error", {})
            raise ServerError(status, error.get("kind"), error.get("exit_code"), error.get("message"))
        return status, document

    def get(self, path, **query):
        return self.request("GET", path, query=query)[1]

    def post(self, path, body):
        return self.request("POST", path, body=body)[1]
