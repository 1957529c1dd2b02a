"""Pipelined commands on one connection: publishes are sent to their owners without waiting,
but every answer comes back in the order of the commands, errors included."""

from nsqwire import Conn, FRAME_ERROR, FRAME_RESPONSE, cmd_bytes, mpub_bytes


def test_pipelined_publishes_are_answered_in_order_then_the_error(broker):
    topics = ["pipe%d" % i for i in range(8)]  # spread over the shards' owners
    batch = b"".join(cmd_bytes("PUB %s" % t, "m-%d" % i) for i, t in enumerate(topics * 10))
    batch += mpub_bytes("pipe-m", ["a", "b", "c"])
    batch += cmd_bytes("PUB bad*topic", "x")
    with Conn(broker.addr) as c:
        c.send(batch)
        frames = [c.read_frame() for _ in range(len(topics) * 10 + 2)]
        assert frames[:-1] == [(FRAME_RESPONSE, b"OK")] * (len(topics) * 10 + 1)
        assert frames[-1] == (FRAME_ERROR, b'E_BAD_TOPIC PUB topic name "bad*topic" is not valid')
    # Every pipelined message was stored, once.
    for t in topics:
        with Conn(broker.addr) as s:
            s.sub(t, "check", rdy=100)
            got = sorted(s.read_message().body for _ in range(10))
            assert got == sorted(("m-%d" % i).encode() for i in range(len(topics) * 10)
                                 if topics[i % len(topics)] == t)
            s.expect_nothing(0.3)


def test_a_command_that_answers_waits_for_pipelined_publishes(broker):
    body = b'{"feature_negotiation":false}'
    with Conn(broker.addr) as c:
        c.send(cmd_bytes("PUB pipe-order", "1") + cmd_bytes("PUB pipe-order", "2")
               + b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body
               + cmd_bytes("SUB pipe-order ch"))
        # PUB, PUB, IDENTIFY, SUB: four OKs, in that order, nothing reordered or lost.
        assert [c.read_frame() for _ in range(4)] == [(FRAME_RESPONSE, b"OK")] * 4
