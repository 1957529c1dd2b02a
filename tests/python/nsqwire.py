"""A tiny raw NSQ protocol V2 client for wire-level tests.

Frames from the server are [u32 BE size][u32 BE type][data], size counting type + data.
Types: 0 response, 1 error, 2 message. Message data is
[i64 BE timestamp ns][u16 BE attempts][16-byte ASCII hex id][body].

Every read is bounded by a timeout; nothing here can block forever.
"""

import json
import socket
import struct
import time

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

HEARTBEAT = b"_heartbeat_"
MAGIC_V2 = b"  V2"


class WireError(AssertionError):
    pass


class Message:
    __slots__ = ("timestamp", "attempts", "id", "body")

    def __init__(self, timestamp, attempts, msg_id, body):
        self.timestamp = timestamp
        self.attempts = attempts
        self.id = msg_id
        self.body = body

    @classmethod
    def parse(cls, data):
        if len(data) < 26:
            raise WireError("message frame too short: %r" % (data,))
        ts, attempts = struct.unpack(">qH", data[:10])
        return cls(ts, attempts, bytes(data[10:26]), bytes(data[26:]))

    def __repr__(self):
        return "Message(id=%r, attempts=%d, body=%r)" % (self.id, self.attempts, self.body)


def body_bytes(body):
    if isinstance(body, str):
        body = body.encode()
    return struct.pack(">I", len(body)) + body


def cmd_bytes(line, body=None):
    if isinstance(line, str):
        line = line.encode()
    out = line + b"\n"
    if body is not None:
        out += body_bytes(body)
    return out


def mpub_bytes(topic, bodies):
    parts = [struct.pack(">I", len(bodies))]
    for b in bodies:
        if isinstance(b, str):
            b = b.encode()
        parts.append(struct.pack(">I", len(b)) + b)
    payload = b"".join(parts)
    return ("MPUB %s\n" % topic).encode() + struct.pack(">I", len(payload)) + payload


class Conn:
    """One raw connection to the broker: TCP to (host, port), or a unix socket path (a str)."""

    def __init__(self, addr, magic=MAGIC_V2, timeout=10.0):
        self.addr = addr
        if isinstance(addr, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(addr)
        else:
            self.sock = socket.create_connection(addr, timeout=timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.default_timeout = timeout
        self.heartbeats = 0
        if magic is not None:
            self.sock.sendall(magic)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sending -------------------------------------------------------------------------------
    def send(self, data):
        self.sock.sendall(data)

    def cmd(self, line, body=None):
        self.send(cmd_bytes(line, body))

    def identify(self, **fields):
        """IDENTIFY and return the response data (b'OK' or JSON bytes)."""
        self.cmd("IDENTIFY", json.dumps(fields).encode())
        ftype, data = self.read_frame()
        if ftype != FRAME_RESPONSE:
            raise WireError("IDENTIFY got frame type %d: %r" % (ftype, data))
        return data

    def expect_ok(self, what="command", timeout=None):
        ftype, data = self.read_frame(timeout=timeout)
        if (ftype, data) != (FRAME_RESPONSE, b"OK"):
            raise WireError("%s: expected OK response, got type %d %r" % (what, ftype, data))

    def sub(self, topic, channel, rdy=None):
        self.cmd("SUB %s %s" % (topic, channel))
        self.expect_ok("SUB %s %s" % (topic, channel))
        if rdy is not None:
            self.cmd("RDY %d" % rdy)

    def pub(self, topic, body):
        self.cmd("PUB %s" % topic, body)
        self.expect_ok("PUB %s" % topic)

    def mpub(self, topic, bodies):
        self.send(mpub_bytes(topic, bodies))
        self.expect_ok("MPUB %s" % topic)

    def dpub(self, topic, defer_ms, body):
        self.cmd("DPUB %s %d" % (topic, defer_ms), body)
        self.expect_ok("DPUB %s" % topic)

    def fin(self, msg_id):
        self.cmd(b"FIN " + msg_id)

    def req(self, msg_id, delay_ms=0):
        self.cmd(b"REQ " + msg_id + (" %d" % delay_ms).encode())

    def touch(self, msg_id):
        self.cmd(b"TOUCH " + msg_id)

    # -- receiving -----------------------------------------------------------------------------
    def _fill(self, n, deadline):
        while len(self.buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out waiting for %d bytes (have %d)" % (n, len(self.buf)))
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by server (have %d of %d bytes: %r)"
                                      % (len(self.buf), n, bytes(self.buf)))
            self.buf += chunk

    def read_raw_frame(self, timeout=None):
        """Next frame, heartbeats included: (type, data)."""
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        self._fill(4, deadline)
        (size,) = struct.unpack(">I", self.buf[:4])
        if size < 4 or size > 64 * 1024 * 1024:
            raise WireError("bad frame size %d (buffer %r)" % (size, bytes(self.buf[:64])))
        self._fill(4 + size, deadline)
        (ftype,) = struct.unpack(">I", self.buf[4:8])
        data = bytes(self.buf[8:4 + size])
        del self.buf[:4 + size]
        return ftype, data

    def read_frame(self, timeout=None, answer_heartbeats=True):
        """Next frame that is not a heartbeat (heartbeats are answered with NOP)."""
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        while True:
            ftype, data = self.read_raw_frame(timeout=max(0.0, deadline - time.monotonic()))
            if ftype == FRAME_RESPONSE and data == HEARTBEAT:
                self.heartbeats += 1
                if answer_heartbeats:
                    self.cmd("NOP")
                continue
            return ftype, data

    def read_message(self, timeout=None):
        ftype, data = self.read_frame(timeout=timeout)
        if ftype != FRAME_MESSAGE:
            raise WireError("expected a message frame, got type %d %r" % (ftype, data))
        return Message.parse(data)

    def read_messages(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < n:
            out.append(self.read_message(timeout=max(0.0, deadline - time.monotonic())))
        return out

    def expect_nothing(self, seconds):
        """Assert no non-heartbeat frame arrives within `seconds` (connection stays open)."""
        try:
            ftype, data = self.read_frame(timeout=seconds)
        except socket.timeout:
            return
        if ftype == FRAME_MESSAGE:
            raise WireError("unexpected message frame: %r" % (Message.parse(data),))
        raise WireError("unexpected frame type %d: %r" % (ftype, data))

    def wait_closed(self, timeout=5.0):
        """True if the server closed the connection within `timeout` (after any pending frames)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self.buf += chunk

    def is_open_after(self, seconds):
        """True if the server neither closed the connection nor sent a non-heartbeat frame."""
        return not self.wait_closed(seconds)


def wait_for(pred, timeout, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
