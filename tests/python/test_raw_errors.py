"""Raw-socket tests of every error the broker can send, compared byte for byte with real nsqd.

The broker runs with the limits nsqd had when tests/fixtures/nsq/nsqd_tcp_transcripts.json was
recorded. The expected frames are read from that file; what was sent for each case is rebuilt
here (the file records the replies, the case name says what was sent).
"""

import json
import re
import struct

import pytest

from nsqwire import (FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Conn, body_bytes, cmd_bytes,
                     mpub_bytes)

FIXTURE_LIMITS = None  # filled from the fixture file's broker_flags

TOPIC = "raw_errors"
SUB_TOPIC = "raw_errors_sub"
ID16 = b"0123456789abcdef"

IDENTIFY_EMPTY = cmd_bytes("IDENTIFY", b"{}")
SUB = cmd_bytes("SUB %s ch" % SUB_TOPIC)


# What was sent for each transcript case: a list of chunks written in order.
SENT = {
    "IDENTIFY {}": [IDENTIFY_EMPTY],
    "IDENTIFY feature_negotiation": [cmd_bytes("IDENTIFY", b'{"feature_negotiation":true}')],
    "IDENTIFY heartbeat_interval 500": [cmd_bytes("IDENTIFY", b'{"heartbeat_interval":500}')],
    "IDENTIFY bad json": [cmd_bytes("IDENTIFY", b"{not json")],
    "IDENTIFY snappy+deflate": [cmd_bytes("IDENTIFY", b'{"feature_negotiation":true,"snappy":true,"deflate":true}')],
    "FOO": [IDENTIFY_EMPTY, b"FOO\n"],
    "PUB ok": [IDENTIFY_EMPTY, cmd_bytes("PUB %s" % TOPIC, b"hello")],
    "PUB bad topic": [IDENTIFY_EMPTY, cmd_bytes("PUB bad*topic", b"hello")],
    "MPUB bad topic": [IDENTIFY_EMPTY, mpub_bytes("bad*topic", [b"a", b"b"])],
    "DPUB bad topic": [IDENTIFY_EMPTY, cmd_bytes("DPUB bad*topic 100", b"hello")],
    "PUB empty": [IDENTIFY_EMPTY, cmd_bytes("PUB %s" % TOPIC, b"")],
    # Only the size is sent: the error must come before any body.
    "PUB 1025 (size only)": [b"PUB %s\n" % TOPIC.encode() + struct.pack(">I", 1025)],
    "MPUB 0 messages": [IDENTIFY_EMPTY,
                        b"MPUB %s\n" % TOPIC.encode() + struct.pack(">II", 4, 0)],
    "DPUB 60001": [IDENTIFY_EMPTY, cmd_bytes("DPUB %s 60001" % TOPIC, b"hello")],
    "RDY before SUB": [IDENTIFY_EMPTY, b"RDY 1\n"],
    "FIN before SUB": [IDENTIFY_EMPTY, b"FIN " + ID16 + b"\n"],
    "CLS before SUB": [b"CLS\n"],
    "SUB insufficient": [IDENTIFY_EMPTY, b"SUB %s\n" % TOPIC.encode()],
    "SUB bad topic": [IDENTIFY_EMPTY, b"SUB bad!topic ch\n"],
    "SUB bad channel": [IDENTIFY_EMPTY, b"SUB %s bad!chan\n" % TOPIC.encode()],
    "FIN unknown id": [IDENTIFY_EMPTY, SUB, b"FIN " + ID16 + b"\n"],
    "REQ unknown id": [IDENTIFY_EMPTY, SUB, b"REQ " + ID16 + b" 0\n"],
    "TOUCH unknown id": [IDENTIFY_EMPTY, SUB, b"TOUCH " + ID16 + b"\n"],
    "FIN malformed id": [IDENTIFY_EMPTY, SUB, b"FIN 0123\n"],
    "RDY 51 (max 50)": [IDENTIFY_EMPTY, SUB, b"RDY 51\n"],
    "CLS": [IDENTIFY_EMPTY, SUB, b"CLS\n"],
    "AUTH disabled": [cmd_bytes("AUTH", b"secret")],
}

# Cases the fixture file does not hold; expected texts are nsqd 1.3's (protocol_v2.go).
EXTRA = [
    ("MPUB body too big (size only)",
     [IDENTIFY_EMPTY, b"MPUB %s\n" % TOPIC.encode() + struct.pack(">I", 4097)],
     ["OK", "E_BAD_BODY MPUB body too big 4097 > 4096"], True),
    ("MPUB message too big",
     [IDENTIFY_EMPTY, mpub_bytes(TOPIC, [b"x" * 1025])],
     ["OK", "E_BAD_MESSAGE MPUB message too big 1025 > 1024"], True),
    # Only the body size, the count and the first message's size are sent: the error must
    # come at once, not after a body that may never arrive (nsqd reads the sizes one by one).
    ("MPUB message too big (sizes only)",
     [IDENTIFY_EMPTY, b"MPUB %s\n" % TOPIC.encode() + struct.pack(">III", 4000, 2, 1025)],
     ["OK", "E_BAD_MESSAGE MPUB message too big 1025 > 1024"], True),
    ("MPUB second message empty (sizes only)",
     [IDENTIFY_EMPTY,
      b"MPUB %s\n" % TOPIC.encode() + struct.pack(">III", 4000, 3, 2) + b"ab"
      + struct.pack(">I", 0)],
     ["OK", "E_BAD_MESSAGE MPUB invalid message(1) body size 0"], True),
    ("DPUB empty",
     [IDENTIFY_EMPTY, cmd_bytes("DPUB %s 0" % TOPIC, b"")],
     ["OK", "E_BAD_MESSAGE DPUB invalid message body size 0"], True),
    ("DPUB 1025 (size only)",
     [b"DPUB %s 10\n" % TOPIC.encode() + struct.pack(">I", 1025)],
     ["E_BAD_MESSAGE DPUB message too big 1025 > 1024"], True),
    ("PUB insufficient",
     [IDENTIFY_EMPTY, b"PUB\n"],
     ["OK", "E_INVALID PUB insufficient number of parameters"], True),
    ("DPUB insufficient",
     [b"DPUB %s\n" % TOPIC.encode()],
     ["E_INVALID DPUB insufficient number of parameters"], True),
    ("REQ before SUB",
     [b"REQ " + ID16 + b" 0\n"],
     ["E_INVALID cannot REQ in current state"], True),
    ("TOUCH before SUB",
     [b"TOUCH " + ID16 + b"\n"],
     ["E_INVALID cannot TOUCH in current state"], True),
    ("SUB twice",
     [IDENTIFY_EMPTY, SUB, SUB],
     ["OK", "OK", "E_INVALID cannot SUB in current state"], True),
    ("IDENTIFY after SUB",
     [IDENTIFY_EMPTY, SUB, IDENTIFY_EMPTY],
     ["OK", "OK", "E_INVALID cannot IDENTIFY in current state"], True),
    ("SUB with heartbeats disabled",
     [cmd_bytes("IDENTIFY", b'{"heartbeat_interval":-1}'), SUB],
     ["OK", "E_INVALID cannot SUB with heartbeats disabled"], True),
    ("REQ malformed id",
     [IDENTIFY_EMPTY, SUB, b"REQ 0123 0\n"],
     ["OK", "OK", "E_INVALID invalid message ID"], True),
    ("TOUCH malformed id",
     [IDENTIFY_EMPTY, SUB, b"TOUCH 0123456789abcdef0\n"],
     ["OK", "OK", "E_INVALID invalid message ID"], True),
    ("FIN insufficient",
     [IDENTIFY_EMPTY, SUB, b"FIN\n"],
     ["OK", "OK", "E_INVALID FIN insufficient number of params"], True),
    ("REQ insufficient",
     [IDENTIFY_EMPTY, SUB, b"REQ " + ID16 + b"\n"],
     ["OK", "OK", "E_INVALID REQ insufficient number of params"], True),
    ("RDY not a number",
     [IDENTIFY_EMPTY, SUB, b"RDY x\n"],
     ["OK", "OK", "E_INVALID RDY could not parse count x"], True),
    ("IDENTIFY empty body",
     [cmd_bytes("IDENTIFY", b"")],
     ["E_BAD_BODY IDENTIFY invalid body size 0"], True),
    ("unknown command before IDENTIFY",
     [b"HELLO there\n"],
     ["E_INVALID invalid command HELLO"], True),
]


def frame_type(t):
    return {"response": FRAME_RESPONSE, "error": FRAME_ERROR, "message": FRAME_MESSAGE}.get(t, t)


@pytest.fixture(scope="module")
def fixture_data(transcripts):
    return transcripts


@pytest.fixture(scope="module")
def limits_broker(module_brokers, transcripts):
    """A broker with the limits nsqd had when the transcripts were recorded."""
    _, data = transcripts
    wanted = ("--max-msg-size", "--max-body-size", "--max-rdy-count", "--max-req-timeout")
    flags = [f for f in data["broker_flags"] if f.split("=")[0] in wanted]
    assert len(flags) == 4, data["broker_flags"]
    return module_brokers.start(*flags)


def check_still_usable(conn):
    """A connection that got a non-fatal error must still work: NOP, then PUB answers OK."""
    conn.send(b"NOP\n" + cmd_bytes("PUB %s" % TOPIC, b"after-error"))
    ftype, data = conn.read_frame(timeout=5)
    assert (ftype, data) == (FRAME_RESPONSE, b"OK"), \
        "connection unusable after a non-fatal error: got type %d %r" % (ftype, data)


def run_case(addr, chunks, expected, closed, magic=b"  V2"):
    """Send the chunks, compare the frames byte for byte, then check close / still open."""
    with Conn(addr, magic=magic) as c:
        for ch in chunks:
            c.send(ch)
        got = []
        for i, (etype, edata) in enumerate(expected):
            try:
                ftype, data = c.read_frame(timeout=5)
            except Exception as e:
                raise AssertionError("frame %d: expected type %s %r; got %s after frames %r"
                                     % (i, etype, edata, e, got))
            got.append((ftype, data))
        return c, got, (c.wait_closed(5) if closed else c.is_open_after(0.5))


def test_fixture_case_list_is_covered(transcripts):
    cases, _ = transcripts
    missing = [name for name in cases
               if name not in SENT and name != "magic '  V1'"]
    assert not missing, "transcript cases with no send recipe: %r" % missing


@pytest.mark.parametrize("case", sorted(SENT))
def test_transcript_case(limits_broker, transcripts, case):
    cases, _ = transcripts
    spec = cases[case]
    expected = [(frame_type(f["type"]), f["data"].encode()) for f in spec["frames"]]
    with Conn(limits_broker.addr) as c:
        for ch in SENT[case]:
            c.send(ch)
        got = []
        for i, (etype, edata) in enumerate(expected):
            try:
                got.append(c.read_frame(timeout=5))
            except Exception as e:
                pytest.fail("%s: frame %d: expected type %d %r; got %s (frames so far: %r)"
                            % (case, i, etype, edata, e, got))
        if case == "IDENTIFY feature_negotiation":
            # JSON: compare fields and values (the version string is ours to choose).
            assert [t for t, _ in got] == [t for t, _ in expected]
            mine, theirs = json.loads(got[0][1]), json.loads(expected[0][1])
            assert sorted(mine) == sorted(theirs), "IDENTIFY response fields differ"
            assert re.match(r"^\d+\.\d+\.\d+", mine.pop("version"))
            theirs.pop("version")
            assert mine == theirs
        else:
            assert got == expected, "%s: frames differ" % case
        if spec["closed_by_server"]:
            assert c.wait_closed(5), "%s: server did not close the connection" % case
        else:
            assert c.is_open_after(0.5), "%s: server closed a connection it should keep" % case
            check_still_usable(c)


def test_bad_protocol_magic(limits_broker, transcripts):
    cases, _ = transcripts
    spec = cases["magic '  V1'"]
    expected = [(frame_type(f["type"]), f["data"].encode()) for f in spec["frames"]]
    with Conn(limits_broker.addr, magic=b"  V1") as c:
        got = [c.read_frame(timeout=5) for _ in expected]
        assert got == expected
        assert c.wait_closed(5), "server did not close after a bad magic"


@pytest.mark.parametrize("name,chunks,expected,closed", EXTRA, ids=[e[0] for e in EXTRA])
def test_extra_error_case(limits_broker, name, chunks, expected, closed):
    exp = [(FRAME_RESPONSE if t == "OK" else FRAME_ERROR, t.encode()) for t in expected]
    with Conn(limits_broker.addr) as c:
        for ch in chunks:
            c.send(ch)
        got = []
        for i, (etype, edata) in enumerate(exp):
            try:
                got.append(c.read_frame(timeout=5))
            except Exception as e:
                pytest.fail("frame %d: expected %r; got %s (frames so far: %r)"
                            % (i, edata, e, got))
        assert got == exp
        if closed:
            assert c.wait_closed(5), "server did not close the connection"
        else:
            assert c.is_open_after(0.5)
            check_still_usable(c)


def test_fin_of_message_owned_by_other_client_is_not_fatal(limits_broker):
    topic = "raw_owner"
    with Conn(limits_broker.addr) as a, Conn(limits_broker.addr) as b, \
            Conn(limits_broker.addr) as p:
        for c in (a, b):
            c.identify()
            c.sub(topic, "ch")
        a.cmd("RDY 1")
        p.pub(topic, b"owned-by-a")
        msg = a.read_message(timeout=10)
        assert msg.body == b"owned-by-a" and msg.attempts == 1
        for cmd, code in ((b"FIN", "E_FIN_FAILED"), (b"TOUCH", "E_TOUCH_FAILED"),
                          (b"REQ", "E_REQ_FAILED")):
            line = cmd + b" " + msg.id + (b" 0" if cmd == b"REQ" else b"") + b"\n"
            b.send(line)
            ftype, data = b.read_frame(timeout=5)
            assert ftype == FRAME_ERROR, (cmd, data)
            prefix = ("%s %s %s failed " % (code, cmd.decode(), msg.id.decode())).encode()
            assert data.startswith(prefix), (data, prefix)
        assert b.is_open_after(0.3)
        check_still_usable(b)
        # The owner can still finish it, with no error.
        a.fin(msg.id)
        a.cmd("NOP")
        a.expect_nothing(0.5)
        # And FIN again is now "not in flight".
        a.fin(msg.id)
        ftype, data = a.read_frame(timeout=5)
        assert (ftype, data) == (
            FRAME_ERROR, b"E_FIN_FAILED FIN " + msg.id + b" failed ID not in flight")
        check_still_usable(a)


def test_req_delay_out_of_range_is_clamped_not_fatal(limits_broker):
    """REQ with a delay above max-req-timeout is clamped (protocol.md), not an error."""
    topic = "raw_req_clamp"
    with Conn(limits_broker.addr) as a, Conn(limits_broker.addr) as p:
        a.identify()
        a.sub(topic, "ch", rdy=1)
        p.pub(topic, b"clamp")
        msg = a.read_message(timeout=10)
        a.req(msg.id, 60001)
        a.cmd("NOP")
        # No error frame and the connection stays open.
        a.expect_nothing(0.5)
        assert a.is_open_after(0.2)
        check_still_usable(a)


def test_sub_failed_when_max_channel_consumers_exceeded(start_broker):
    b = start_broker("--max-channel-consumers=1")
    with Conn(b.addr) as first, Conn(b.addr) as second:
        first.identify()
        first.sub("limited", "ch")
        second.identify()
        second.cmd("SUB limited ch")
        ftype, data = second.read_frame(timeout=5)
        assert ftype == FRAME_ERROR, data
        assert data.startswith(b"E_SUB_FAILED "), data
        assert b"exceeds limit of 1" in data, data
        assert second.wait_closed(5), "E_SUB_FAILED must close the connection"
        # Another channel on the same topic is not limited by the first one.
        with Conn(b.addr) as third:
            third.identify()
            third.sub("limited", "other")
        # The first consumer still works.
        with Conn(b.addr) as p:
            p.pub("limited", b"x")
        first.cmd("RDY 1")
        assert first.read_message(timeout=10).body == b"x"


def test_broker_still_serves_after_errors(limits_broker):
    """Run last in this file: after every error case above, a fresh client still works."""
    assert limits_broker.alive(), "broker died during the error tests"
    with Conn(limits_broker.addr) as p, Conn(limits_broker.addr) as s:
        s.identify()
        s.sub("after_errors", "ch", rdy=5)
        p.pub("after_errors", b"still-alive")
        msg = s.read_message(timeout=10)
        assert msg.body == b"still-alive" and msg.attempts == 1
        s.fin(msg.id)
        s.expect_nothing(0.3)
