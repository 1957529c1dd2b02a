"""admin-ui's JSON API for the brokers' features beyond nsqd (admin-ui/API.md "Beyond nsqd"),
against a real cluster (a lookup, two brokers with --shards 2, an admin-ui on the lookup and one
on the brokers).

Covered: a dead-letter topic's origin records gathered from both brokers
(`GET /api/dead_letters/{topic}`) and sent back (`POST /api/dead_letters/{topic}`
`{"action": "redrive"}`, all or one by `id`), checked at the brokers (records gone, messages back in the origin
topic); a channel's max attempts and dead-letter topic set on every broker that has it (and
what the brokers refuse); a channel's rewind to a time on every broker, and its dry run (the
messages it would deliver again, per broker and summed, nothing moved); a topic's retention set
on every broker and read back (limits, bytes kept summed, oldest message); the errors admin-ui
answers itself.
"""

import time

from adminlib import (assert_error, consume_and_finish, eventually, history_on_both,
                      make_dead_letters, q, wait_registered)


def admins(cluster):
    return [("lookup admin", cluster.admin), ("nsqd admin", cluster.admin_nsqd)]


# ---- dead letters -----------------------------------------------------------------------------

def test_dead_letters_of_both_brokers_are_listed_and_sent_back(cluster):
    topic, dead = "dl_orders", "dl_orders.dead"
    made = {cluster.b1.node: make_dead_letters(cluster.b1, topic, "work", dead, 2),
            cluster.b2.node: make_dead_letters(cluster.b2, topic, "work", dead, 1)}
    wait_registered(cluster.lookup, cluster.brokers, dead)
    for who, admin in admins(cluster):
        data = admin.get("/api/dead_letters/%s" % q(dead))
        assert data["topic_name"] == dead and data["warnings"] == [], (who, data)
        got = {(r["node"], r["id"]): r for r in data["dead_letters"]}
        want = {(n, r["id"]): r for n, recs in made.items() for r in recs}
        assert set(got) == set(want), (who, sorted(got), sorted(want))
        for key, r in got.items():
            for f in ("origin_topic", "origin_channel", "origin_id", "attempts", "preview",
                      "dead_lettered_at", "body_size"):
                assert r[f] == want[key][f], (who, key, f, r, want[key])
            assert r["origin_topic"] == topic and r["origin_channel"] == "work"
            assert r["preview"].startswith("poison-"), r
    # a topic that is no dead-letter topic has no records; an unknown one is not found
    assert cluster.admin.get("/api/dead_letters/%s" % topic)["dead_letters"] == []
    assert_error(cluster.admin.call("GET", "/api/dead_letters/dl_nope"), 404, "TOPIC_NOT_FOUND",
                 "unknown topic")

    before = sum(b.topic_stats(topic)["message_count"] for b in cluster.brokers)
    r = cluster.admin.call("POST", "/api/dead_letters/%s" % q(dead), {"action": "redrive"})
    assert r.status == 200, r
    answer = r.json()
    assert answer["message"] == "" and answer["redriven"] == 3 and answer["missing"] == 0, answer
    per_node = {n["node"]: n["redriven"] for n in answer["nodes"]}
    assert per_node == {cluster.b1.node: 2, cluster.b2.node: 1}, answer
    assert cluster.admin.get("/api/dead_letters/%s" % q(dead))["dead_letters"] == []
    after = sum(b.topic_stats(topic)["message_count"] for b in cluster.brokers)
    assert after == before + 3, (before, after)


def test_redrive_errors(cluster):
    cluster.b1.create_topic("dl_plain")
    path = "/api/dead_letters/dl_plain"
    assert_error(cluster.admin.call("POST", path, {"action": "pause"}), 400, "INVALID_ACTION",
                 "redrive with another action")
    assert_error(cluster.admin.call("POST", path, b"not json"), 400, "INVALID_BODY", "bad body")
    assert_error(cluster.admin.call("POST", path, {"action": "redrive", "id": 5}), 400,
                 "INVALID_ID", "id not a string")
    assert_error(cluster.admin.call("POST", "/api/dead_letters/dl_nope", {"action": "redrive"}),
                 404, "TOPIC_NOT_FOUND", "unknown topic")
    r = cluster.admin.call("PUT", path, {"action": "redrive"})
    assert r.status == 405 and r.headers.get("Allow") == "GET, POST", r
    # nothing recorded: nothing sent back
    r = cluster.admin.call("POST", path, {"action": "redrive"})
    assert r.status == 200 and r.json()["redriven"] == 0, r


# ---- a channel's max attempts and dead-letter topic ---------------------------------------------

def test_channel_config_is_set_on_every_broker_and_read_back(cluster):
    cluster.on_both("cfg_t", channels=["c", "other"])
    path = "/api/topics/cfg_t/c"
    plain = cluster.admin.get(path)
    for k in ("max_attempts", "dead_letter_topic", "dead_lettered_count"):
        assert k not in plain and all(k not in n for n in plain["nodes"]), (k, plain)
    cluster.admin.act("POST", path, {"action": "config", "max_attempts": "3",
                                     "dead_letter_topic": "cfg_t.dead"})
    for b in cluster.brokers:
        c = b.channel_stats("cfg_t", "c")
        assert (c["max_attempts"], c["dead_letter_topic"], c["dead_lettered_count"]) == (
            3, "cfg_t.dead", 0), (b.node, c)
        assert "max_attempts" not in b.channel_stats("cfg_t", "other"), "other channel changed"
    for who, admin in admins(cluster):
        data = admin.get(path)
        assert (data["max_attempts"], data["dead_letter_topic"], data["dead_lettered_count"]) == (
            3, "cfg_t.dead", 0), (who, data)
        assert all(n["max_attempts"] == 3 for n in data["nodes"]), (who, data["nodes"])
        ch = {c["channel_name"]: c for c in admin.get("/api/topics/cfg_t")["channels"]}
        assert ch["c"]["max_attempts"] == 3 and "max_attempts" not in ch["other"], (who, ch)
    # a number works too; back to the flag's (none): nsqd's shape again
    cluster.admin_nsqd.act("POST", path, {"action": "config", "max_attempts": 5})
    assert all(b.channel_stats("cfg_t", "c")["max_attempts"] == 5 for b in cluster.brokers)
    cluster.admin.act("POST", path, {"action": "config", "max_attempts": "default",
                                     "dead_letter_topic": ""})
    data = cluster.admin.get(path)
    assert "max_attempts" not in data and "dead_lettered_count" not in data, data


def test_channel_config_errors(cluster):
    cluster.on_both("cfg_e", channels=["c"])
    path = "/api/topics/cfg_e/c"
    assert_error(cluster.admin.call("POST", path, {"action": "config"}), 400,
                 "MISSING_SETTINGS: give max_attempts or dead_letter_topic", "no setting")
    assert_error(cluster.admin.call("POST", path, {"action": "config", "max_attempts": [1]}),
                 400, "INVALID_MAX_ATTEMPTS", "a list")
    assert_error(cluster.admin.call("POST", "/api/topics/cfg_e/nope",
                                    {"action": "config", "max_attempts": "2"}),
                 404, "CHANNEL_NOT_FOUND", "unknown channel")
    # what the brokers refuse: every one refused, so nothing was done
    r = cluster.admin.call("POST", path, {"action": "config", "max_attempts": "lots"})
    assert r.status == 502, r
    message = r.json()["message"]
    assert message.startswith("UPSTREAM_ERROR: ") and "INVALID_MAX_ATTEMPTS" in message, message
    assert all(b.node in message for b in cluster.brokers), message
    r = cluster.admin.call("POST", path, {"action": "config", "dead_letter_topic": "cfg_e"})
    assert r.status == 502 and "INVALID_DEAD_LETTER_TOPIC" in r.json()["message"], r


def test_dead_lettered_counts_add_up_over_brokers(cluster):
    make_dead_letters(cluster.b1, "cnt_t", "work", "cnt_t.dead", 2)
    make_dead_letters(cluster.b2, "cnt_t", "work", "cnt_t.dead", 1)
    data = cluster.admin_nsqd.get("/api/topics/cnt_t/work")
    assert data["dead_lettered_count"] == 3, data
    per_node = {n["node"]: n["dead_lettered_count"] for n in data["nodes"]}
    assert per_node == {cluster.b1.node: 2, cluster.b2.node: 1}, per_node
    assert data["max_attempts"] == 1 and data["dead_letter_topic"] == "cnt_t.dead", data


# ---- rewind ---------------------------------------------------------------------------------

def rfc3339_ms(ns):
    """As the page's Date.toISOString(): UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + ".%03dZ" % (
        ns // 10**6 % 1000)


def offsets(cluster, topic, channel):
    return {b.node: b.channel_stats(topic, channel)["offset"] for b in cluster.brokers}


def test_rewind_dry_run_counts_and_rewind_moves_every_broker(cluster):
    topic, path = "rw_t", "/api/topics/rw_t/c"
    middle = history_on_both(cluster, topic, "c", before=(3, 4), after=(2, 1))
    b1, b2 = cluster.b1.node, cluster.b2.node
    assert offsets(cluster, topic, "c") == {b1: 5, b2: 5}
    for who, admin in admins(cluster):
        for at in (str(middle), middle, rfc3339_ms(middle)):
            r = admin.call("POST", path, {"action": "rewind", "timestamp": at, "dry_run": True})
            assert r.status == 200, (who, at, r)
            plan = r.json()
            assert plan["message"] == "" and plan["redelivered"] == 3, (who, at, plan)
            per_node = {n["node"]: (n["offset"], n["redelivered"]) for n in plan["nodes"]}
            assert per_node == {b1: (3, 2), b2: (4, 1)}, (who, at, plan)
        r = admin.call("POST", path, {"action": "rewind", "earliest": True, "dry_run": True})
        assert r.status == 200 and r.json()["redelivered"] == 10, (who, r)
    assert offsets(cluster, topic, "c") == {b1: 5, b2: 5}, "a dry run moved a channel"

    cluster.admin.act("POST", path, {"action": "rewind", "timestamp": rfc3339_ms(middle)})
    assert offsets(cluster, topic, "c") == {b1: 3, b2: 4}
    assert consume_and_finish(cluster.b1, topic, "c", 2) == ["late-0", "late-1"]
    assert consume_and_finish(cluster.b2, topic, "c", 1) == ["late-0"]


def test_rewind_errors(cluster):
    cluster.on_both("rw_e", channels=["c"])
    path = "/api/topics/rw_e/c"
    for body in ({"action": "rewind"}, {"action": "rewind", "timestamp": ""},
                 {"action": "rewind", "timestamp": "x", "earliest": True},
                 {"action": "rewind", "earliest": False}):
        r = cluster.admin.call("POST", path, body)
        assert r.status == 400 and r.json()["message"].startswith("INVALID_POSITION"), (body, r)
    assert_error(cluster.admin.call("POST", path, {"action": "rewind", "earliest": True,
                                                   "dry_run": "yes"}),
                 400, "INVALID_DRY_RUN", "dry_run not a boolean")
    assert_error(cluster.admin.call("POST", "/api/topics/rw_e/nope",
                                    {"action": "rewind", "earliest": True}),
                 404, "CHANNEL_NOT_FOUND", "unknown channel")
    # what the brokers refuse (a time they cannot read) is named
    r = cluster.admin.call("POST", path, {"action": "rewind", "timestamp": "yesterday",
                                          "dry_run": True})
    assert r.status == 502 and "INVALID_ARG_TIMESTAMP" in r.json()["message"], r


# ---- retention ----------------------------------------------------------------------------------

def test_topic_retention_is_set_on_every_broker_and_read_back(cluster):
    cluster.on_both("ret_t", count=(3, 2))
    path = "/api/topics/ret_t"
    plain = cluster.admin.get(path)
    assert "retention" not in plain and all("retention" not in n for n in plain["nodes"]), plain
    cluster.admin.act("POST", path, {"action": "config", "retention_time": "24h",
                                     "retention_bytes": "10GiB"})
    for b in cluster.brokers:
        r = b.topic_stats("ret_t")["retention"]
        assert (r["time_ns"], r["bytes"]) == (24 * 3600 * 10**9, 10 * 2**30), (b.node, r)

    def read_back():
        for who, admin in admins(cluster):
            data = admin.get(path)
            brokers = [b.topic_stats("ret_t")["retention"] for b in cluster.brokers]
            r = data["retention"]
            assert (r["time_ns"], r["bytes"], r["nodes"]) == (24 * 3600 * 10**9, 10 * 2**30, 2)
            assert r["retained_bytes"] == sum(x["retained_bytes"] for x in brokers), (who, r)
            assert r["oldest_timestamp"] == min(x["oldest_timestamp"] for x in brokers), (who, r)
            assert {n["node"]: n["retention"]["time_ns"] for n in data["nodes"]} == {
                b.node: 24 * 3600 * 10**9 for b in cluster.brokers}, (who, data["nodes"])
    eventually(read_back)
    # one setting at a time; "default" goes back to the flags' (none here)
    cluster.admin_nsqd.act("POST", path, {"action": "config", "retention_bytes": "default"})
    assert cluster.admin.get(path)["retention"]["bytes"] == 0
    cluster.admin.act("POST", path, {"action": "config", "retention_time": "default"})
    assert "retention" not in cluster.admin.get(path)


def test_topic_retention_errors(cluster):
    cluster.on_both("ret_e")
    path = "/api/topics/ret_e"
    assert_error(cluster.admin.call("POST", path, {"action": "config"}), 400,
                 "MISSING_SETTINGS: give retention_time or retention_bytes", "no setting")
    assert_error(cluster.admin.call("POST", "/api/topics/ret_nope",
                                    {"action": "config", "retention_time": "1h"}),
                 404, "TOPIC_NOT_FOUND", "unknown topic")
    r = cluster.admin.call("POST", path, {"action": "config", "retention_time": "90"})
    assert r.status == 502 and "INVALID_RETENTION_TIME" in r.json()["message"], r
    r = cluster.admin.call("POST", path, {"action": "config", "retention_bytes": "-1"})
    assert r.status == 502 and "INVALID_RETENTION_BYTES" in r.json()["message"], r
    # the other actions are nsqadmin's still
    assert_error(cluster.admin.call("POST", path, {"action": "retain"}), 400, "INVALID_ACTION",
                 "unknown action")


def test_redrive_of_one_record_by_id(cluster):
    made = make_dead_letters(cluster.b2, "dl_one", "work", "dl_one.dead", 2)
    r = cluster.admin_nsqd.call("POST", "/api/dead_letters/dl_one.dead",
                                {"action": "redrive", "id": made[0]["id"]})
    assert r.status == 200 and (r.json()["redriven"], r.json()["missing"]) == (1, 0), r
    left = cluster.admin_nsqd.get("/api/dead_letters/dl_one.dead")["dead_letters"]
    assert [x["id"] for x in left] == [made[1]["id"]], left
