"""Unit tests of the fault run's checker and schedule on synthetic histories (no process, no
namespace: they run in tests/run.sh in a second)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
import schedule  # noqa: E402


def hist(*lines, cut=None):
    """A history file's text: whole lines, plus an optional last line cut short."""
    text = "".join(line + "\n" for line in lines)
    return text + (cut or "")


def run_check(pub_text, con_texts, **kw):
    publishes, receives, spans = checker.parse_history(pub_text, "pub")
    for i, text in enumerate(con_texts):
        _p, r, s = checker.parse_history(text, "con%d" % i)
        receives += r
        spans.update(s)
    return checker.check(publishes, receives, **kw)


def test_a_clean_history_has_no_violation():
    pub = hist("START\t100.0", "A\t100.1\tb1\tp-0\t0.001", "A\t100.2\tb2\tp-1\t0.001",
               "END\t100.3\tx")
    con = hist("START\t99.0", "R\t100.15\tb1\tp-0\t1", "R\t100.25\tb2\tp-1\t1")
    s = run_check(pub, [con])
    assert s["lost"] == 0 and s["unexpected"] == 0 and s["duplicates"] == 0
    assert s["violations"] == []
    assert s["acked"] == 2 and s["received_distinct"] == 2


def test_acknowledged_and_never_received_is_lost_and_counted_by_broker():
    pub = hist("A\t1.0\tb1\tp-0\t0", "A\t1.1\tb2\tp-1\t0", "A\t1.2\tb2\tp-2\t0")
    con = hist("R\t1.5\tb1\tp-0\t1")
    s = run_check(pub, [con], names={"b2": "broker-2"})
    assert s["lost"] == 2
    assert s["lost_by_broker"] == {"broker-2": 2}
    assert s["lost_sample"] == ["p-1", "p-2"]
    assert s["violations"] == ["2 acknowledged messages lost"]


def test_a_message_received_by_either_consumer_of_the_channel_is_not_lost():
    pub = hist("A\t1.0\tb1\tp-0\t0", "A\t1.1\tb1\tp-1\t0")
    s = run_check(pub, [hist("R\t2\tb1\tp-0\t1"), hist("R\t2\tb1\tp-1\t1")])
    assert s["lost"] == 0
    assert s["deliveries_by_consumer"] == {"con0": 1, "con1": 1}


def test_duplicates_are_counted_not_violations():
    pub = hist("A\t1.0\tb1\tp-0\t0", "A\t1.1\tb1\tp-1\t0")
    con = hist("R\t2\tb1\tp-0\t1", "R\t3\tb1\tp-0\t2", "R\t4\tb3\tp-0\t1", "R\t5\tb1\tp-1\t1")
    s = run_check(pub, [con])
    assert s["duplicates"] == 1 and s["duplicate_deliveries"] == 2
    assert s["deliveries"] == 4 and s["violations"] == []


def test_unknown_outcomes_are_reported_received_or_not_never_violations():
    pub = hist("U\t1.0\tb1\tp-0\ttimeout", "U\t1.1\tb1\tp-1\tconnection reset",
               "E\t1.2\tb1\tp-2\tE_PUB_FAILED", "E\t1.3\tb1\tp-3\tE_PUB_FAILED")
    con = hist("R\t2\tb1\tp-0\t1", "R\t2\tb1\tp-3\t1")
    s = run_check(pub, [con])
    assert (s["unknown"], s["unknown_received"], s["unknown_not_received"]) == (2, 1, 1)
    assert s["error_received"] == 1
    assert s["lost"] == 0 and s["violations"] == []


def test_received_but_never_sent_is_unexpected():
    # p-1 was never attempted; p-0's only attempt found no connection, so it was never sent.
    pub = hist("F\t1.0\tb1\tp-0\tconnection refused")
    con = hist("R\t2\tb1\tp-0\t1", "R\t2\tb1\tp-1\t1")
    s = run_check(pub, [con])
    assert s["unexpected"] == 2
    assert s["violations"] == ["2 messages received that were never sent"]


def test_a_line_cut_short_by_a_kill_is_ignored():
    pub = hist("A\t1.0\tb1\tp-0\t0", cut="A\t1.1\tb1\tp-")
    s = run_check(pub, [hist("R\t2\tb1\tp-0\t1")])
    assert s["acked"] == 1 and s["attempts"] == 1 and s["lost"] == 0


def test_longest_silence_is_measured_inside_the_publish_window():
    assert checker.longest_silence([11, 12, 20, 21], 10, 25) == (8, 12, 20)
    # Nothing before the first receive counts from the window's start, and the tail too.
    assert checker.longest_silence([30], 10, 25) == (15, 10, 25)
    assert checker.longest_silence([11, 12], 10, 25) == (13, 12, 25)
    assert checker.longest_silence([], 5, 5)[0] == 0.0


def test_the_silence_in_a_check_uses_the_publishers_span():
    pub = hist("START\t0.0", "A\t1.0\tb1\tp-0\t0", "A\t9.0\tb1\tp-1\t0")
    con = hist("R\t1.1\tb1\tp-0\t1", "R\t7.1\tb1\tp-1\t1")
    publishes, receives, _spans = checker.parse_history(pub, "pub")
    receives += checker.parse_history(con, "con")[1]
    window = checker.publish_window(publishes)
    assert window == (1.0, 9.0)
    s = checker.check(publishes, receives, publish_window=window)
    assert s["longest_silence_s"] == 6.0
    assert (s["longest_silence_from"], s["longest_silence_to"]) == (1.1, 7.1)


def test_availability_per_interval():
    pub = hist("A\t0.0\tb\tp-0\t0", "U\t1.0\tb\tp-1\tt", "A\t5.5\tb\tp-2\t0",
               "A\t6.0\tb\tp-3\t0", "F\t12.0\tb\tp-4\tx")
    s = run_check(pub, [hist("R\t1\tb\tp-0\t1", "R\t7\tb\tp-2\t1", "R\t7\tb\tp-3\t1")],
                  interval=5.0)
    assert s["availability_series"] == [[0.0, 2, 1], [5.0, 2, 2], [10.0, 1, 0]]
    assert s["availability"] == 0.6 and s["availability_min"] == 0.0


def test_the_table_names_the_result():
    s = run_check(hist("A\t1\tb1\tp-0\t0"), [hist()])
    text = checker.table(s, t0=0.0)
    assert "LOST (acked, never received)" in text and "RESULT" in text
    assert "1 acknowledged messages lost" in text


def test_the_command_line_exits_non_zero_on_loss(tmp_path, capsys):
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "pub.tsv").write_text(hist("A\t1\tb1\tp-0\t0", "A\t2\tb1\tp-1\t0"))
    (tmp_path / "history" / "con.tsv").write_text(hist("R\t3\tb1\tp-0\t1"))
    assert checker.main(["checker.py", str(tmp_path)]) == 1
    assert '"lost": 1' in capsys.readouterr().out
    (tmp_path / "history" / "con.tsv").write_text(hist("R\t3\tb1\tp-0\t1", "R\t3\tb1\tp-1\t1"))
    assert checker.main(["checker.py", str(tmp_path)]) == 0


def test_the_schedule_is_a_function_of_the_seed():
    args = (60.0, schedule.KINDS, ["b1", "b2"], ["l1"])
    a, b = schedule.make(5, *args), schedule.make(5, *args)
    assert a == b and a != schedule.make(6, *args)
    for f in a:
        assert f.target in (["l1"] if f.kind == "lookup" else ["b1", "b2"])
        assert 2.0 <= f.duration <= 6.0 and f.at < 60.0
    # One fault at a time, at least min_gap apart.
    for x, y in zip(a, a[1:]):
        assert y.at >= x.at + x.duration + 3.0 - 1e-6


def test_a_long_schedule_has_over_a_hundred_faults():
    faults = schedule.make(1, 1800.0, schedule.KINDS, ["b1"], ["l1"])
    assert len(faults) >= 100


def test_fault_kinds_are_checked():
    assert schedule.parse_kinds("pause, restart") == ("pause", "restart")
    assert schedule.parse_kinds("all") == schedule.KINDS
    with pytest.raises(ValueError, match="unknown fault kind"):
        schedule.parse_kinds("pause,explode")


def test_lost_messages_are_blamed_on_a_later_data_losing_fault_of_their_broker():
    lost = [(1.0, "b1"), (5.5, "b1"), (9.0, "b1"), (2.0, "b2"), (3.0, "b3")]
    faults = [(4.0, "wipe", "b1"), (2.5, "kill", "b2"), (8.0, "pause", "b1"),
              (1.0, "wipe", "b3")]
    # b1@5.5 and b1@9 have only a pause after them; b3's wipe came before its ack.
    assert checker.attribute_lost(lost, faults) == {"kill": 1, "unexplained": 3, "wipe": 1}
    # A wipe explains a loss even when a kill of the same broker came between.
    assert checker.attribute_lost([(1.0, "b1")], [(2.0, "kill", "b1"), (3.0, "wipe", "b1")]) \
        == {"wipe": 1}
    assert checker.attribute_lost([(1.0, "b1")], [(2.0, "kill", "b1")]) == {"kill": 1}
    # An ack timestamped just after the SIGKILL was sent before it.
    assert checker.attribute_lost([(2.3, "b1")], [(2.0, "wipe", "b1")]) == {"wipe": 1}
    assert checker.attribute_lost([(3.5, "b1")], [(2.0, "wipe", "b1")]) == {"unexplained": 1}
    pub = hist("A\t1\tx1\tp-0\t0", "A\t3\tx1\tp-1\t0")
    s = run_check(pub, [hist()], names={"x1": "b1"}, faults=[(1.5, "wipe", "b1")])
    assert s["lost_blamed_on"] == {"unexplained": 1, "wipe": 1}


def test_the_setup_publish_is_checked_but_outside_the_window_and_the_availability():
    setup = hist("START\t10.0", "E\t10.1\tb1\tsetup-0\tE_PUB_FAILED", "A\t11.0\tb2\tsetup-1\t",
                 "END\t11.0\tx")
    pub = hist("A\t50.0\tb1\tp-0\t0", "A\t60.0\tb1\tp-1\t0")
    publishes, _r, _s = checker.parse_history(setup, checker.SETUP_CLIENT)
    p2, _r, _s = checker.parse_history(pub, "pub")
    publishes += p2
    _p, receives, _s = checker.parse_history(
        hist("R\t51\tb1\tp-0\t1", "R\t52\tb2\tsetup-1\t1", "R\t59\tb1\tp-1\t1"), "con")
    s = checker.check(publishes, receives)
    assert s["acked"] == 3 and s["lost"] == 0 and s["unexpected"] == 0
    assert checker.publish_window(publishes) == (50.0, 60.0)
    assert s["longest_silence_s"] == 7.0  # 52 to 59, not from the setup at 10
    # The setup's error is not counted: the series starts with the publishers, all acked.
    assert s["availability_series"][0] == [50.0, 1, 1]
    assert sum(n for _t, n, _a in s["availability_series"]) == 2 and s["availability_min"] == 1
    _p, receives, _s = checker.parse_history(hist("R\t51\tb1\tp-0\t1", "R\t59\tb1\tp-1\t1"),
                                             "con")
    s = checker.check(publishes, receives)
    assert s["lost"] == 1 and s["lost_sample"] == ["setup-1"], "the setup's message is checked"


def test_a_lost_message_comes_with_the_faults_around_its_acknowledgement():
    pub = hist("A\t10.0\tb1\tp-0\t0", "A\t20.0\tb2\tp-1\t0")
    faults = [(5.0, "pause", "broker-3"), (12.0, "kill", "broker-2"),
              (15.0, "wipe", "broker-4"), (30.0, "partition", "broker-1")]
    s = run_check(pub, [hist("R\t21\tb2\tp-1\t1")], names={"b1": "broker-1"}, faults=faults)
    assert s["lost"] == 1
    assert s["lost_context"] == [{
        "body": "p-0", "acked_at": 10.0, "acked_by": "broker-1",
        "fault_before": [5.0, "pause", "broker-3"],
        "faults_after": [[12.0, "kill", "broker-2"], [15.0, "wipe", "broker-4"]]}]
    assert "first lost" in checker.table(s) and "kill broker-2" in checker.table(s)
