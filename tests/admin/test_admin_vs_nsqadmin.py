"""admin-ui side by side with the real nsqadmin 1.3.0: its nodes, node, counter and lookup
answers and pages, against answers recorded from nsqadmin (tests/admin/fixtures/nsqadmin-1.3.0,
see its README.md: how, with which commands; every address, port and hostname in it is the
recording's). Neither Go nor nsqadmin is needed here: only the recorded files.

The module's `cluster` (a lookup, two brokers, an admin-ui reading the lookup: nsqadmin's
`--lookupd-http-address` set-up) gets the recording's state, request for request: `orders` on
both brokers with channels `billing` and `shipping` (3 + 2 messages), `events` on broker 1 with
channel `audit` (4), `logs` on both without channels (5 + 1, counted nowhere), the inactive
topics `legacy` (channel `old`) and `ghost` created at the lookup only, a consumer on
orders/billing at broker 1, `temp` on both then tombstoned on broker 2 through admin-ui's
`DELETE /api/nodes/<node>` (as the recording did through nsqadmin's: tombstone at the lookups,
then the topic deleted on that node), and `logs` tombstoned on broker 2 at the lookup
(`/topic/tombstone`, the topic staying registered). Recorded broker 1 / broker 2 / lookup
addresses are mapped onto the cluster's.

Compared, for `/api/nodes`, `/api/nodes/<node>`, `/api/counter`, `/api/topics?inactive=true`
(and `/api/topics`):
- the shape: every key of nsqadmin's answer is in admin-ui's with the same JSON type,
  recursively (lists element by element, up to the shorter); admin-ui may add keys (listed in
  a comment below); a `null` of nsqadmin's may be an empty list in admin-ui's only where
  NULL_AS_EMPTY says so (the differences found, see there);
- the meaning: the counter's `stats` keyed `topic:channel:node` with each channel's
  message_count on each node, equal to nsqadmin's, and their sum (nsqadmin's "Messages
  Processed"); each node's `topics` `[{topic, tombstoned}]` equal to nsqadmin's (`logs`
  tombstoned on node 2, `temp` gone from it), `remote_addresses` one `lookup/remote address` per
  lookup; each node's topics, channels, message counts, depths, clients and totals; the
  inactive topics map topic -> [channels].
Pages (headless Chromium, browserlib): every column of nsqadmin's nodes page (hostname,
broadcast address, TCP port, HTTP port, version, lookupd conns, topics with the tombstoned one
marked and titled as nsqadmin titles it) shows the same for the same node on admin-ui's
(UI.md's `#nodes td.broadcast`, `td.lookup-conns`, `td.node-topics a.topic-label`, ...); the
lookup page lists the lookup and every inactive topic and channel with a delete action, as
nsqadmin's; the counter page shows the figure nsqadmin's showed for the same state, the sum of
the counter's stats in both.
"""

import json
import os
import re
import urllib.parse

import pytest

from adminlib import eventually, q, request, wait_registered, wait_until
from browserlib import Page

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "nsqadmin-1.3.0")


def recorded(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


RECORDING = recorded("recording.json")
PAGES = recorded("pages.json")
NSQADMIN = {name: recorded(name + ".json") for name in (
    "api-nodes", "api-node-1", "api-node-2", "api-counter", "api-topics", "api-topics-inactive")}
# The recording's nsqd nodes (broadcast address:http port), broker 1 and broker 2 here.
REC_NODES = RECORDING["nodes"]
REC_LOOKUP = RECORDING["lookupd"]

# Keys admin-ui's answers have beyond nsqadmin 1.3.0's (allowed, not checked; API.md documents
# each; a failing shape check prints the ones it saw):
# - /api/nodes: `lookups` (the lookups asked), `warnings`, `nodes[].node`;
# - /api/nodes/<node>: `version`, `health`, `start_time`, `memory`, `warnings`,
#   `topics[].channel_count`, `topics[].delivery_msg_count` (nsqd's field after 1.3.0: nsqadmin
#   1.3.0's TopicStats has no delivery_msg_count, although API.md's example shows it as
#   nsqadmin's);
# - /api/counter: `message_count` (messages published), `topics` (per topic), `warnings`;
# - /api/topics, /api/topics?inactive=true: `warnings`.
# Where nsqadmin answers JSON null and admin-ui an empty list (the differences found):
# - e2e_processing_latency.percentiles of a node's topics and channels without e2e latency
#   (nsqd's null passed on by nsqadmin; admin-ui: []);
# - an inactive topic without channels in /api/topics?inactive=true (nsqadmin: `"ghost": null`,
#   admin-ui: `"ghost": []`).
NULL_AS_EMPTY = {
    "api-node": re.compile(r"e2e_processing_latency\.percentiles$"),
    "api-topics-inactive": re.compile(r"^topics\.[^.\[]+$"),
}


# ---- the recording's state on the module's cluster --------------------------------------------

class State:
    """The recording's state (fixtures README) made on `cluster`."""

    def __init__(self, cluster):
        self.cluster = cluster
        b1, b2, lookup = cluster.b1, cluster.b2, cluster.lookup
        self.brokers = {REC_NODES[0]: b1, REC_NODES[1]: b2}
        # recorded address -> ours (nodes, lookup)
        self.addresses = {REC_NODES[0]: b1.node, REC_NODES[1]: b2.node,
                          REC_LOOKUP: lookup.http_address}
        for b, n in ((b1, 3), (b2, 2)):
            b.create_channel("orders", "billing")
            b.create_channel("orders", "shipping")
            b.publish("orders", n, "order")
        b1.create_channel("events", "audit")
        b1.publish("events", 4, "event")
        b1.publish("logs", 5, "log")
        b2.publish("logs", 1, "log")
        for path in ("/topic/create?topic=legacy", "/channel/create?topic=legacy&channel=old",
                     "/topic/create?topic=ghost"):
            self.lookup_post(path)
        for b, topic, channels in ((b1, "orders", ("billing", "shipping")),
                                   (b2, "orders", ("billing", "shipping")),
                                   (b1, "events", ("audit",)), (b1, "logs", ()),
                                   (b2, "logs", ())):
            wait_registered(lookup, [b], topic)
            for c in channels:
                wait_registered(lookup, [b], topic, c)
        consumer = RECORDING["consumer"]
        cluster.consumer(b1, consumer["topic"], consumer["channel"],
                         client_id=consumer["client_id"], hostname=consumer["hostname"],
                         user_agent=consumer["user_agent"])
        b1.publish("temp", 1, "temp")
        b2.publish("temp", 1, "temp")
        wait_registered(lookup, [b1, b2], "temp")
        self.tombstone_answer = cluster.admin.call(
            "DELETE", "/api/nodes/" + q(b2.node), {"topic": "temp"})
        self.tombstone_logs()
        wait_until(lambda: "temp" not in self.lookup_node_topics(b2),
                   "temp gone from broker 2 at the lookup")

    def lookup_post(self, path):
        r = request("POST", "http://%s%s" % (self.cluster.lookup.http_address, path))
        assert r.status == 200, "lookup POST %s answered %d %r" % (path, r.status, r.body)

    def lookup_node_topics(self, broker):
        """{topic: tombstoned} of `broker` in the lookup's /nodes."""
        for p in self.cluster.lookup.nodes():
            if p["http_port"] == broker.http_port:
                return dict(zip(p["topics"], p["tombstones"]))
        return {}

    def tombstone_logs(self):
        """(Again) tombstones `logs` on broker 2 at the lookup: a tombstone lasts 45 s there."""
        b2 = self.brokers[REC_NODES[1]]
        self.lookup_post("/topic/tombstone?topic=logs&node=" + q(b2.node))
        wait_until(lambda: self.lookup_node_topics(b2).get("logs") is True,
                   "logs tombstoned on broker 2 at the lookup")

    def ours(self, name):
        """Recorded address `name` -> the cluster's."""
        return self.addresses[name]

    def translate(self, value):
        """A recorded answer with the recording's node and lookup addresses replaced by ours
        (in keys and strings)."""
        if isinstance(value, dict):
            return {self.translate(k): self.translate(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.translate(v) for v in value]
        if isinstance(value, str):
            # one pass: an address of ours may happen to be another recorded one
            pattern = "|".join(re.escape(a) for a in sorted(self.addresses, key=len,
                                                            reverse=True))
            value = re.sub(pattern, lambda m: self.addresses[m.group(0)], value)
        return value

    def broker_of_port(self, http_port):
        for rec, b in self.brokers.items():
            if b.http_port == http_port:
                return rec
        raise AssertionError("no broker of the cluster has http port %s" % http_port)


@pytest.fixture(scope="module")
def state(cluster):
    return State(cluster)


def admin_get(state, path, check, admin=None):
    """admin-ui's answer to GET `path` once `check(answer)` holds (the lookup and brokers'
    stats catch up asynchronously); `check` asserts."""
    admin = admin or state.cluster.admin

    def attempt():
        answer = admin.get(path)
        check(answer)
        return answer
    return eventually(attempt)


# ---- shapes -------------------------------------------------------------------------------------

def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


def shape_problems(theirs, ours, path="", null_as_empty=None):
    """Where `ours` lacks a key of `theirs` or has another JSON type, recursively (lists
    element by element up to the shorter one). Returns [(path, what)]."""
    t, o = json_type(theirs), json_type(ours)
    if t != o:
        if (t == "null" and ours in ([], {}) and null_as_empty is not None
                and null_as_empty.search(path)):
            return []
        return [(path, "nsqadmin has %s %s, admin-ui %s %s"
                 % (t, json.dumps(theirs)[:80], o, json.dumps(ours)[:80]))]
    problems = []
    if t == "object":
        for k, v in theirs.items():
            sub = "%s.%s" % (path, k) if path else k
            if k not in ours:
                problems.append((sub, "missing in admin-ui's answer"))
            else:
                problems += shape_problems(v, ours[k], sub, null_as_empty)
    elif t == "list":
        for i, (tv, ov) in enumerate(zip(theirs, ours)):
            problems += shape_problems(tv, ov, "%s[%d]" % (path, i), null_as_empty)
    return problems


def extra_keys(theirs, ours, path=""):
    """Keys admin-ui's answer has beyond nsqadmin's (list indexes written [])."""
    found = set()
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for k, v in ours.items():
            sub = "%s.%s" % (path, k) if path else k
            if k not in theirs:
                found.add(sub)
            else:
                found |= extra_keys(theirs[k], v, sub)
    elif isinstance(theirs, list) and isinstance(ours, list):
        for tv, ov in zip(theirs, ours):
            found |= extra_keys(tv, ov, path + "[]")
    return found


def assert_same_shape(name, theirs, ours, kind=None):
    kind = kind or name
    problems = shape_problems(theirs, ours, "", NULL_AS_EMPTY.get(kind))
    assert not problems, "%s: admin-ui's answer differs from nsqadmin 1.3.0's:\n%s\n(admin-ui's " \
        "extra keys, allowed: %s)" % (name, "\n".join("  %s: %s" % p for p in problems),
                                     sorted(extra_keys(theirs, ours)))


def align_nodes(state, nodes):
    """admin-ui's /api/nodes `nodes` in the recording's order (broker 1, broker 2)."""
    by_rec = {state.broker_of_port(n["http_port"]): n for n in nodes}
    return [by_rec[rec] for rec in REC_NODES]


def ours_settled_nodes(state):
    b2 = state.brokers[REC_NODES[1]]

    def check(answer):
        nodes = {n["http_port"]: n for n in answer["nodes"]}
        assert set(nodes) == {b.http_port for b in state.brokers.values()}, answer
        assert {"topic": "logs", "tombstoned": True} in nodes[b2.http_port]["topics"], answer
        assert "temp" not in [t["topic"] for t in nodes[b2.http_port]["topics"]], answer
    state.tombstone_logs()
    return admin_get(state, "/api/nodes", check)


def counter_settled(expected):
    def check(answer):
        assert sum(s["message_count"] for s in answer["stats"].values()) == expected, answer
    return check


def recorded_processed():
    return sum(s["message_count"] for s in NSQADMIN["api-counter"]["stats"].values())


# ---- the recording itself ---------------------------------------------------------------------

def test_recording_is_consistent():
    """The recorded pages show what the recorded answers say (the fixtures are whole)."""
    assert RECORDING["nsqadmin"].startswith("nsqadmin v1.3.0")
    assert all(a["status"] == 200 for a in RECORDING["answers"].values())
    assert PAGES["counter"]["number"] == str(recorded_processed())
    assert PAGES["counter"]["label"] == "Messages Processed"
    rows = {r["cells"][3]: r for r in PAGES["nodes"]["rows"]}
    for n in NSQADMIN["api-nodes"]["nodes"]:
        assert nsqadmin_row_model(rows[str(n["http_port"])]) == api_row_model(n), n
    inactive = NSQADMIN["api-topics-inactive"]["topics"]
    assert {t["delete_topic"] for t in PAGES["lookup"]["inactive_topics"]} == set(inactive)


# ---- the JSON answers ---------------------------------------------------------------------------

def test_tombstone_action_answers_as_nsqadmin(state):
    assert state.tombstone_answer.status == RECORDING["nsqadmin_tombstone"]["status"]
    assert state.tombstone_answer.json() == json.loads(RECORDING["nsqadmin_tombstone"]["answer"])


def test_nodes_answer(state):
    theirs = NSQADMIN["api-nodes"]
    ours = ours_settled_nodes(state)
    ours_aligned = dict(ours, nodes=align_nodes(state, ours["nodes"]))
    assert_same_shape("GET /api/nodes", theirs, ours_aligned, "api-nodes")

    lookups = ours["lookups"]
    assert lookups == [state.cluster.lookup.http_address]
    for rec, t, o in zip(REC_NODES, theirs["nodes"], ours_aligned["nodes"]):
        b = state.brokers[rec]
        assert (o["tcp_port"], o["http_port"]) == (b.tcp_port, b.http_port)
        assert o["broadcast_address"] == t["broadcast_address"] == "127.0.0.1"
        assert o["out_of_date"] == t["out_of_date"]
        # topics: [{topic, tombstoned}], the same as nsqadmin's for the same node
        assert sorted(o["topics"], key=lambda x: x["topic"]) == \
            sorted(t["topics"], key=lambda x: x["topic"]), rec
        # one `lookup/remote address` per lookup, in both
        assert len(t["remote_addresses"]) == 1 == len(o["remote_addresses"]) == len(lookups)
        assert t["remote_addresses"] == ["%s/%s" % (REC_LOOKUP, t["remote_address"])]
        assert o["remote_addresses"] == ["%s/%s" % (lookups[0], o["remote_address"])]
    tombstoned = [(rec, x["topic"]) for rec, n in zip(REC_NODES, ours_aligned["nodes"])
                  for x in n["topics"] if x["tombstoned"]]
    assert tombstoned == [(REC_NODES[1], "logs")]


def node_model(answer):
    """A node's answer reduced to what must match: topics, channels, counts, clients."""
    return {
        "total_messages": answer["total_messages"],
        "total_clients": answer["total_clients"],
        "topics": {t["topic_name"]: {
            "message_count": t["message_count"], "depth": t["depth"], "paused": t["paused"],
            "channels": {c["channel_name"]: {
                "message_count": c["message_count"], "depth": c["depth"],
                "in_flight_count": c["in_flight_count"], "client_count": c["client_count"],
                "clients": sorted((k["client_id"], k["hostname"], k["user_agent"], k["version"],
                                   k["ready_count"], k["message_count"]) for k in c["clients"]),
            } for c in t["channels"]},
        } for t in answer["topics"]},
    }


@pytest.mark.parametrize("index", [0, 1], ids=["node1", "node2"])
def test_node_answer(state, index):
    rec = REC_NODES[index]
    theirs = NSQADMIN["api-node-%d" % (index + 1)]
    node = state.ours(rec)
    expected = node_model(theirs)

    def check(answer):
        got = node_model(answer)
        assert got == expected, "GET /api/nodes/%s: admin-ui's %s, nsqadmin's (node %s) %s" % (
            node, got, rec, expected)
    ours = admin_get(state, "/api/nodes/" + q(node), check)
    assert_same_shape("GET /api/nodes/<node %d>" % (index + 1), theirs, ours, "api-node")
    assert ours["node"] == state.translate(theirs["node"]) == node
    for t in ours["topics"]:
        assert t["node"] == node and all(c["node"] == node for c in t["channels"])


def test_counter_answer(state, start_admin):
    theirs = NSQADMIN["api-counter"]
    expected = recorded_processed()
    ours = admin_get(state, "/api/counter", counter_settled(expected))
    assert_same_shape("GET /api/counter", state.translate(theirs), ours, "api-counter")
    # `topic:channel:node` -> that channel's message count on that node, as nsqadmin's
    fields = ("node", "topic_name", "channel_name", "message_count")
    assert {k: {f: s[f] for f in fields} for k, s in ours["stats"].items()} == \
        state.translate(theirs["stats"])
    for key, s in ours["stats"].items():
        assert key == "%s:%s:%s" % (s["topic_name"], s["channel_name"], s["node"])
    # An admin-ui started with the recorded nsqadmin's own command line answers the same.
    flags = [a for a in RECORDING["commands"][-1].split()[1:]
             if not a.startswith("--http-address=")]
    raw = ["--http-address=127.0.0.1:0"] + [state.translate(a) for a in flags]
    assert raw[1] == "--lookupd-http-address=" + state.cluster.lookup.http_address
    twin = start_admin(raw=raw)
    again = admin_get(state, "/api/counter", counter_settled(expected), admin=twin)
    assert {k: s["message_count"] for k, s in again["stats"].items()} == \
        {k: s["message_count"] for k, s in ours["stats"].items()}


def test_topics_answers(state):
    theirs = NSQADMIN["api-topics"]

    def check(answer):
        assert answer["topics"] == theirs["topics"]
    ours = admin_get(state, "/api/topics", check)
    assert_same_shape("GET /api/topics", theirs, ours, "api-topics")

    theirs = NSQADMIN["api-topics-inactive"]
    # nsqadmin's `null` for a topic without channels is [] in admin-ui's (NULL_AS_EMPTY).
    expected = {t: channels or [] for t, channels in theirs["topics"].items()}

    def check_inactive(answer):
        assert {t: sorted(c or []) for t, c in answer["topics"].items()} == expected
    ours = admin_get(state, "/api/topics?inactive=true", check_inactive)
    assert_same_shape("GET /api/topics?inactive=true", theirs, ours, "api-topics-inactive")
    assert set(ours["topics"]) == {"legacy", "ghost"}


# ---- the pages ----------------------------------------------------------------------------------

# nsqadmin's nodes page columns (pages.json) -> admin-ui's: a CSS class UI.md names, else the
# column whose heading is the same (case aside).
NODE_COLUMNS = {
    "Hostname": None,
    "Broadcast Address": "td.broadcast",
    "TCP Port": None,
    "HTTP Port": None,
    "Version": None,
    "Lookupd Conns.": "td.lookup-conns",
    "Topics": "td.node-topics",
}
TOMBSTONED_TITLE = "this topic is currently tombstoned on this node"


def api_row_model(n):
    """What a node's row should show, from a /api/nodes node."""
    return {
        "Hostname": n["hostname"], "Broadcast Address": n["broadcast_address"],
        "TCP Port": str(n["tcp_port"]), "HTTP Port": str(n["http_port"]), "Version": n["version"],
        "Lookupd Conns.": str(len(n["remote_addresses"])),
        "Topics": (str(len(n["topics"])),
                   sorted((t["topic"], t["tombstoned"],
                           TOMBSTONED_TITLE if t["tombstoned"] else "") for t in n["topics"])),
    }


def nsqadmin_row_model(row):
    headings = PAGES["nodes"]["table_headings"]
    cells = dict(zip(headings, row["cells"]))
    model = {h: cells[h] for h in headings if h != "Topics"}
    assert model["Lookupd Conns."] == row["conn_count"]
    model["Topics"] = (row["topic_badge"], sorted(
        (a["text"], "label-warning" in a["class"].split(), a["title"] or "")
        for a in row["topic_labels"]))
    return model


def ours_row_model(page, tr, headings):
    By = page.By
    model = {}
    for theirs, css in NODE_COLUMNS.items():
        if css is None:
            assert theirs.lower() in headings, (
                "admin-ui's #nodes has no %r column (headings %s)" % (theirs, headings))
            cell = tr.find_elements(By.TAG_NAME, "td")[headings.index(theirs.lower())]
        else:
            cell = tr.find_element(By.CSS_SELECTOR, css)
        model[theirs] = cell.text.strip()
    topics = tr.find_element(By.CSS_SELECTOR, "td.node-topics")
    model["Topics"] = (topics.find_element(By.CSS_SELECTOR, ".badge").text.strip(), sorted(
        (a.text.strip(), "tombstoned" in (a.get_attribute("class") or "").split(),
         a.get_attribute("title") or "")
        for a in topics.find_elements(By.CSS_SELECTOR, "a.topic-label")))
    return model


def test_nodes_page(state, driver):
    ours_api = ours_settled_nodes(state)
    page = Page(driver, state.cluster.admin)
    page.open("/nodes", "nodes")
    headings = [th.text.strip().lower() for th in page.all("#nodes th")]
    assert set(PAGES["nodes"]["table_headings"]) == set(NODE_COLUMNS)
    assert re.fullmatch(r"NSQd Nodes \(2\)", PAGES["nodes"]["heading"])
    assert page.text("h1") == "Nodes (2)"

    theirs_rows = {str(r["cells"][3]): r for r in PAGES["nodes"]["rows"]}
    ours_nodes = {n["node"]: n for n in ours_api["nodes"]}
    for rec in REC_NODES:
        b = state.brokers[rec]
        rec_http_port = rec.rsplit(":", 1)[1]
        theirs = nsqadmin_row_model(theirs_rows[rec_http_port])
        rows = page.all('#nodes tr[data-node="%s"]' % b.node)
        assert len(rows) == 1, "row of %s: %d\n%s" % (b.node, len(rows), page.app_html())
        ours = ours_row_model(page, rows[0], headings)
        # each page shows its own cluster's node as its API describes it...
        api = api_row_model(ours_nodes[b.node])
        assert ours == api, "node %s: admin-ui's row shows %s, its /api/nodes says %s" % (
            b.node, ours, api)
        # ...and the same as nsqadmin's for the same node: ports mapped, hostname each machine's
        mapped = dict(theirs, **{"TCP Port": str(b.tcp_port), "HTTP Port": str(b.http_port),
                                 "Hostname": ours_nodes[b.node]["hostname"],
                                 "Version": ours_nodes[b.node]["version"]})
        assert ours == mapped, "node %s (recorded %s): nsqadmin's row showed %s, admin-ui's " \
            "shows %s" % (b.node, rec, theirs, ours)
        # the registrations behind the count: `lookup/remote address`, one per lookup
        row = theirs_rows[rec_http_port]
        assert row["conn_title"].startswith(REC_LOOKUP + "/")
        title = rows[0].find_element(page.By.CSS_SELECTOR, "td.lookup-conns").get_attribute("title")
        assert title.split("\n") == ["%s/%s" % (state.cluster.lookup.http_address,
                                                ours_nodes[b.node]["remote_address"])]
        # the node's page is linked from its row, as nsqadmin's
        assert urllib.parse.urlparse(row["node_link"]).path == "/nodes/" + rec
        assert rows[0].find_elements(page.By.CSS_SELECTOR, 'a[href="/nodes/%s"]' % q(b.node))


def test_lookup_page(state, driver):
    theirs = PAGES["lookup"]
    page = Page(driver, state.cluster.admin)

    def check(answer):
        assert set(answer["topics"]) == {"legacy", "ghost"}
    admin_get(state, "/api/topics?inactive=true", check)
    page.open("/lookup", "lookup")
    page.wait(lambda: page.all('#inactive[data-loaded="true"]'), "#inactive loaded")

    # the lookups asked
    assert theirs["table_headings"] == ["nsqlookupd Host"]
    assert [state.translate(h) for h in theirs["lookup_rows"]] == \
        [tr.get_attribute("data-lookup") for tr in page.all("#lookups tr[data-lookup]")]

    # every inactive topic and channel, each with a delete action, in both
    theirs_topics = {t["delete_topic"] for t in theirs["inactive_topics"]}
    theirs_channels = {tuple(c["delete_channel"]) for t in theirs["inactive_topics"]
                       for c in t["channels"]}
    assert theirs["delete_topic_buttons"] == len(theirs_topics) == 2
    assert theirs["delete_channel_buttons"] == len(theirs_channels) == 1
    ours_topics, ours_channels = set(), set()
    for tr in page.all("#inactive-topics tr[data-topic]"):
        topic = tr.get_attribute("data-topic")
        if tr.find_elements(page.By.CSS_SELECTOR, 'button[data-action="delete-topic"]'):
            ours_topics.add(topic)
        assert tr.find_elements(page.By.CSS_SELECTOR, 'a[href="/topics/%s"]' % q(topic)), topic
        for li in tr.find_elements(page.By.CSS_SELECTOR, "li[data-channel]"):
            if li.find_elements(page.By.CSS_SELECTOR, 'button[data-action="delete-channel"]'):
                ours_channels.add((topic, li.get_attribute("data-channel")))
    assert ours_topics == theirs_topics, page.app_html()
    assert ours_channels == theirs_channels, page.app_html()
    # nsqadmin shows its create form (no admin users configured); so does admin-ui
    assert theirs["create_form"] and page.all("#create-form")


def test_counter_page(state, driver):
    expected = recorded_processed()
    assert PAGES["counter"]["number"] == str(expected)
    ours = admin_get(state, "/api/counter", counter_settled(expected))
    ours_sum = sum(s["message_count"] for s in ours["stats"].values())
    page = Page(driver, state.cluster.admin)
    page.open("/counter", "counter")
    page.wait(lambda: page.text("#counter") == str(ours_sum),
              "#counter to show %d (the sum of /api/counter's stats)" % ours_sum)
    # the same figure nsqadmin's counter showed for the same state
    assert page.text("#counter") == PAGES["counter"]["number"]
    assert PAGES["counter"]["label"].lower() in page.one("#app").text.lower()
