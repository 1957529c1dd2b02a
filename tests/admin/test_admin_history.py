"""admin-ui's JSON API for the brokers' features beyond nsqd (admin-ui/API.md "Beyond nsqd"),
against a real cluster (a lookup, two brokers with --shards 2, an admin-ui on the lookup and one
on the brokers).

Covered: a dead-letter topic's origin records gathered from both brokers
(`GET /api/dead_letters/{topic}`) and sent back (`POST /api/dead_letters/{topic}`
`{"action": "redrive"}`), checked at the brokers (records gone, messages back in the origin
topic); a channel's max attempts and dead-letter topic set on every broker that has it (and
what the brokers refuse); the errors admin-ui answers itself.
"""

from adminlib import assert_error, make_dead_letters, q, wait_registered


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
