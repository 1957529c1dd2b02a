"""admin-ui's single page (admin-ui/UI.md) in a real headless Chromium driven by Selenium.

Against a lookup + two brokers (--shards 2) cluster and an admin-ui reading the lookup: the
topics page lists published topics; a topic's page shows its channels and nodes; the pause /
unpause buttons pause the topic on the brokers and flip `#topic-state`; a channel page lists a
connected consumer in `#clients` (also for an `#ephemeral` channel reached by its encoded link);
empty asks window.confirm first (nothing is sent when it answers false) and then drops the
depth to 0 on the brokers; delete of a channel / topic navigates back; the lookup page's create
form creates a topic + channel at the lookup and shows a failed action's message in `#error`;
the counter page shows the messages processed (nsqadmin's sum over channels) and a rate; the
nodes page lists both brokers with their broadcast address, lookup registrations and topics, and
a node's page lists its topics and channels; `#error` and `#warnings` show API errors and warnings.
With a broker that serves HTTPS only (fakebroker.FakeTlsBroker): the channel and node pages show
each client's TLS version and cipher suite, snappy / deflate and auth identity (linked to its
URL only when that is http(s)); a broker certificate admin-ui does not trust is named in
`#warnings` with the reason.

Every wait is on a DOM condition (`#app[data-loaded="true"][data-page=...]` and the like) or
the brokers' / lookup's own HTTP APIs, with a deadline. Chromium and chromedriver are Debian
packages (/usr/bin/chromium, /usr/bin/chromedriver; tests/run.sh installs them): when they are
missing the tests fail, they do not skip.
"""

import re

import pytest

from adminlib import closed_port, q, wait_registered, wait_until
from browserlib import Page
from fakebroker import CHANNEL, TOPIC, FakeTlsBroker

def wait_topic_in_api(admin, topic):
    wait_until(lambda: topic in admin.get("/api/topics")["topics"],
               "%s in the admin-ui's /api/topics" % topic)



# ---- topics and topic pages -----------------------------------------------------------------

def test_topics_page_lists_published_topics(cluster, page):
    cluster.b1.publish("br_a", 1)
    cluster.b2.publish("br_b", 2)
    cluster.on_both("br_c")
    for t in ("br_a", "br_b"):
        wait_topic_in_api(cluster.admin, t)
    page.open("/topics", "topics")
    assert page.text("h1") == "Topics"
    for href in ("/topics", "/nodes", "/counter", "/lookup"):
        assert page.all('nav a[href="%s"]' % href), "nav link %s missing" % href
    for t in ("br_a", "br_b", "br_c"):
        rows = page.all('#topics tr[data-topic="%s"]' % t)
        assert len(rows) == 1, "row for %s: %d\n%s" % (t, len(rows), page.app_html())
        link = rows[0].find_element(page.By.CSS_SELECTOR, 'a[href="/topics/%s"]' % t)
        assert link.text.strip() == t


def test_clicking_a_topic_shows_its_channels_and_nodes(cluster, page):
    cluster.on_both("br_t", channels=["c1", "c2"], count=(2, 3))
    wait_topic_in_api(cluster.admin, "br_t")
    page.open("/topics", "topics")
    page.one('#topics tr[data-topic="br_t"] a[href="/topics/br_t"]').click()
    page.wait_loaded("topic")
    assert page.path() == "/topics/br_t"
    assert "br_t" in page.text("h1")
    assert page.text("#topic-state") == "active"
    for c in ("c1", "c2"):
        row = page.one('#channels tr[data-channel="%s"]' % c)
        assert row.find_elements(page.By.CSS_SELECTOR, 'a[href="/topics/br_t/%s"]' % c), (
            "channel row %s has no link to its page: %s" % (c, row.get_attribute("outerHTML")))
    for b in cluster.brokers:
        row = page.one('#topic-nodes tr[data-node="%s"]' % b.node)
        assert row.find_elements(page.By.CSS_SELECTOR, 'button[data-action="tombstone"]'), (
            "node row %s has no tombstone button" % b.node)
    totals = page.text("#topic-totals")
    assert "5" in totals, "message count 5 not in #topic-totals: %r" % totals


def test_pause_and_unpause_buttons(cluster, page):
    cluster.on_both("br_p")
    wait_topic_in_api(cluster.admin, "br_p")
    page.open("/topics/br_p", "topic")
    assert page.text("#topic-state") == "active"
    page.visible('#topic-actions button[data-action="pause"]').click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and
              page.text("#topic-state") == "paused", "#topic-state to read paused")
    for b in cluster.brokers:
        assert b.topic_stats("br_p")["paused"] is True, "not paused on broker %s" % b.node
    page.visible('#topic-actions button[data-action="unpause"]').click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and
              page.text("#topic-state") == "active", "#topic-state to read active")
    for b in cluster.brokers:
        assert b.topic_stats("br_p")["paused"] is False, "still paused on broker %s" % b.node


def test_delete_topic_navigates_to_topics(cluster, page):
    cluster.on_both("br_dt", channels=["c"])
    wait_topic_in_api(cluster.admin, "br_dt")
    page.open("/topics/br_dt", "topic")
    page.answer_confirm(True)
    page.visible('#topic-actions button[data-action="delete"]').click()
    page.wait_navigated("/topics", "topics")
    assert len(page.confirms()) == 1
    for b in cluster.brokers:
        assert b.topic_stats("br_dt") is None, "br_dt still on broker %s" % b.node
    assert not page.all('#topics tr[data-topic="br_dt"]'), page.app_html()


# ---- channel pages --------------------------------------------------------------------------

def test_channel_page_lists_a_connected_consumer(cluster, page):
    cluster.on_both("br_ch", channels=["live"])
    consumer = cluster.consumer(cluster.b1, "br_ch", "live", client_id="browser-consumer",
                                hostname="browser-host")
    wait_until(lambda: (cluster.b1.channel_stats("br_ch", "live") or {}).get("client_count")
               == 1, "the consumer in broker 1's /stats")
    page.open("/topics/br_ch/live", "channel")
    assert "br_ch / live" in page.text("h1")
    assert page.text("#channel-state") == "active"
    row = page.one('#clients tr[data-client-id="browser-consumer"]')
    text = row.text
    assert consumer.local_address in text and "browser-host" in text, text
    assert cluster.b1.node in text, text
    for b in cluster.brokers:
        assert page.all('#channel-nodes tr[data-node="%s"]' % b.node), (b.node, page.app_html())


def test_ephemeral_channel_link_is_encoded(cluster, page):
    cluster.on_both("br_eph")
    cluster.consumer(cluster.b2, "br_eph", "e#ephemeral", client_id="eph-browser")
    wait_until(lambda: cluster.b2.channel_stats("br_eph", "e#ephemeral"),
               "the ephemeral channel on broker 2")
    page.open("/topics/br_eph", "topic")
    page.one('#channels tr[data-channel="e#ephemeral"] a[href="/topics/br_eph/e%23ephemeral"]'
             ).click()
    page.wait_loaded("channel")
    assert "br_eph / e#ephemeral" in page.text("h1")
    assert page.all('#clients tr[data-client-id="eph-browser"]'), page.app_html()


def test_empty_channel_asks_first_then_empties(cluster, page):
    cluster.on_both("br_em", channels=["c"], count=(3, 2))
    for b in cluster.brokers:
        assert b.channel_stats("br_em", "c")["depth"] > 0, ("precondition", b.node)
    page.open("/topics/br_em/c", "channel")
    # confirm answers no: nothing is sent
    page.answer_confirm(False)
    page.spy_fetch()
    page.visible('#channel-actions button[data-action="empty"]').click()
    page.wait(lambda: len(page.confirms()) == 1, "window.confirm to be asked")
    sent = [f for f in page.fetches() if f[0] != "GET"]
    assert sent == [], "confirm answered false, yet the page sent %r" % sent
    for b in cluster.brokers:
        assert b.channel_stats("br_em", "c")["depth"] > 0, b.node
    # confirm answers yes: emptied on both brokers
    page.answer_confirm(True)
    page.visible('#channel-actions button[data-action="empty"]').click()
    for b in cluster.brokers:
        wait_until(lambda: b.channel_stats("br_em", "c")["depth"] == 0,
                   "channel br_em/c depth 0 on broker %s" % b.node)
    assert page.confirms(), "empty did not ask window.confirm"
    # the spy saw the action this time (so it would have seen one above)
    sent = [f for f in page.fetches() if f[0] != "GET"]
    assert [(m, u.split("://")[-1].split("/", 1)[-1]) for m, u in sent] == [
        ("POST", "api/topics/br_em/c")], sent
    page.wait_loaded("channel")


def test_delete_channel_navigates_back_to_its_topic(cluster, page):
    cluster.on_both("br_dc", channels=["gone", "kept"])
    page.open("/topics/br_dc/gone", "channel")
    page.answer_confirm(True)
    page.visible('#channel-actions button[data-action="delete"]').click()
    page.wait_navigated("/topics/br_dc", "topic")
    for b in cluster.brokers:
        assert b.channel_stats("br_dc", "gone") is None, "channel still on broker %s" % b.node
    assert not page.all('#channels tr[data-channel="gone"]'), page.app_html()
    assert page.all('#channels tr[data-channel="kept"]'), page.app_html()


# ---- lookup, counter, nodes -----------------------------------------------------------------

def test_lookup_page_create_form(cluster, page):
    page.open("/lookup", "lookup")
    assert page.all('#lookups tr[data-lookup="%s"]' % cluster.lookup.http_address), (
        page.app_html())
    page.one("#create-topic").send_keys("br_new")
    page.one("#create-channel").send_keys("br_newc")
    page.one("#create-submit").click()
    wait_until(lambda: "br_newc" in cluster.lookup.channels("br_new"),
               "br_new/br_newc at the lookup")
    page.wait(lambda: page.all(page.loaded("lookup")) and
              "br_new" in page.text('#lookups tr[data-lookup="%s"]'
                                    % cluster.lookup.http_address),
              "the lookup row to list br_new after the re-render")
    # a topic alone: the channel is left out
    page.one("#create-topic").clear()
    page.one("#create-channel").clear()
    page.one("#create-topic").send_keys("br_new2")
    page.one("#create-submit").click()
    wait_until(lambda: "br_new2" in cluster.lookup.topics(), "br_new2 at the lookup")
    assert cluster.lookup.channels("br_new2") == []
    page.wait(lambda: page.all(page.loaded("lookup")) and
              "br_new2" in page.text('#lookups tr[data-lookup="%s"]'
                                     % cluster.lookup.http_address),
              "the lookup row to list br_new2 after the re-render")
    # a failed action shows the API's message
    page.one("#create-topic").clear()
    page.one("#create-topic").send_keys("bad topic!")
    page.one("#create-submit").click()
    page.wait(lambda: "INVALID_TOPIC" in (page.error_text() or ""),
              "#error to show INVALID_TOPIC")


def test_counter_page_shows_messages_processed(fresh_cluster, driver):
    """nsqadmin's counter: "Messages Processed", every channel's message count on every node
    summed (its counter.js over `/api/counter`'s `stats`): a message counts once per channel
    it reached, and a topic without channels counts nothing."""
    c = fresh_cluster
    page = Page(driver, c.admin)
    c.b1.create_channel("cnt_x", "a")
    c.b1.create_channel("cnt_x", "b")
    c.b2.create_channel("cnt_y", "a")
    c.b1.publish("cnt_x", 4)
    c.b2.publish("cnt_y", 2)
    c.b2.publish("cnt_none", 3)
    page.open("/counter", "counter")
    page.wait(lambda: page.text("#counter") == "10", "#counter to read 4 x 2 + 2 = 10")
    api = c.admin.get("/api/counter")
    assert sum(s["message_count"] for s in api["stats"].values()) == 10, api
    assert "9 published" in page.text("#published"), page.text("#published")
    row = page.one('#counter-topics tr[data-topic="cnt_x"]')
    assert row.text.split()[1:] == ["8", "4"], row.text
    c.b1.publish("cnt_x", 5)
    page.wait(lambda: page.text("#counter") == "20", "#counter to read 20 (refreshed)")
    page.wait(lambda: re.fullmatch(r"\d+(\.\d+)? msg/s", page.text("#rate")),
              "#rate to read '<number> msg/s'")


def test_nodes_page_and_node_page(cluster, page):
    cluster.b1.create_channel("br_n1", "nc")
    cluster.b1.publish("br_n1", 1)
    cluster.b2.publish("br_n2", 1)
    wait_registered(cluster.lookup, [cluster.b1], "br_n1", "nc")
    wait_registered(cluster.lookup, [cluster.b2], "br_n2")
    page.open("/nodes", "nodes")
    # As nsqadmin's nodes page (nodes.hbs): broadcast address, lookup registrations and the
    # node's topics, each a link, from /api/nodes (nsqadmin's `Producer`).
    api = {n["node"]: n for n in cluster.admin.get("/api/nodes")["nodes"]}
    for b in cluster.brokers:
        row = page.one('#nodes tr[data-node="%s"]' % b.node)
        assert row.find_elements(page.By.CSS_SELECTOR, 'a[href="/nodes/%s"]' % q(b.node)), (
            row.get_attribute("outerHTML"))
        assert str(b.tcp_port) in row.text and str(b.http_port) in row.text, row.text
        n = api[b.node]
        assert row.find_element(page.By.CSS_SELECTOR, "td.broadcast").text == n["broadcast_address"]
        conns = row.find_element(page.By.CSS_SELECTOR, "td.lookup-conns")
        assert conns.text == str(len(n["remote_addresses"])) == "1", conns.text
        assert "partial" not in conns.get_attribute("class")
        for t in n["topics"]:
            assert row.find_elements(page.By.CSS_SELECTOR, 'td.node-topics a[href="/topics/%s"]'
                                     % q(t["topic"])), (t, row.get_attribute("outerHTML"))
    row1 = page.one('#nodes tr[data-node="%s"]' % cluster.b1.node)
    assert row1.find_elements(page.By.CSS_SELECTOR, 'td.node-topics a[href="/topics/br_n1"]')
    assert not row1.find_elements(page.By.CSS_SELECTOR, 'td.node-topics a[href="/topics/br_n2"]')
    page.one('#nodes tr[data-node="%s"] a[href="/nodes/%s"]'
             % (cluster.b1.node, q(cluster.b1.node))).click()
    page.wait_loaded("node")
    assert cluster.b1.node in page.text("h1")
    assert cluster.b1.stats()["version"] in page.text("#node-info")
    assert page.all('#node-topics tr[data-topic="br_n1"]'), page.app_html()
    assert page.all('#node-topics tr[data-channel="nc"]'), page.app_html()
    assert not page.all('#node-topics tr[data-topic="br_n2"]'), "broker 2's topic on node 1"


# ---- errors and warnings --------------------------------------------------------------------

def test_error_is_shown_for_an_unknown_topic(cluster, page):
    page.d.get("about:blank")
    page.d.get(page.base + "/topics/br_never_there")
    page.wait(lambda: (page.error_text() or "").strip(), "#error to show the API's error")
    assert page.one("#error").is_displayed()


def test_warnings_are_listed(cluster, driver, start_admin):
    cluster.b1.publish("br_w", 1)
    down = "127.0.0.1:%d" % closed_port()
    admin = start_admin(nsqds=[cluster.b1.node, down])
    page = Page(driver, admin)
    page.open("/topics", "topics")
    assert page.all('#topics tr[data-topic="br_w"]'), page.app_html()
    items = [li.text for li in page.all("#warnings li")]
    assert any(down in t for t in items), "#warnings %r does not name %s" % (items, down)
    # and none on a healthy admin-ui
    healthy = Page(driver, cluster.admin)
    healthy.open("/topics", "topics")
    assert healthy.all("#warnings li") == []


def test_no_error_on_a_healthy_page(cluster, page):
    page.open("/nodes", "nodes")
    _assert_empty(page.error_text())
    assert page.all("#warnings li") == []


def _assert_empty(text):
    assert not (text or "").strip(), "#error shows %r" % text


# ---- brokers serving HTTPS only: clients' TLS, compression and auth state ----------------------

def _attr(row, page, name):
    return row.find_elements(page.By.CSS_SELECTOR, '[data-attr="%s"]' % name)


def _check_client_attributes(page, table):
    row = page.one('#%s tr[data-client-id="tls-deflate-authed"]' % table)
    [tls] = _attr(row, page, "tls")
    assert "TLS1.3" in tls.text and "TLS_AES_128_GCM_SHA256" in tls.text, tls.text
    assert "TLS1.3 TLS_AES_128_GCM_SHA256" in tls.get_attribute("title"), tls.get_attribute("title")
    assert _attr(row, page, "deflate") and not _attr(row, page, "snappy"), row.text
    [link] = row.find_elements(page.By.CSS_SELECTOR,
                               '[data-attr="authed"] a[data-attr="auth-identity"]')
    assert link.get_attribute("href") == "https://auth.example/users/alice", (
        link.get_attribute("outerHTML"))
    assert link.text.strip() == "alice"
    plain = page.one('#%s tr[data-client-id="snappy-plain"]' % table)
    assert _attr(plain, page, "snappy"), plain.text
    assert not (_attr(plain, page, "tls") or _attr(plain, page, "authed")
                or _attr(plain, page, "deflate")), plain.get_attribute("outerHTML")
    odd = page.one('#%s tr[data-client-id="authed-bad-url"]' % table)
    assert "TLS1.2" in _attr(odd, page, "tls")[0].text
    [identity] = odd.find_elements(page.By.CSS_SELECTOR, '[data-attr="auth-identity"]')
    assert identity.text.strip() == "mallory"
    # an auth server's javascript: URL never becomes a link
    assert identity.tag_name != "a" and not odd.find_elements(page.By.CSS_SELECTOR,
                                                              "td.attributes a"), (
        odd.get_attribute("outerHTML"))


def test_client_tls_compression_and_auth_on_channel_and_node_pages(driver, certs, fakes,
                                                                   start_admin):
    b = fakes(FakeTlsBroker, certs)
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])
    page = Page(driver, admin)
    page.open("/topics/%s/%s" % (TOPIC, CHANNEL), "channel")
    _check_client_attributes(page, "clients")
    _assert_empty(page.error_text())
    assert page.all("#warnings li") == []
    page.open("/nodes/" + q(b.node), "node")
    _check_client_attributes(page, "node-clients")
    row = page.one('#node-clients tr[data-client-id="snappy-plain"]')
    assert row.get_attribute("data-channel") == CHANNEL, row.get_attribute("outerHTML")
    assert row.find_elements(page.By.CSS_SELECTOR,
                             'a[href="/topics/%s/%s"]' % (TOPIC, CHANNEL)), row.text


def test_untrusted_broker_certificate_is_shown_in_warnings(driver, certs, fakes, start_admin):
    b = fakes(FakeTlsBroker, certs, cert="untrusted")
    admin = start_admin(nsqds=[b.node], extra=["--http-client-tls-root-ca-file=" + certs.ca])
    page = Page(driver, admin)
    page.open("/topics", "topics")
    items = [li.text for li in page.all("#warnings li")]
    assert any("https://127.0.0.1:%d" % b.https_port in t and "invalid peer certificate" in t
               for t in items), items
    # the node itself cannot be read: nsqadmin's 502 UPSTREAM_ERROR, shown as the error
    page.open("/nodes/" + q(b.node), "node")
    err = page.error_text() or ""
    assert "UPSTREAM_ERROR" in err and "invalid peer certificate" in err, err


# ---- path-style URLs, base path, Graphite (nsqadmin's) ---------------------------------------

def test_path_style_urls_under_a_base_path(cluster, driver, start_admin):
    """nsqadmin's bookmarks: /<base>/topics/<t> opened directly shows the topic page; links,
    the nav and the browser's back button stay under the base path."""
    cluster.on_both("bp_br", channels=["c"])
    admin = start_admin(lookups=[cluster.lookup.http_address], extra=["--base-path=/ops/nsq"])
    wait_topic_in_api(_Prefixed(admin, "/ops/nsq"), "bp_br")
    page = Page(driver, admin)
    page.base = admin.base + "/ops/nsq"
    page.open("/topics/bp_br", "topic")
    assert page.path() == "/ops/nsq/topics/bp_br"
    assert "bp_br" in page.text("h1")
    for section in ("topics", "nodes", "counter", "lookup"):
        assert page.all('nav a[href="/ops/nsq/%s"]' % section), section
    page.spy_fetch()
    page.one('#channels tr[data-channel="c"] a[href="/ops/nsq/topics/bp_br/c"]').click()
    page.wait_navigated("/ops/nsq/topics/bp_br/c", "channel")
    assert all(url.startswith("/ops/nsq/api/") for _, url in page.fetches()), page.fetches()
    page.d.back()
    page.wait_navigated("/ops/nsq/topics/bp_br", "topic")
    # a node page by its URL; the base path itself shows the topics page
    page.open("/nodes/" + q(cluster.b1.node), "node")
    assert cluster.b1.node in page.text("h1")
    page.open("/", "topics")
    assert page.path() == "/ops/nsq/topics"


def test_old_hash_links_are_redirected_to_paths(cluster, page):
    cluster.on_both("hs_br", channels=["c"])
    wait_topic_in_api(cluster.admin, "hs_br")
    page.open("/#/topics/hs_br/c", "channel")
    page.wait(lambda: page.path() == "/topics/hs_br/c", "the path form of #/topics/hs_br/c")
    assert "hs_br" in page.text("h1")


def test_graphite_rate_and_chart_on_the_topic_page(cluster, driver, start_admin):
    from test_admin_nsqadmin import FakeGraphite
    g = FakeGraphite(rate=300.0)
    try:
        cluster.on_both("gr_br")
        admin = start_admin(lookups=[cluster.lookup.http_address], extra=[
            "--graphite-url=" + g.url, "--proxy-graphite", "--statsd-interval=30s",
            "--statsd-prefix=prod.nsq.%s", "--statsd-counter-format=stats_counts.%s"])
        wait_topic_in_api(admin, "gr_br")
        page = Page(driver, admin)
        page.open("/topics/gr_br", "topic")
        target = "sumSeries(stats_counts.prod.nsq.*.topic.gr_br.message_count)"
        assert page.one("#topic-rate").get_attribute("data-target") == target
        page.wait(lambda: page.text("#topic-rate") == "10.00 msg/s", "#topic-rate from Graphite")
        asked = [qs["target"][0] for path, qs in g.requests if qs.get("format") == ["json"]]
        assert asked == [target], g.requests
        # the chart comes through admin-ui's /render proxy
        src = page.one("#topic-graph").get_attribute("src")
        assert src.startswith(admin.base + "/render?"), src
        page.wait(lambda: any(p == "/render" and "format" not in qs for p, qs in g.requests),
                  "the chart's request at Graphite")
    finally:
        g.close()


class _Prefixed:
    """An admin-ui's API under a base path, for wait_topic_in_api."""

    def __init__(self, admin, prefix):
        self.admin, self.prefix = admin, prefix

    def get(self, path):
        return self.admin.get(self.prefix + path)
