"""admin-ui's page for the brokers' features beyond nsqd (admin-ui/UI.md) in a real headless
Chromium driven by Selenium (browserlib), against a lookup + two brokers cluster.

Covered: a dead-letter topic's page lists its origin records (`#dead-letter-records`, the
preview as text) and its "send back" button asks window.confirm first (nothing is sent when it
answers false), then redrives on both brokers and shows the counts in `#notice`; a topic that
is no dead-letter topic shows no such section. A channel page's form sets max attempts and
the dead-letter topic on both brokers (a value they refuse shows in `#error`), and shows the
dead-lettered count, linked to the dead-letter topic's page. The rewind form's
window.confirm says how many messages will be delivered again (from the dry run; nothing moves
when it answers false), then rewinds both brokers. The topic page's retention form sets it on
both brokers and shows what is in force (a refused value in `#error`; `default` resets).

Every wait is on a DOM condition or the brokers' own HTTP APIs, with a deadline.
"""

from adminlib import (consume_and_finish, history_on_both, make_dead_letters, q, request,
                      wait_registered)


def records_on(broker, topic):
    r = request("GET", broker.url("/dead_letters?topic=%s" % q(topic)))
    return r.json()["dead_letters"] if r.status == 200 else []


def test_dead_letter_topic_page_lists_records_and_sends_them_back(cluster, page):
    topic, dead = "bdl_orders", "bdl_orders.dead"
    made = make_dead_letters(cluster.b1, topic, "work", dead, 2, body="<b>poison</b>")
    made += make_dead_letters(cluster.b2, topic, "work", dead, 1, body="<b>poison</b>")
    wait_registered(cluster.lookup, cluster.brokers, dead)
    page.open("/topics/%s" % q(dead), "topic")
    page.wait(lambda: page.all('#dead-letters[data-loaded="true"]'), "#dead-letters loaded")
    rows = page.all("#dead-letter-records tbody tr[data-id]")
    assert {r.get_attribute("data-id") for r in rows} == {m["id"] for m in made}, page.app_html()
    first = rows[0].text
    assert topic in first and "work" in first and "<b>poison</b>-" in first, first
    assert not page.all("#dead-letter-records b"), "a preview was parsed as HTML"

    # confirm answers no: nothing is sent, the records stay
    page.spy_fetch()
    page.answer_confirm(False)
    page.visible('#dead-letters button[data-action="redrive"]').click()
    page.wait(lambda: len(page.confirms()) == 1, "window.confirm to be asked")
    assert "3" in page.confirms()[0] and topic in page.confirms()[0], page.confirms()
    assert [f for f in page.fetches() if f[0] == "POST"] == []
    assert len(records_on(cluster.b1, dead)) == 2

    # confirm answers yes: sent back on both brokers, the counts shown
    page.answer_confirm(True)
    page.visible('#dead-letters button[data-action="redrive"]').click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and
              "Sent back 3" in page.text("#notice"), "#notice to show the redrive's counts")
    for b in cluster.brokers:
        assert records_on(b, dead) == [], "records left on %s" % b.node
    page.wait(lambda: page.all('#dead-letters[data-loaded="true"][hidden]'),
              "#dead-letters hidden once nothing is recorded")


def test_plain_topic_has_no_dead_letter_section(cluster, page):
    cluster.on_both("bdl_plain")
    page.open("/topics/bdl_plain", "topic")
    page.wait(lambda: page.all('#dead-letters[data-loaded="true"]'), "#dead-letters loaded")
    assert not page.one("#dead-letters").is_displayed()
    assert page.one("#dead-letters").get_attribute("data-count") == "0"


def test_channel_page_sets_max_attempts_and_dead_letter_topic(cluster, page):
    cluster.on_both("bcfg_t", channels=["c"])
    page.open("/topics/bcfg_t/c", "channel")
    assert not page.all("#dead-lettered-count"), "a count shown with no limit in force"
    page.one("#max-attempts").send_keys("4")
    page.one("#dead-letter-topic").send_keys("bcfg_t.dead")
    page.one("#channel-config-submit").click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and page.all("#dead-lettered-count"),
              "the channel page re-rendered with the limit in force")
    for b in cluster.brokers:
        c = b.channel_stats("bcfg_t", "c")
        assert (c["max_attempts"], c["dead_letter_topic"]) == (4, "bcfg_t.dead"), (b.node, c)
    assert page.text("#dead-lettered-count") == "0"
    limits = page.text("#channel-limits")
    assert "4" in limits and "bcfg_t.dead" in limits, limits
    assert page.one("#max-attempts").get_attribute("value") == "4"

    # a value the brokers refuse: the message in #error, nothing changed
    field = page.one("#max-attempts")
    field.clear()
    field.send_keys("many")
    page.one("#channel-config-submit").click()
    page.wait(lambda: "INVALID_MAX_ATTEMPTS" in (page.error_text() or ""),
              "the brokers' refusal in #error")
    assert all(b.channel_stats("bcfg_t", "c")["max_attempts"] == 4 for b in cluster.brokers)


def test_channel_page_shows_dead_lettered_count(cluster, page):
    make_dead_letters(cluster.b1, "bcnt_t", "work", "bcnt_t.dead", 2)
    page.open("/topics/bcnt_t/work", "channel")
    assert page.text("#dead-lettered-count") == "2"
    page.one('#channel-limits a[href="/topics/bcnt_t.dead"]').click()
    page.wait_navigated("/topics/bcnt_t.dead", "topic")
    page.wait(lambda: page.all('#dead-letters[data-loaded="true"]') and
              len(page.all("#dead-letter-records tr[data-id]")) == 2, "the two dead letters")


def set_local_time(page, css, ns):
    """Sets a datetime-local input to `ns` (a whole second) in the browser's own time zone."""
    page.d.execute_script(
        "const d = new Date(arguments[1]); const p = (n) => String(n).padStart(2, '0');"
        "document.querySelector(arguments[0]).value = `${d.getFullYear()}-${p(d.getMonth() + 1)}"
        "-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;",
        css, ns // 10**6)


def test_rewind_confirmation_says_how_many_messages_come_again(cluster, page):
    topic = "brw_t"
    at = history_on_both(cluster, topic, "c", before=(3, 4), after=(2, 1), whole_second=True)
    page.open("/topics/%s/c" % topic, "channel")
    set_local_time(page, "#rewind-time", at)

    # confirm answers no: the dry run only, nothing moved
    page.spy_fetch()
    page.answer_confirm(False)
    page.one("#rewind-submit").click()
    page.wait(lambda: len(page.confirms()) == 1, "window.confirm to be asked")
    assert "3 message(s) will be delivered again" in page.confirms()[0], page.confirms()
    posts = [f for f in page.fetches() if f[0] == "POST"]
    assert len(posts) == 1, posts  # the dry run
    assert {b.channel_stats(topic, "c")["offset"] for b in cluster.brokers} == {5}

    # confirm answers yes: both brokers rewound, what follows is delivered again
    page.answer_confirm(True)
    page.one("#rewind-submit").click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and "Rewound" in page.text("#notice"),
              "#notice to say the channel was rewound")
    assert [b.channel_stats(topic, "c")["offset"] for b in cluster.brokers] == [3, 4]
    assert consume_and_finish(cluster.b1, topic, "c", 2) == ["late-0", "late-1"]


def test_topic_page_sets_and_shows_retention(cluster, page):
    cluster.on_both("bret_t", count=(3, 2))
    page.open("/topics/bret_t", "topic")
    assert not page.all("#retention-info"), "a retention shown with none in force"
    page.one("#retention-time").send_keys("2h")
    page.one("#retention-bytes").send_keys("1GiB")
    page.one("#retention-submit").click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and page.all("#retention-info"),
              "the topic page re-rendered with the retention in force")
    for b in cluster.brokers:
        r = b.topic_stats("bret_t")["retention"]
        assert (r["time_ns"], r["bytes"]) == (2 * 3600 * 10**9, 2**30), (b.node, r)
    assert page.text("#retention-time-value") == "2h"
    assert page.text("#retention-bytes-value") == "1 GiB"
    assert page.text("#retention-oldest") != "—", page.text("#retention-info")

    # a value the brokers refuse: shown in #error, nothing changed; "default" resets
    page.one("#retention-time").send_keys("soon")
    page.one("#retention-submit").click()
    page.wait(lambda: "INVALID_RETENTION_TIME" in (page.error_text() or ""),
              "the brokers' refusal in #error")
    field = page.one("#retention-time")
    field.clear()
    field.send_keys("default")
    page.one("#retention-bytes").send_keys("default")
    page.one("#retention-submit").click()
    page.wait(lambda: page.all('#app[data-loaded="true"]') and not page.all("#retention-info"),
              "the retention gone from the page")
    assert all("retention" not in b.topic_stats("bret_t") for b in cluster.brokers)
