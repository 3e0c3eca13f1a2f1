"""The gunicorn worker Reame runs under: gthread, with every request read before a thread takes it.

gunicorn's gthread worker gives a connection to a thread as soon as its first bytes arrive, and
the thread parses the request with blocking reads and no deadline: N clients sending their
headers or body slowly hold N threads for as long as they like, and once every thread is held
nobody else is answered (issue 13: 44 slow connections stopped a server with 44 threads).

`ReameWorker` keeps gthread's event loop, thread pool, keep-alive and shutdown, and changes one
thing: a connection's request, head and body, is read in the event loop with non-blocking reads
(`RequestReader` says when it is whole) and handed to a thread only then. A thread never waits
for a client to send, so slow clients cost a connection slot and a buffer each, never a thread:

- the head must arrive within `header_timeout` seconds (from the connection's first moment, or
  from the first byte of a kept-alive connection's next request), the body within
  `body_timeout` seconds after the head; past that the client gets 408 and the connection closes
  (a connection that sent nothing is closed silently);
- a body above `max_body_bytes` is refused with 413 at once, from its Content-Length or from
  the chunked bytes received, without reading the rest; a request line above gunicorn's
  `limit_request_line` gets 414 and a head above its header limits 431;
- the bodies being received in one worker hold at most `16 x max_body_bytes` of memory; a
  request that would go beyond gets 503 with Retry-After;
- connections per worker are bounded by gunicorn's `worker_connections` (`--max-connections`),
  capped below the process's file-descriptor limit; beyond it new connections wait in the
  listen backlog;
- while a thread writes the response, a client that reads nothing for `send_timeout` seconds is
  disconnected (its generation is cancelled): a stream nobody reads cannot hold a thread;
  `send_buffer` (SO_SNDBUF, when set) bounds what the kernel holds for it meanwhile.

Errors gunicorn's own parser raises (a malformed request line or header, too many or too large
header fields, ...) are answered with the OpenAI error body as JSON instead of gunicorn's HTML.

TLS, HTTP/2 and the PROXY protocol are not served by `reame serve`; with any of them configured,
this worker reads requests as gthread does.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import resource
import selectors
import socket
import struct
import sys
import termios
import time
from functools import partial

from gunicorn import glogging
from gunicorn.http import errors as gerrors
from gunicorn.workers.gthread import ThreadWorker, TConn

from .messages_models import anthropic_error, is_messages_path
from .schemas import error_body

RETRY_AFTER = 1
LINGER = 2.0                   # seconds an answered connection is drained before it is closed
STOP_GRACE = 2.0               # seconds a stopping worker still waits for a request being sent
LINGER_BYTES = 65536
FD_RESERVE = 64                # file descriptors kept for the model, logs, pipes, metrics
MAX_CHUNK_LINE = 4096          # a chunk-size line longer than this is malformed

_HEX = re.compile(rb"[0-9A-Fa-f]+")
_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


# ---- deciding when a request is whole ----

class RequestReader:
    """Decides when the bytes received on a connection hold one whole HTTP/1.x request.

    `feed(data)` appends bytes and returns None while more are needed, or a verdict: "ready"
    (the request is complete: head and body; or the head already shows it malformed, which
    gunicorn's parser then rejects from the buffered bytes alone, without reading more) or an
    error (status, message) to answer without a thread. It reads nothing itself.
    """

    def __init__(self, max_line: int, max_head: int, max_body: int):
        self.max_line, self.max_head, self.max_body = max_line, max_head, max_body
        self.buf = bytearray()
        self.head_end: int | None = None    # index just past the blank line ending the head
        self.length: int | None = None      # Content-Length of the body
        self.chunked = False
        self.pos = 0                        # chunked: start of the next chunk-size line
        self.body = 0                       # chunked: data bytes of the chunks seen whole
        self.expect_line: tuple[int, int] | None = None   # span of "Expect: 100-continue"
        self._scanned = 0

    def feed(self, data: bytes):
        self.buf += data
        if self.head_end is None:
            verdict = self._head()
            if verdict is not None or self.head_end is None:
                return verdict
        return self._body()

    @property
    def waiting_for_body(self) -> bool:
        return self.head_end is not None

    # ---- the head ----

    def _head(self):
        buf = self.buf
        start = 2 if buf[:2] == b"\r\n" else 0          # one empty line may precede (RFC 9112)
        if len(buf) > start and buf[start] not in _TCHAR and buf[start] not in b"\r\n":
            # not a method: a TLS handshake (0x16) or other bytes on the plain port
            return 400, ("The request does not start with an HTTP method (this port speaks "
                         "plain HTTP/1.1, not TLS).")
        end = buf.find(b"\r\n\r\n", max(start, self._scanned - 3))
        if end < 0 and buf[start:start + 2] == b"\r\n":
            end = start - 2                             # nothing but empty lines: gunicorn's call
        # a bare LF ends no line here: gunicorn rejects it from what it has, without reading more
        j = buf.find(b"\n", max(self._scanned, 0), len(buf) if end < 0 else end + 4)
        while j >= 0:
            if j == 0 or buf[j - 1] != 0x0D:
                return "ready"
            j = buf.find(b"\n", j + 1, len(buf) if end < 0 else end + 4)
        line_end = buf.find(b"\r\n", start)
        line_len = (line_end if line_end >= 0 else len(buf)) - start
        if line_len > self.max_line + (0 if line_end >= 0 else 2):
            return 414, (f"The request line is longer than {self.max_line} bytes.")
        if end < 0:
            self._scanned = len(buf)
            if line_end >= 0 and len(buf) - line_end - 2 > self.max_head:
                return 431, (f"The request's header fields are larger than {self.max_head} "
                             "bytes.")
            return None
        if end < start:
            return "ready"
        self.head_end = end + 4
        lengths, codings, expect, hosts = [], [], None, 0
        offset = line_end + 2
        for line in bytes(buf[line_end + 2:end]).split(b"\r\n") if end > line_end else ():
            name, sep, value = line.partition(b":")
            n = name.lower()
            if not sep or n != n.strip():
                return "ready"                          # malformed: gunicorn answers 400
            if n == b"content-length":
                lengths.append(value.strip())
            elif n == b"transfer-encoding":
                codings += [c.strip().lower() for c in value.split(b",")]
            elif n == b"host":
                hosts += 1
            elif n == b"expect":
                if value.strip().lower() != b"100-continue":
                    return "ready"                      # gunicorn answers 417
                expect = (offset, offset + len(line) + 2)
            offset += len(line) + 2
        if codings and (lengths or codings[-1] != b"chunked" or codings.count(b"chunked") != 1):
            return "ready"                              # gunicorn refuses the framing
        if lengths and (codings or len(lengths) != 1 or not lengths[0].isdigit()):
            return "ready"                              # gunicorn answers 400
        if hosts != 1 and bytes(buf[start:line_end]).endswith(b"HTTP/1.1"):
            return 400, ("An HTTP/1.1 request must carry exactly one Host header field "
                         f"(it has {hosts}).")
        if codings:
            self.chunked = True
            self.pos = self.head_end
        elif lengths:
            self.length = int(lengths[0])
            if self.length > self.max_body:
                return 413, self._too_large()
        else:
            return "ready"                              # no body
        if expect is not None and bytes(buf[:line_end]).endswith(b"HTTP/1.1"):
            self.expect_line = expect
        return None

    # ---- the body ----

    def _too_large(self) -> str:
        return f"The request body is larger than {self.max_body} bytes."

    def _body(self):
        buf = self.buf
        if self.length is not None:
            return "ready" if len(buf) - self.head_end >= self.length else None
        while True:                                     # chunked: walk the whole chunks
            j = buf.find(b"\r\n", self.pos, self.pos + MAX_CHUNK_LINE + 2)
            if j < 0:
                if len(buf) - self.pos > MAX_CHUNK_LINE:
                    return 400, (f"A chunk-size line of the request body is longer than "
                                 f"{MAX_CHUNK_LINE} bytes.")
                return None
            size = bytes(buf[self.pos:j]).split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size):
                return 400, "A chunk size of the request body is not a hexadecimal number."
            size = int(size, 16)                        # leading zeros are allowed (RFC 9112)
            data = j + 2
            if size == 0:                               # last chunk, trailers, blank line
                if len(buf) < data + 2:
                    return None
                if buf[data:data + 2] == b"\r\n":
                    return "ready"
                if buf.find(b"\r\n\r\n", data) >= 0:
                    return "ready"
                if len(buf) - data > self.max_head:
                    return 431, "The request's trailer fields are too large."
                return None
            if self.body + size > self.max_body:
                return 413, self._too_large()
            if len(buf) < data + size + 2:
                return None
            if buf[data + size:data + size + 2] != b"\r\n":
                return 400, "A chunk of the request body is longer than its size says."
            self.body += size
            self.pos = data + size + 2

    def take_expect(self) -> bool:
        """If the client waits for "100 Continue" before its body: drop its Expect line (the
        worker answers it, gunicorn must not answer it again) and say so."""
        if self.expect_line is None:
            return False
        a, b = self.expect_line
        del self.buf[a:b]
        self.head_end -= b - a
        if self.chunked:
            self.pos -= b - a
        self.expect_line = None
        return True


def http_error(status: int, message: str, headers: dict | None = None,
               code: str | None = None, path: str = "") -> bytes:
    """A whole HTTP/1.1 response carrying the OpenAI error body (Anthropic's for a request to
    /v1/messages); the connection closes."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = code or {408: "request_timeout", 413: "request_too_large", 414: "uri_too_long",
                    431: "request_header_fields_too_large", 503: "server_busy"}.get(status)
    body = json.dumps(anthropic_error(status, message) if is_messages_path(path) else
                      error_body(message, kind, None, code)).encode()
    reason = _REASONS.get(status, "Error")
    head = [f"HTTP/1.1 {status} {reason}", "Connection: close",
            "Content-Type: application/json", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_REASONS = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
            413: "Content Too Large", 414: "URI Too Long", 417: "Expectation Failed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}

# gunicorn's parse errors -> (status, what to say before gunicorn's own message)
_PARSE_ERRORS = (
    ("LimitRequestLine", 414, "The request line is too long"),
    ("LimitRequestHeaders", 431, "The request's header fields are too large"),
    ("UnsupportedTransferCoding", 501, "Unsupported transfer coding"),
    ("ExpectationFailed", 417, "Unsupported expectation"),
    ("ForbiddenProxyRequest", 403, "Forbidden"),
    ("ConfigurationProblem", 500, "Server configuration problem"),
)


def parse_error_status(exc: BaseException) -> tuple[int, str]:
    """The status and message for an exception that escaped gunicorn's request handling."""
    app_fault = tuple(getattr(gerrors, n) for n in ("InvalidResponseHeader",
                                                    "InvalidResponseHeaderName")
                      if hasattr(gerrors, n))
    if isinstance(exc, gerrors.ParseException) and not isinstance(exc, app_fault):
        for name, status, text in _PARSE_ERRORS:
            cls = getattr(gerrors, name, None)
            if cls is not None and isinstance(exc, cls):
                return status, f"{text}: {exc}"
        return 400, f"Invalid HTTP request: {exc}"
    return 500, f"Internal server error ({type(exc).__name__})."


# ---- what the client has taken of an answer ----

_OUTQ = getattr(termios, "TIOCOUTQ", None) if sys.platform == "linux" else None
_ACKED_AT = 120                # struct tcp_info (linux/tcp.h): tcpi_bytes_acked, a u64
_TCP_ESTABLISHED, _TCP_CLOSE_WAIT = 1, 8
UNACKED_CAP = 1 << 20          # bytes of an answer written and not yet acknowledged, at most
POLL = (0.005, 0.1)            # seconds between looks at a stalled client: first, at most


class GuardedSocket(socket.socket):
    """A connection's socket whose `sendall` watches what the client's TCP acknowledges.

    gunicorn writes answers with `sendall`; a socket timeout fires only once the kernel's send
    buffer is full, and Linux grows that buffer to megabytes (tcp_wmem), so a stream whose
    client reads nothing used to run to its end into buffers. Here (Linux; elsewhere plain
    `sendall`), with `guard` set to the send timeout:

    - a write finding bytes outstanding (written, not acknowledged) and no acknowledgement for
      `guard` seconds raises TimeoutError: the client has taken nothing for that long, whatever
      the buffers would still hold (its own receive buffer fills first: ~100 KiB on Linux for a
      client that never reads, since receive buffers grow only as the application reads);
    - a write waits while UNACKED_CAP bytes are outstanding, under the same rule, so one answer
      never parks more than that in the server's kernel.

    `delivered()` says, once an answer is written, whether the client took it all.
    """

    guard = 0.0

    @classmethod
    def adopt(cls, sock: socket.socket) -> "socket.socket":
        if _OUTQ is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return sock
        timeout = sock.gettimeout()
        s = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        s.settimeout(timeout)
        s._acked, s._since = -1, 0.0
        return s

    def _look(self) -> tuple[int, int, int]:
        """(TCP state, bytes outstanding, bytes acknowledged so far)."""
        info = self.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _ACKED_AT + 8)
        queued = struct.unpack("i", fcntl.ioctl(self.fileno(), _OUTQ, b"\0\0\0\0"))[0]
        return info[0], queued, struct.unpack_from("Q", info, _ACKED_AT)[0]

    def _stalled(self, queued: int, acked: int) -> bool:
        """Whether the client has acknowledged nothing for `guard` seconds with bytes owed."""
        now = time.monotonic()
        if queued == 0 or acked != self._acked:
            self._acked, self._since = acked, now
            return False
        return now - self._since > self.guard

    def sendall(self, data, flags=0):
        if not self.guard:
            return super().sendall(data, flags)
        view = memoryview(data).cast("B")
        pause = POLL[0]
        while True:
            _, queued, acked = self._look()
            if self._stalled(queued, acked):
                raise TimeoutError(f"the client acknowledged nothing for {self.guard:g} s")
            room = UNACKED_CAP - queued
            if room > 0:
                n = self.send(view[:room], flags)
                view = view[n:]
                if not view:
                    return None
                pause = POLL[0]
                continue
            time.sleep(pause)
            pause = min(2 * pause, POLL[1])

    def delivered(self) -> bool:
        """After the last write: wait (under the same rule) until the client has acknowledged
        every byte; False if it reset the connection or stalled, i.e. it left before the end."""
        pause = POLL[0]
        while True:
            state, queued, acked = self._look()
            if state not in (_TCP_ESTABLISHED, _TCP_CLOSE_WAIT):
                return False
            if queued == 0:
                return True
            if not self.guard:
                return True                 # no send timeout: nothing to judge by
            if self._stalled(queued, acked):
                return False
            time.sleep(pause)
            pause = min(2 * pause, POLL[1])


# ---- the worker ----

class ReameConn(TConn):
    """A gthread connection that can carry bytes already read from its socket."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prebuf = b""
        self.complete = False          # its next request is whole in prebuf: give it a thread
        self.reader: RequestReader | None = None
        self.deadline = 0.0
        self.lingering = False
        self.drained = 0
        self.counted = True            # counts in the worker's nr_conns
        self.worker: "ReameWorker | None" = None

    def init(self):
        super().init()
        if self.prebuf:
            self.parser.unreader.unread(self.prebuf)
            self.prebuf = b""

    def close(self, graceful=False):
        if graceful and self.worker is not None and self.worker.preread:
            self.counted = False       # gthread has already counted it out
            self.worker.linger(self)
        else:
            super().close(graceful)


class ReameWorker(ThreadWorker):
    """gthread whose event loop reads each request whole before a thread handles it."""

    def init_process(self):
        self.reading: dict[ReameConn, None] = {}      # connections reading a request, or lingering
        self.buffered = 0
        self._stop_seen = False
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        config = _server_config(self.wsgi)
        self.header_timeout = config.header_timeout
        self.body_timeout = config.body_timeout
        self.send_timeout = config.send_timeout
        self.send_buffer = config.send_buffer
        self.max_body = config.max_body_bytes
        self.buffer_budget = 16 * config.max_body_bytes
        cfg = self.cfg
        self.max_line = cfg.limit_request_line if 0 < cfg.limit_request_line <= 8190 else 8190
        fields = cfg.limit_request_fields
        fields = fields if 0 < fields <= 32768 else 32768
        size = cfg.limit_request_field_size if cfg.limit_request_field_size > 0 else 8190
        self.max_head = fields * (size + 2) + 4
        self.preread = not (cfg.is_ssl or cfg.proxy_protocol != "off"
                            or getattr(cfg, "http2_cleartext", "off") not in ("off", None, False))
        self.worker_connections = _connection_cap(self.worker_connections, self.log)
        self.max_keepalived = self.worker_connections - cfg.threads

    # ---- accepting and handing out ----

    def accept(self, listener):
        try:
            sock, addr = listener.accept()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self.log.warning("cannot accept a connection: %s", e)
                return
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if self.send_buffer:                            # once per connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        sock = GuardedSocket.adopt(sock)
        self.nr_conns += 1
        conn = ReameConn(self.cfg, sock, addr, listener.getsockname())
        conn.worker = self
        self.enqueue_req(conn)

    def enqueue_req(self, conn):
        """Every path that gives a connection to a thread comes here: new connections, kept-alive
        ones turning readable, pipelined requests. Only whole requests go on."""
        if not self.preread or getattr(conn, "complete", True):
            if isinstance(conn, ReameConn):
                conn.complete = False
            return super().enqueue_req(conn)
        conn.reader = RequestReader(self.max_line, self.max_head, self.max_body)
        conn.deadline = self._deadline(self.header_timeout)
        self.reading[conn] = None
        pending = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        if pending:                                     # read ahead by the previous request
            if self._feed(conn, pending):
                return
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))

    def _readable(self, conn: ReameConn, _sock) -> None:
        try:
            data = conn.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if conn.lingering:
            conn.drained += len(data)
            if not data or conn.drained > LINGER_BYTES:
                self._drop(conn)
            return
        if not data:                                    # the client closed before finishing
            self._drop(conn)
            return
        self._feed(conn, data)

    def _feed(self, conn: ReameConn, data: bytes) -> bool:
        """Add received bytes; True once the connection has left the reading state."""
        reader = conn.reader
        if self.buffered + len(data) > self.buffer_budget:
            self._answer(conn, 503, "The server is receiving too many request bodies at once; "
                         "retry shortly.", {"Retry-After": str(RETRY_AFTER)})
            return True
        had_head = reader.waiting_for_body
        before = len(reader.buf)
        verdict = reader.feed(data)
        if verdict is None and reader.waiting_for_body and not had_head:
            conn.deadline = self._deadline(self.body_timeout)
            if reader.take_expect():
                _send_now(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        self.buffered += len(reader.buf) - before
        if verdict is None:
            return False
        if verdict == "ready":
            self._dispatch(conn)
        else:
            self._answer(conn, *verdict)
        return True

    def _deadline(self, seconds: float) -> float:
        now = time.monotonic()
        if not self.alive:                              # stopping: a short grace, as gthread
            seconds = min(seconds, STOP_GRACE)
        return now + seconds

    def _dispatch(self, conn: ReameConn) -> None:
        self._leave(conn)
        conn.prebuf = bytes(conn.reader.buf)
        conn.reader = None
        conn.data_ready = True
        conn.complete = True
        self.enqueue_req(conn)

    def _leave(self, conn: ReameConn) -> None:
        """Stop watching a reading connection (its buffer no longer counts)."""
        if conn.reader is not None:
            self.buffered -= len(conn.reader.buf)
        self.reading.pop(conn, None)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _drop(self, conn: ReameConn) -> None:
        self._leave(conn)
        conn.reader = None
        if conn.counted:
            self.nr_conns -= 1
        try:
            conn.sock.close()
        except OSError:
            pass

    def _answer(self, conn: ReameConn, status: int, message: str, headers=None,
                code: str | None = None) -> None:
        """Answer an error from the event loop, then close gracefully."""
        self.log.info("%s to %s: %s", status, _peer(conn), message)
        self._leave(conn)
        path = _target(conn.reader)
        conn.reader = None
        if _send_now(conn.sock, http_error(status, message, headers, code, path)):
            self.linger(conn)
        else:
            self._drop(conn)

    def linger(self, conn: ReameConn) -> None:
        """Close without blocking the event loop: stop writing, then read (and discard) what
        the client still sends for up to LINGER seconds, so that the kernel does not reset the
        connection before the client has read the answer (RFC 9112 section 9.6). gthread does
        this with blocking reads in the event loop itself, up to 2 s per connection."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            self._drop(conn)
            return
        conn.lingering = True
        conn.drained = 0
        conn.deadline = time.monotonic() + LINGER
        self.reading[conn] = None
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))

    # ---- deadlines (the event loop calls murder_pending about once a second) ----

    def murder_pending(self):
        super().murder_pending()
        now = time.monotonic()
        if not self.alive and not self._stop_seen:      # stopping: a short grace for requests
            self._stop_seen = True                      # being received, as gthread gives
            for conn in self.reading:                   # kept-alive connections
                conn.deadline = min(conn.deadline, now + STOP_GRACE)
        for conn in list(self.reading):
            if now < conn.deadline:
                continue
            if conn.lingering or not conn.reader.buf:
                self._drop(conn)                        # drained, or sent nothing: close quietly
            elif not self.alive:
                self._answer(conn, 503, "The server is shutting down; retry.",
                             {"Retry-After": str(RETRY_AFTER)}, "shutting_down")
            elif conn.reader.waiting_for_body:
                self._answer(conn, 408, f"The request body did not arrive within "
                             f"{self.body_timeout:g} s.")
            else:
                self._answer(conn, 408, f"The request head did not arrive within "
                             f"{self.header_timeout:g} s.")

    # ---- in the thread ----

    def handle_request(self, req, conn):
        if self.send_timeout:
            conn.sock.settimeout(self.send_timeout)
            conn.sock.guard = self.send_timeout
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            self.log.info("closed %s: the client read nothing for %g s", _peer(conn),
                          self.send_timeout)
            return False

    def handle_error(self, req, client, addr, exc):
        """gunicorn's errors as the OpenAI error body (JSON), not gunicorn's HTML page."""
        status, message = parse_error_status(exc)
        peer = (addr or ("",))[0]
        if status < 500 or status == 501:            # the client's request, not a fault here
            self.log.warning("Invalid request from ip=%s: %s", peer, exc)
        else:
            self.log.exception("Error handling request")
        try:
            _send_now(client, http_error(status, message, path=getattr(req, "path", "") or ""))
        except Exception:
            self.log.debug("Failed to send error message.")


# ---- the access log ----

class AccessLogger(glogging.Logger):
    """gunicorn's logger, whose access line gives a stream's outcome rather than the status
    its headers went out with: 499 (nginx's word for a client that went away) for a stream
    cut before its end, as /metrics counts it. gunicorn writes the line after the response's
    last byte, so the outcome is known by then."""

    def access(self, resp, req, environ, request_time):
        if resp is not None:
            resp.status = logged_status(getattr(resp, "status", None), environ)
        super().access(resp, req, environ, request_time)


def logged_status(status, environ):
    """The status an access line gives: a stream's outcome (see responses.ClosingStream) for a
    stream that went out as 200, else the status its headers had."""
    job = environ.get("reame.job") if environ else None
    if (job is None or not job.streaming or job.stream_status == 200
            or not (isinstance(status, str) and status.startswith("200"))):
        return status
    return ("499 Client Closed Request" if job.stream_status == 499 else
            f"{job.stream_status} Stream Failed")


# ---- helpers ----

def _target(reader: RequestReader | None) -> str:
    """The path of the request being read, as far as its request line has arrived ("" if
    unknown)."""
    if reader is None:
        return ""
    line = bytes(reader.buf[:reader.max_line + 2]).lstrip(b"\r\n").split(b"\r\n", 1)[0]
    parts = line.split()
    return parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) > 1 else ""


def _send_now(sock, data: bytes) -> bool:
    """Write without blocking (an error answer is small); False if the socket took not all."""
    timeout = sock.gettimeout()
    try:
        sock.setblocking(False)
        n = sock.send(data)
        return n == len(data)
    except OSError:
        return False
    finally:
        try:
            sock.settimeout(timeout)
        except OSError:
            pass


def _peer(conn) -> str:
    client = conn.client
    return client[0] if isinstance(client, tuple) else str(client)


def _server_config(wsgi):
    """The ServerConfig of the Reame app this worker serves (reame serve or reame.wsgi:app)."""
    from .config import ServerConfig
    handle = getattr(wsgi, "reame", None)
    if handle is None and hasattr(wsgi, "get"):                # reame.wsgi's LazyApp
        handle = getattr(wsgi.get(), "reame", None)
    return handle.config if handle is not None else ServerConfig.from_env()


def _connection_cap(wanted: int, log) -> int:
    """worker_connections, kept below the file-descriptor limit (raised to the hard limit):
    running out of descriptors would make accept() fail instead of making clients wait."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (ValueError, OSError):
        return wanted
    cap = max(16, soft - FD_RESERVE - len(os.listdir("/proc/self/fd"))
              if os.path.isdir("/proc/self/fd") else soft - 2 * FD_RESERVE)
    if wanted > cap:
        log.warning("max connections %d lowered to %d: the file-descriptor limit is %d",
                    wanted, cap, soft)
        return cap
    return wanted
