"""admin-ui's JSON API (admin-ui/API.md) against a real cluster.

The cluster: one lookup, two brokers (--shards 2) registered with it, an admin-ui pointed at the
lookup (`admin`) and one pointed only at the two brokers with --nsqd-http-address
(`admin_nsqd`). Covered: the page and static files, /ping; reading every endpoint (topics as the
union of both brokers', a topic's totals / per-node rows / aggregated channels, a channel with a
live consumer's client row, nodes, node, counter, lookups) checked against the brokers' own
/stats and the lookup's own HTTP API; every action (create at the lookup or, without lookups, on
the brokers; pause / unpause / empty of topics and channels; delete of channels and topics;
tombstone) checked at the brokers and the lookup; the errors (INVALID_ACTION, INVALID_BODY,
INVALID_TOPIC, INVALID_CHANNEL, TOPIC_NOT_FOUND, CHANNEL_NOT_FOUND, NODE_NOT_FOUND, NOT_FOUND,
METHOD_NOT_ALLOWED, FORBIDDEN_ORIGIN, FORBIDDEN) and "warnings" for an unreachable broker or
lookup; --admin-user and --notification-http-endpoint.
"""

import http.server
import json
import threading
import time

from adminlib import (assert_error, assert_json_type, closed_port, eventually, q, request,
                      wait_registered, wait_until)

TOPIC_FIGURES = ("depth", "backend_depth", "message_count")
CHANNEL_FIGURES = ("depth", "backend_depth", "in_flight_count", "deferred_count",
                   "requeue_count", "timeout_count", "message_count", "client_count")


def admins(cluster):
    return [("lookup admin", cluster.admin), ("nsqd admin", cluster.admin_nsqd)]



def check_topic_against_brokers(data, topic, brokers):
    """`data` (GET /api/topics/{topic}) must add up the brokers' own /stats."""
    stats = {b.node: b.topic_stats(topic) for b in brokers}
    stats = {n: t for n, t in stats.items() if t is not None}
    assert data["topic_name"] == topic
    rows = {r["node"]: r for r in data["nodes"]}
    assert set(rows) == set(stats), "per-node rows %s, brokers with the topic %s" % (
        sorted(rows), sorted(stats))
    for node, t in stats.items():
        row = rows[node]
        for f in TOPIC_FIGURES:
            assert row[f] == t[f], "node %s %s: admin %r, broker /stats %r" % (
                node, f, row[f], t[f])
        assert row["paused"] == t["paused"]
        assert row["channel_count"] == len(t["channels"]), (node, row, t["channels"])
        assert isinstance(row["memory_depth"], int) and row["memory_depth"] >= 0, row
    for f in TOPIC_FIGURES + ("memory_depth",):
        assert data[f] == sum(r[f] for r in data["nodes"]), "total %s %r, nodes %r" % (
            f, data[f], [r[f] for r in data["nodes"]])
    assert data["paused"] == any(t["paused"] for t in stats.values())
    # channels: each one added over the nodes that have it, sorted by name
    names = sorted({c["channel_name"] for t in stats.values() for c in t["channels"]})
    assert [c["channel_name"] for c in data["channels"]] == names
    for ch in data["channels"]:
        per_node = [c for t in stats.values() for c in t["channels"]
                    if c["channel_name"] == ch["channel_name"]]
        for f in CHANNEL_FIGURES:
            assert ch[f] == sum(c[f] for c in per_node), "channel %s %s: admin %r, brokers %r" % (
                ch["channel_name"], f, ch[f], [c[f] for c in per_node])
        assert ch["paused"] == any(c["paused"] for c in per_node)
        assert isinstance(ch["memory_depth"], int) and ch["memory_depth"] >= 0, ch


def check_channel_against_brokers(data, topic, channel, brokers):
    stats = {b.node: b.channel_stats(topic, channel) for b in brokers}
    stats = {n: c for n, c in stats.items() if c is not None}
    assert data["topic_name"] == topic and data["channel_name"] == channel
    rows = {r["node"]: r for r in data["nodes"]}
    assert set(rows) == set(stats)
    for node, c in stats.items():
        for f in CHANNEL_FIGURES:
            assert rows[node][f] == c[f], "node %s %s: admin %r, broker %r" % (
                node, f, rows[node][f], c[f])
        assert rows[node]["paused"] == c["paused"]
    for f in CHANNEL_FIGURES + ("memory_depth",):
        assert data[f] == sum(r[f] for r in data["nodes"]), (f, data)
    assert data["paused"] == any(c["paused"] for c in stats.values())
    clients = sorted((n, cl["client_id"], cl["remote_address"])
                     for n, c in stats.items() for cl in c["clients"])
    assert sorted((cl["node"], cl["client_id"], cl["remote_address"])
                  for cl in data["clients"]) == clients


# ---- the page, static files, /ping ------------------------------------------------------------

def test_ping_page_and_static_files(cluster):
    a = cluster.admin
    r = a.call("GET", "/ping")
    assert r.status == 200 and r.body.strip() == b"OK", r
    page = a.call("GET", "/")
    assert page.status == 200, page
    assert "text/html" in page.headers.get("Content-Type", ""), page.headers.get("Content-Type")
    assert b'id="app"' in page.body and b"/static/app.js" in page.body, page.body[:500]
    # any path outside /api/ and /static/ is the same page
    other = a.call("GET", "/topics/whatever")
    assert other.status == 200 and other.body == page.body, other
    for path in ("/static/app.js", "/static/style.css"):
        r = a.call("GET", path)
        assert r.status == 200 and len(r.body) > 0, (path, r)


# ---- reading --------------------------------------------------------------------------------

def test_topics_is_the_union_of_both_brokers(cluster):
    cluster.b1.publish("un_only1", 1)
    cluster.b2.publish("un_only2", 1)
    cluster.on_both("un_both")
    wait_registered(cluster.lookup, [cluster.b1], "un_only1")
    wait_registered(cluster.lookup, [cluster.b2], "un_only2")
    for name, admin in admins(cluster):
        data = admin.get("/api/topics")
        topics = data["topics"]
        assert {"un_only1", "un_only2", "un_both"} <= set(topics), (name, topics)
        assert topics == sorted(set(topics)), "%s: not sorted or has repeats: %r" % (name, topics)
        assert data["warnings"] == [], (name, data)


def test_topics_includes_a_topic_only_the_lookup_knows(cluster):
    r = request("POST", "http://%s/topic/create?topic=un_lookup_only" % cluster.lookup.http_address)
    assert r.status == 200, r
    data = cluster.admin.get("/api/topics")
    assert "un_lookup_only" in data["topics"], data
    # the brokers-only admin-ui reads no lookup: it does not see it
    assert "un_lookup_only" not in cluster.admin_nsqd.get("/api/topics")["topics"]


def test_topic_totals_nodes_and_channels(cluster):
    # c1 on both brokers, c2 only on the first; 3 messages on the first, 2 on the second
    for b in cluster.brokers:
        b.create_topic("tp_agg")
        b.create_channel("tp_agg", "c1")
    cluster.b1.create_channel("tp_agg", "c2")
    cluster.b1.publish("tp_agg", 3)
    cluster.b2.publish("tp_agg", 2)
    wait_registered(cluster.lookup, cluster.brokers, "tp_agg", "c1")
    for name, admin in admins(cluster):
        def check():
            data = admin.get("/api/topics/tp_agg")
            assert data["message_count"] == 5, (name, data)
            rows = {r["node"]: r for r in data["nodes"]}
            assert rows[cluster.b1.node]["message_count"] == 3, (name, rows)
            assert rows[cluster.b2.node]["message_count"] == 2, (name, rows)
            assert rows[cluster.b1.node]["channel_count"] == 2, (name, rows)
            assert rows[cluster.b2.node]["channel_count"] == 1, (name, rows)
            assert [c["channel_name"] for c in data["channels"]] == ["c1", "c2"], (name, data)
            assert data["paused"] is False
            assert data["warnings"] == []
            check_topic_against_brokers(data, "tp_agg", cluster.brokers)
        eventually(check)


def test_topic_on_one_broker_has_one_node_row(cluster):
    cluster.b2.publish("tp_one", 4)
    wait_registered(cluster.lookup, [cluster.b2], "tp_one")
    for name, admin in admins(cluster):
        data = admin.get("/api/topics/tp_one")
        assert [r["node"] for r in data["nodes"]] == [cluster.b2.node], (name, data)
        assert data["message_count"] == 4, (name, data)
        check_topic_against_brokers(data, "tp_one", cluster.brokers)


def test_topic_not_found(cluster):
    for name, admin in admins(cluster):
        assert_error(admin.call("GET", "/api/topics/tp_never_seen"), 404, "TOPIC_NOT_FOUND",
                     "%s GET /api/topics/tp_never_seen" % name)


def test_channel_totals_and_live_client(cluster):
    cluster.on_both("ch_live", channels=["c"], count=(2, 3))
    consumer = cluster.consumer(cluster.b1, "ch_live", "c", client_id="live-consumer",
                                hostname="live-host", user_agent="admin-tests/live")
    wait_until(lambda: (cluster.b1.channel_stats("ch_live", "c") or {}).get("client_count") == 1,
               "the consumer in broker 1's /stats")
    broker_client = cluster.b1.channel_stats("ch_live", "c")["clients"][0]
    for name, admin in admins(cluster):
        def check():
            data = admin.get("/api/topics/ch_live/c")
            assert data["client_count"] == 1, (name, data)
            assert data["message_count"] == 5, (name, data)
            assert data["warnings"] == [], (name, data)
            check_channel_against_brokers(data, "ch_live", "c", cluster.brokers)
            assert len(data["clients"]) == 1, (name, data["clients"])
            cl = data["clients"][0]
            assert cl["node"] == cluster.b1.node, (name, cl)
            assert cl["client_id"] == "live-consumer", (name, cl)
            assert cl["hostname"] == "live-host", (name, cl)
            assert cl["user_agent"] == "admin-tests/live", (name, cl)
            assert cl["version"] == "V2", (name, cl)
            assert cl["remote_address"] == consumer.local_address, (name, cl)
            assert cl["ready_count"] == 0 and cl["in_flight_count"] == 0, (name, cl)
            assert cl["connect_ts"] == broker_client["connect_ts"], (name, cl, broker_client)
            for f in ("message_count", "finish_count", "requeue_count"):
                assert cl[f] == broker_client[f], (name, f, cl, broker_client)
            # the topic's view of the channel counts the client too
            topic = admin.get("/api/topics/ch_live")
            [c] = topic["channels"]
            assert c["client_count"] == 1, (name, topic)
        eventually(check)


def test_channel_name_is_percent_decoded(cluster):
    cluster.on_both("ch_eph")
    cluster.consumer(cluster.b2, "ch_eph", "live#ephemeral", client_id="eph-consumer")
    wait_until(lambda: cluster.b2.channel_stats("ch_eph", "live#ephemeral"),
               "the ephemeral channel on broker 2")
    for name, admin in admins(cluster):
        data = eventually(lambda: admin.get("/api/topics/ch_eph/live%23ephemeral"))
        assert data["channel_name"] == "live#ephemeral", (name, data)
        assert [c["client_id"] for c in data["clients"]] == ["eph-consumer"], (name, data)
        assert [r["node"] for r in data["nodes"]] == [cluster.b2.node], (name, data)
        topic = admin.get("/api/topics/ch_eph")
        assert [c["channel_name"] for c in topic["channels"]] == ["live#ephemeral"], (name, topic)


def test_channel_not_found(cluster):
    cluster.on_both("ch_nf")
    for name, admin in admins(cluster):
        assert_error(admin.call("GET", "/api/topics/ch_nf/nochannel"), 404, "CHANNEL_NOT_FOUND",
                     "%s GET /api/topics/ch_nf/nochannel" % name)


def test_nodes_lists_both_brokers_with_topics(cluster, start_admin):
    cluster.b1.publish("nd_only1", 1)
    cluster.b2.publish("nd_only2", 1)
    wait_registered(cluster.lookup, [cluster.b1], "nd_only1")
    wait_registered(cluster.lookup, [cluster.b2], "nd_only2")
    # a third admin-ui with the lookup and one of the brokers: no repeats
    both = start_admin(lookups=[cluster.lookup.http_address], nsqds=[cluster.b1.node])
    expected = sorted([cluster.b1.node, cluster.b2.node])
    for name, admin in admins(cluster) + [("lookup+nsqd admin", both)]:
        def check():
            data = admin.get("/api/nodes")
            assert [n["node"] for n in data["nodes"]] == expected, (name, data)
            assert data["warnings"] == [], (name, data)
            for n in data["nodes"]:
                b = cluster.b1 if n["node"] == cluster.b1.node else cluster.b2
                assert n["broadcast_address"] == "127.0.0.1", (name, n)
                assert n["tcp_port"] == b.tcp_port and n["http_port"] == b.http_port, (name, n)
                assert n["version"] == b.stats()["version"], (name, n)
                assert isinstance(n["hostname"], str) and n["hostname"], (name, n)
                mine, other = (("nd_only1", "nd_only2") if b is cluster.b1
                               else ("nd_only2", "nd_only1"))
                topics = [t["topic"] for t in n["topics"]]
                assert mine in topics and other not in topics, (name, n)
                assert all(t["tombstoned"] is False for t in n["topics"]), (name, n)
                assert n["out_of_date"] is False, (name, n)
                if admin is not cluster.admin_nsqd:
                    assert n["remote_addresses"] == [
                        "%s/%s" % (cluster.lookup.http_address, n["remote_address"])], (name, n)
        eventually(check)


def test_node_figures(cluster):
    b = cluster.b1
    b.create_channel("nd_fig", "c")
    b.publish("nd_fig", 3)
    consumer = cluster.consumer(b, "nd_fig", "c", client_id="node-consumer")
    wait_until(lambda: (b.channel_stats("nd_fig", "c") or {}).get("client_count") == 1,
               "the consumer in broker 1's /stats")
    # the node as the page sends it (encodeURIComponent) and as written
    for path in ("/api/nodes/" + q(b.node), "/api/nodes/" + b.node):
        for name, admin in admins(cluster):
            def check():
                data = admin.get(path)
                stats = b.stats()
                assert data["node"] == b.node, (name, path, data)
                assert data["version"] == stats["version"], (name, data)
                assert data["health"] == stats["health"] == "OK", (name, data)
                assert data["start_time"] == stats["start_time"], (name, data)
                assert data["total_messages"] == sum(t["message_count"]
                                                     for t in stats["topics"]), (name, data)
                assert data["total_clients"] == sum(c["client_count"] for t in stats["topics"]
                                                    for c in t["channels"]), (name, data)
                assert data["total_clients"] >= 1
                assert data["warnings"] == []
                topics = {t["topic_name"]: t for t in data["topics"]}
                assert set(topics) == {t["topic_name"] for t in stats["topics"]}, (name, data)
                t = topics["nd_fig"]
                assert t["message_count"] == 3 and t["paused"] is False, (name, t)
                st = b.topic_stats("nd_fig")
                assert t["depth"] == st["depth"] and t["backend_depth"] == st["backend_depth"]
                [c] = t["channels"]
                sc = st["channels"][0]
                assert c["channel_name"] == "c" and c["client_count"] == 1, (name, c)
                for f in ("depth", "in_flight_count", "deferred_count", "message_count"):
                    assert c[f] == sc[f], (name, f, c, sc)
            eventually(check)
    consumer.close()


def test_node_not_found(cluster):
    for name, admin in admins(cluster):
        assert_error(admin.call("GET", "/api/nodes/127.0.0.1%3A1"), 404, "NODE_NOT_FOUND",
                     "%s GET /api/nodes/127.0.0.1%%3A1" % name)


def test_counter_counts_what_was_published(fresh_cluster):
    c = fresh_cluster
    c.b1.publish("cnt_a", 4)
    c.b2.publish("cnt_a", 3)
    c.b2.publish("cnt_b", 5)
    wait_registered(c.lookup, c.brokers, "cnt_a")
    wait_registered(c.lookup, [c.b2], "cnt_b")
    for name, admin in admins(c):
        def check():
            data = admin.get("/api/counter")
            assert data["message_count"] == 12, (name, data)
            assert sorted((t["topic_name"], t["message_count"]) for t in data["topics"]) == [
                ("cnt_a", 7), ("cnt_b", 5)], (name, data)
            assert data["warnings"] == [], (name, data)
        eventually(check)
    c.b1.publish("cnt_b", 2)
    eventually(lambda: _assert_eq(c.admin.get("/api/counter")["message_count"], 14))


def _assert_eq(got, want):
    assert got == want, "got %r, want %r" % (got, want)


def test_lookups(cluster):
    cluster.b1.create_channel("lk_t", "lk_c")
    wait_registered(cluster.lookup, [cluster.b1], "lk_t", "lk_c")
    data = cluster.admin.get("/api/lookups")
    assert data["warnings"] == []
    [lk] = data["lookups"]
    assert lk["address"] == cluster.lookup.http_address, lk
    assert lk["reachable"] is True, lk
    topics = {t["topic_name"]: t["channels"] for t in lk["topics"]}
    assert set(topics) == set(cluster.lookup.topics()), (topics, cluster.lookup.topics())
    assert topics["lk_t"] == ["lk_c"], topics
    for t, chans in topics.items():
        assert sorted(chans) == sorted(cluster.lookup.channels(t)), (t, chans)
    # the brokers-only admin-ui has no lookups
    data = cluster.admin_nsqd.get("/api/lookups")
    assert data["lookups"] == [] and data["warnings"] == [], data


# ---- actions --------------------------------------------------------------------------------

def test_create_topic_and_channel_at_the_lookup(cluster):
    cluster.admin.act("POST", "/api/topics", {"topic": "cr_t"})
    assert "cr_t" in cluster.lookup.topics()
    cluster.admin.act("POST", "/api/topics", {"topic": "cr_t2", "channel": "cr_c"})
    assert "cr_t2" in cluster.lookup.topics()
    assert cluster.lookup.channels("cr_t2") == ["cr_c"]
    assert {"cr_t", "cr_t2"} <= set(cluster.admin.get("/api/topics")["topics"])


def test_create_topic_and_channel_on_brokers_without_lookups(cluster):
    cluster.admin_nsqd.act("POST", "/api/topics", {"topic": "crn_t"})
    cluster.admin_nsqd.act("POST", "/api/topics", {"topic": "crn_t2", "channel": "crn_c"})
    for b in cluster.brokers:
        assert b.topic_stats("crn_t") is not None, "crn_t not on broker %s" % b.node
        assert b.channel_stats("crn_t2", "crn_c") is not None, (
            "crn_t2/crn_c not on broker %s" % b.node)
    data = cluster.admin_nsqd.get("/api/topics/crn_t2")
    assert [c["channel_name"] for c in data["channels"]] == ["crn_c"], data
    assert len(data["nodes"]) == 2, data


def test_pause_and_unpause_topic(cluster):
    cluster.on_both("pa_t")
    for name, admin in admins(cluster):
        admin.act("POST", "/api/topics/pa_t", {"action": "pause"})
        for b in cluster.brokers:
            assert b.topic_stats("pa_t")["paused"] is True, (name, b.node)
        data = admin.get("/api/topics/pa_t")
        assert data["paused"] is True and all(r["paused"] for r in data["nodes"]), (name, data)
        admin.act("POST", "/api/topics/pa_t", {"action": "unpause"})
        for b in cluster.brokers:
            assert b.topic_stats("pa_t")["paused"] is False, (name, b.node)
        data = admin.get("/api/topics/pa_t")
        assert data["paused"] is False and not any(r["paused"] for r in data["nodes"]), (
            name, data)


def test_topic_paused_when_any_node_has_it_paused(cluster):
    cluster.on_both("pa_any")
    cluster.b2.post("/topic/pause?topic=pa_any")
    for name, admin in admins(cluster):
        data = admin.get("/api/topics/pa_any")
        rows = {r["node"]: r["paused"] for r in data["nodes"]}
        assert data["paused"] is True, (name, data)
        assert rows == {cluster.b1.node: False, cluster.b2.node: True}, (name, rows)


def test_pause_and_unpause_channel(cluster):
    cluster.on_both("pa_ct", channels=["pc"])
    for name, admin in admins(cluster):
        admin.act("POST", "/api/topics/pa_ct/pc", {"action": "pause"})
        for b in cluster.brokers:
            assert b.channel_stats("pa_ct", "pc")["paused"] is True, (name, b.node)
            assert b.topic_stats("pa_ct")["paused"] is False, (name, b.node)
        data = admin.get("/api/topics/pa_ct/pc")
        assert data["paused"] is True and all(r["paused"] for r in data["nodes"]), (name, data)
        admin.act("POST", "/api/topics/pa_ct/pc", {"action": "unpause"})
        for b in cluster.brokers:
            assert b.channel_stats("pa_ct", "pc")["paused"] is False, (name, b.node)
        assert admin.get("/api/topics/pa_ct/pc")["paused"] is False


def test_empty_topic(cluster):
    cluster.on_both("em_t", count=(3, 4))
    for b in cluster.brokers:
        assert b.topic_stats("em_t")["depth"] > 0, ("precondition: depth on", b.node,
                                                    b.topic_stats("em_t"))
    cluster.admin.act("POST", "/api/topics/em_t", {"action": "empty"})
    for b in cluster.brokers:
        eventually(lambda: _assert_eq(b.topic_stats("em_t")["depth"], 0), timeout=3)
    assert cluster.admin.get("/api/topics/em_t")["depth"] == 0


def test_empty_channel(cluster):
    cluster.on_both("em_ct", channels=["ec"], count=(3, 2))
    for b in cluster.brokers:
        assert b.channel_stats("em_ct", "ec")["depth"] > 0, ("precondition: depth on", b.node)
    cluster.admin_nsqd.act("POST", "/api/topics/em_ct/ec", {"action": "empty"})
    for b in cluster.brokers:
        eventually(lambda: _assert_eq(b.channel_stats("em_ct", "ec")["depth"], 0), timeout=3)
    assert cluster.admin_nsqd.get("/api/topics/em_ct/ec")["depth"] == 0


def test_delete_channel(cluster):
    cluster.on_both("dl_ct", channels=["gone", "kept"])
    cluster.admin.act("DELETE", "/api/topics/dl_ct/gone")
    for b in cluster.brokers:
        assert b.channel_stats("dl_ct", "gone") is None, b.node
        assert b.channel_stats("dl_ct", "kept") is not None, b.node
    wait_until(lambda: "gone" not in cluster.lookup.channels("dl_ct"),
               "the lookup to drop channel dl_ct/gone")
    assert "kept" in cluster.lookup.channels("dl_ct")
    for name, admin in admins(cluster):
        assert_error(admin.call("GET", "/api/topics/dl_ct/gone"), 404, "CHANNEL_NOT_FOUND",
                     "%s GET of a deleted channel" % name)


def test_delete_topic(cluster):
    cluster.on_both("dl_t", channels=["c"])
    cluster.admin.act("DELETE", "/api/topics/dl_t")
    for b in cluster.brokers:
        assert b.topic_stats("dl_t") is None, b.node
    wait_until(lambda: "dl_t" not in cluster.lookup.topics(), "the lookup to drop topic dl_t")
    for name, admin in admins(cluster):
        eventually(lambda: _assert_not_in("dl_t", admin.get("/api/topics")["topics"]))
        assert_error(admin.call("GET", "/api/topics/dl_t"), 404, "TOPIC_NOT_FOUND",
                     "%s GET of a deleted topic" % name)


def _assert_not_in(item, items):
    assert item not in items, "%r still in %r" % (item, items)


def test_delete_topic_without_lookups(cluster):
    cluster.on_both("dln_t")
    cluster.admin_nsqd.act("DELETE", "/api/topics/dln_t")
    for b in cluster.brokers:
        assert b.topic_stats("dln_t") is None, b.node


def test_tombstone_topic_producer(cluster):
    cluster.on_both("tb_t")
    cluster.admin.act("DELETE", "/api/nodes/" + q(cluster.b1.node), {"topic": "tb_t"})
    ports = cluster.lookup.producer_tcp_ports("tb_t")
    assert cluster.b1.tcp_port not in ports, "tombstoned producer still in /lookup: %r" % ports
    assert cluster.b2.tcp_port in ports, ports
    [n1] = [n for n in cluster.lookup.nodes() if n["tcp_port"] == cluster.b1.tcp_port]
    # tombstoned, or already gone: the broker unregisters the topic it deleted
    assert dict(zip(n1["topics"], n1["tombstones"])).get("tb_t", True) is True, n1
    [n2] = [n for n in cluster.lookup.nodes() if n["tcp_port"] == cluster.b2.tcp_port]
    assert dict(zip(n2["topics"], n2["tombstones"]))["tb_t"] is False, n2
    # as nsqadmin 1.3: the topic is then deleted on the tombstoned node, not elsewhere
    assert cluster.b1.topic_stats("tb_t") is None
    assert cluster.b2.topic_stats("tb_t") is not None


# ---- errors ---------------------------------------------------------------------------------

def test_invalid_action(cluster):
    cluster.on_both("er_t", channels=["c"])
    a = cluster.admin
    assert_error(a.call("POST", "/api/topics/er_t", {"action": "explode"}), 400,
                 "INVALID_ACTION", "POST /api/topics/er_t explode")
    assert_error(a.call("POST", "/api/topics/er_t/c", {"action": "delete"}), 400,
                 "INVALID_ACTION", "POST /api/topics/er_t/c delete")
    for b in cluster.brokers:
        assert b.topic_stats("er_t")["paused"] is False


def test_invalid_body(cluster):
    cluster.on_both("er_b", channels=["c"])
    a = cluster.admin
    for path in ("/api/topics", "/api/topics/er_b", "/api/topics/er_b/c"):
        assert_error(a.call("POST", path, b"this is not json"), 400, "INVALID_BODY",
                     "POST %s with a body that is not JSON" % path)
    assert_error(a.call("DELETE", "/api/nodes/" + q(cluster.b1.node), b"{nope"), 400,
                 "INVALID_BODY", "DELETE /api/nodes/{node} with a body that is not JSON")


def test_invalid_topic_and_channel_names(cluster):
    a = cluster.admin
    for bad in ("bad topic", "bad/topic", "x" * 65, ""):
        assert_error(a.call("POST", "/api/topics", {"topic": bad}), 400, "INVALID_TOPIC",
                     "POST /api/topics topic=%r" % bad)
    assert_error(a.call("POST", "/api/topics", {"topic": "er_ok", "channel": "bad channel!"}),
                 400, "INVALID_CHANNEL", "POST /api/topics with a bad channel name")
    assert "bad topic" not in cluster.lookup.topics()


def test_method_not_allowed(cluster):
    a = cluster.admin
    cluster.on_both("er_m", channels=["c"])
    for method, path in (("PUT", "/api/topics"), ("DELETE", "/api/topics"),
                         ("PATCH", "/api/topics/er_m"), ("PUT", "/api/topics/er_m/c"),
                         ("POST", "/api/nodes"), ("POST", "/api/counter"),
                         ("DELETE", "/api/lookups")):
        body = b"{}" if method != "DELETE" else None
        assert_error(a.call(method, path, body), 405, "METHOD_NOT_ALLOWED",
                     "%s %s" % (method, path))


def test_actions_from_another_origin_are_refused(cluster):
    """A browser names the page behind a POST or DELETE in Origin: one from another site is
    refused (403 FORBIDDEN_ORIGIN) and changes nothing; admin-ui's own origin, and tools that
    send no Origin, are served."""
    a = cluster.admin
    cluster.on_both("er_o", channels=["c"])
    evil = {"Origin": "http://evil.example"}
    assert_error(a.call("POST", "/api/topics/er_o", {"action": "pause"}, headers=evil),
                 403, "FORBIDDEN_ORIGIN", "pause from another origin")
    assert_error(a.call("DELETE", "/api/topics/er_o/c", headers=evil),
                 403, "FORBIDDEN_ORIGIN", "delete from another origin")
    assert_error(a.call("POST", "/api/topics", '{"topic": "er_o2"}',
                        headers=dict(evil, **{"Content-Type": "text/plain"})),
                 403, "FORBIDDEN_ORIGIN", "create from another origin")
    data = a.get("/api/topics/er_o")
    assert data["paused"] is False
    assert [c["channel_name"] for c in data["channels"]] == ["c"]
    assert "er_o2" not in a.get("/api/topics")["topics"]
    own = {"Origin": a.base}
    a_resp = a.call("POST", "/api/topics/er_o", {"action": "pause"}, headers=own)
    assert a_resp.status == 200, a_resp
    assert a.get("/api/topics/er_o")["paused"] is True
    # Reading is never refused: a GET changes nothing.
    assert a.call("GET", "/api/topics", headers=evil).status == 200


class Hook:
    """An HTTP endpoint on 127.0.0.1 that keeps the JSON bodies POSTed to it."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                received.append((self.path, self.headers.get("Content-Type"),
                                 json.loads(self.rfile.read(n))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook?from=admin" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_admin_users_and_notifications(cluster, start_admin):
    """--admin-user: an action needs one of the users named in --acl-http-header (reading does
    not); --notification-http-endpoint: each action that succeeded is POSTed there as JSON, in
    nsqadmin's shape; a refused or failed one is not."""
    hook = Hook()
    try:
        a = start_admin(lookups=[cluster.lookup.http_address], extra=[
            "--admin-user=alice", "--admin-user=carol", "--acl-http-header=X-Remote-User",
            "--notification-http-endpoint=" + hook.url])
        cluster.on_both("au_t", channels=["c"])
        for headers in (None, {"X-Remote-User": "bob"}, {"X-Forwarded-User": "alice"}):
            assert_error(a.call("POST", "/api/topics/au_t/c", {"action": "pause"},
                                headers=headers), 403, "FORBIDDEN", "acting as %r" % headers)
        assert a.get("/api/topics/au_t/c")["paused"] is False
        alice = {"X-Remote-User": "alice", "User-Agent": "admin-test"}
        r = a.call("POST", "/api/topics/au_t/c", {"action": "pause"}, headers=alice)
        assert r.status == 200, r
        assert a.get("/api/topics/au_t/c")["paused"] is True
        r = a.call("POST", "/api/topics", {"topic": "au_new", "channel": "x"},
                   headers={"X-Remote-User": "carol"})
        assert r.status == 200, r
        # A failed action (unknown channel) tells nobody.
        r = a.call("POST", "/api/topics/au_t/nope", {"action": "empty"}, headers=alice)
        assert r.status == 404, r
        # nsqadmin's user is the request's basic-auth user (admin-ui falls back on the header's)
        basic = {"X-Remote-User": "alice", "Authorization": "Basic ZGF2ZTpwdw=="}  # dave:pw
        r = a.call("POST", "/api/topics/au_t/c", {"action": "unpause"}, headers=basic)
        assert r.status == 200, r
        wait_until(lambda: len(hook.received) >= 4, "four notifications")
        time_now = time.time()
        by_action = {body["action"]: (path, ctype, body) for path, ctype, body in hook.received}
        # as nsqadmin: a create with a channel is create_topic, then create_channel
        assert sorted(by_action) == ["create_channel", "create_topic", "pause_channel",
                                     "unpause_channel"], hook.received
        path, ctype, body = by_action["pause_channel"]
        assert path == "/hook?from=admin" and ctype == "application/json", (path, ctype)
        assert (body["topic"], body["channel"]) == ("au_t", "c"), body
        assert "node" not in body, "nsqadmin leaves an empty node out: %r" % body
        assert (body["user"], body["user_agent"]) == ("alice", "admin-test"), body
        assert body["remote_ip"].startswith("127.0.0.1:"), body
        assert body["url"].endswith("/api/topics/au_t/c"), body
        assert abs(body["timestamp"] - time_now) < 30 and body["via"], body
        _, _, body = by_action["create_channel"]
        assert (body["topic"], body["channel"], body["user"]) == ("au_new", "x", "carol"), body
        _, _, body = by_action["create_topic"]
        assert body["topic"] == "au_new" and "channel" not in body, body
        assert by_action["unpause_channel"][2]["user"] == "dave", by_action["unpause_channel"]
    finally:
        hook.close()


def test_unknown_api_path(cluster):
    for path in ("/api/nope", "/api/topicz", "/api/"):
        assert_error(cluster.admin.call("GET", path), 404, "NOT_FOUND", "GET %s" % path)


def test_warnings_name_an_unreachable_broker(cluster, start_admin):
    cluster.b1.create_channel("wn_t", "c")
    cluster.b1.publish("wn_t", 2)
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(nsqds=[cluster.b1.node, down])

    def names_down(data, what):
        assert any(down in w for w in data["warnings"]), (
            "%s: warnings %r do not name %s" % (what, data["warnings"], down))

    data = admin.get("/api/topics")
    names_down(data, "/api/topics")
    assert "wn_t" in data["topics"], data
    data = admin.get("/api/topics/wn_t")
    names_down(data, "/api/topics/wn_t")
    assert [r["node"] for r in data["nodes"]] == [cluster.b1.node], data
    assert data["message_count"] == 2, data
    check_topic_against_brokers(data, "wn_t", [cluster.b1])
    data = admin.get("/api/topics/wn_t/c")
    names_down(data, "/api/topics/wn_t/c")
    assert data["message_count"] == 2, data
    data = admin.get("/api/nodes")
    names_down(data, "/api/nodes")
    assert cluster.b1.node in [n["node"] for n in data["nodes"]], data
    data = admin.get("/api/counter")
    names_down(data, "/api/counter")
    assert data["message_count"] == sum(t["message_count"] for t in cluster.b1.stats()["topics"])


def test_warnings_name_an_unreachable_lookup(cluster, start_admin):
    cluster.b2.publish("wl_t", 1)
    wait_registered(cluster.lookup, [cluster.b2], "wl_t")
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(lookups=[cluster.lookup.http_address, down])
    data = admin.get("/api/topics")
    assert "wl_t" in data["topics"], data
    assert any(down in w for w in data["warnings"]), data
    data = admin.get("/api/lookups")
    assert any(down in w for w in data["warnings"]), data
    reach = {lk["address"]: lk["reachable"] for lk in data["lookups"]}
    assert reach.get(cluster.lookup.http_address) is True, data
    assert reach.get(down) is False, data
    data = admin.get("/api/topics/wl_t")
    assert data["message_count"] == 1 and any(down in w for w in data["warnings"]), data


def test_action_failing_on_an_unreachable_broker_is_a_warning(cluster, start_admin):
    """As nsqadmin: an action done where it could be, failing elsewhere, answers 200 with
    "WARNING: ..." naming what failed (a script written for nsqadmin reads a non-empty message
    as a failure)."""
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(nsqds=[cluster.b1.node, down])
    r = admin.call("POST", "/api/topics", {"topic": "fl_t"})
    assert r.status == 200, r
    assert_json_type(r, "a partial failure")
    message = r.json()["message"]
    assert message.startswith("WARNING: ") and down in message, r.body
    assert cluster.b1.topic_stats("fl_t") is not None


def test_action_failing_on_an_unreachable_lookup_is_a_warning(cluster, start_admin):
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(lookups=[cluster.lookup.http_address, down])
    r = admin.call("POST", "/api/topics", {"topic": "fl_l", "channel": "c"})
    assert r.status == 200, r
    message = r.json()["message"]
    assert message.startswith("WARNING: ") and down in message, r.body
    eventually(lambda: "fl_l" in cluster.lookup.topics())


def test_action_when_no_broker_answers_is_502_upstream_error(cluster, start_admin):
    """Nothing could be asked at all: nsqadmin's 502 {"message": "UPSTREAM_ERROR: ..."}."""
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(nsqds=[down])
    r = admin.call("POST", "/api/topics/nobody_t", {"action": "pause"})
    assert r.status == 502, r
    assert_json_type(r, "a 502 answer")
    message = r.json()["message"]
    assert message.startswith("UPSTREAM_ERROR: ") and down in message, r.body


def test_error_answers_are_json(cluster):
    r = cluster.admin.call("GET", "/api/topics/tp_never_seen_2")
    assert r.status == 404
    assert_json_type(r, "a 404 answer")
    assert set(r.json()) == {"message"}, r


def test_lookup_and_admin_ui_refuse_a_taken_port_and_stop_with_status_0():
    """nsqlookupd and nsqadmin end with status 0 on SIGTERM (a service manager's stop); a
    second one started on a port the first listens on fails at start-up, saying why, instead
    of sharing the port (SO_REUSEPORT) and answering for half of the connections."""
    import subprocess

    from adminlib import AdminUI, Lookup, admin_bin, lookup_bin

    lookup = Lookup().start()
    admin = AdminUI(lookups=[lookup.http_address]).start()
    try:
        for what, args in (
            ("lookup tcp", [lookup_bin(), "--tcp-address=" + lookup.tcp_address,
                            "--http-address=127.0.0.1:0"]),
            ("lookup http", [lookup_bin(), "--tcp-address=127.0.0.1:0",
                             "--http-address=" + lookup.http_address]),
            ("admin-ui", [admin_bin(), "--http-address=127.0.0.1:%d" % admin.ports["http"],
                          "--lookupd-http-address=" + lookup.http_address]),
        ):
            second = subprocess.run(args, capture_output=True, timeout=30,
                                    stdin=subprocess.DEVNULL)
            text = (second.stdout + second.stderr).decode(errors="replace")
            assert second.returncode != 0, "%s: a second process took the port\n%s" % (what, text)
            assert "Address already in use" in text, "%s: %s" % (what, text)
        assert request("GET", admin.base + "/ping").status == 200
        for p in (admin, lookup):
            p.proc.send_signal(subprocess.signal.SIGTERM)
            assert p.proc.wait(timeout=10) == 0, "%s exit status on SIGTERM\n%s" % (
                p.kind, p.stderr())
    finally:
        for p in (admin, lookup):
            p.stop()
            p.cleanup()
