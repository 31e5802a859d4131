"""The dashboard's worker processes section, from supervisor states as the state files
hold them (and as a damaged one might)."""
from __future__ import annotations

from types import SimpleNamespace

from echomq_gevent.contrib.dashboard.processes import processes_section


def test_each_process_of_each_supervisor_is_a_row():
    states = [{"supervisor": {"pid": 700, "stopping": False},
               "processes": [{"index": 1, "pid": 701, "state": "running", "jobs": 12, "rss_mb": 41.25,
                              "started_at": 0.0 + 86400, "queues": ["mail", "<b>"]},
                             {"index": 2, "pid": 702, "state": "recycling", "jobs": 3, "rss_mb": 40.0,
                              "started_at": 86400.5, "queues": ["mail"]}]}]
    html = processes_section(SimpleNamespace(processes=lambda: states))
    assert 'data-supervisor="700"' in html and "2 worker process(es)" in html
    assert '<tr data-pid="701"><td class="n">1</td><td class="n">701</td><td>running</td><td class="n">12</td>' \
           '<td class="n">41.2</td><td>1970-01-02 00:00:00 UTC</td><td>mail, &lt;b&gt;</td></tr>' in html
    assert '<tr data-pid="702">' in html and "<td>recycling</td>" in html


def test_odd_values_show_as_unknown_and_no_reader_or_no_supervisor_shows_nothing():
    states = [{"supervisor": {"pid": 9, "stopping": True},
               "processes": [{"pid": "x<y", "jobs": "many", "rss_mb": True, "started_at": "soon", "queues": "q"},
                             "not a process"]}]
    html = processes_section(SimpleNamespace(processes=lambda: states))
    assert ", stopping" in html and 'data-pid="x&lt;y"' in html and html.count("<td class=\"n\">?</td>") == 3
    assert processes_section(SimpleNamespace(processes=None)) == ""
    assert processes_section(SimpleNamespace(processes=lambda: [])) == ""


def test_a_reader_that_fails_says_so_instead_of_failing_the_page():
    def broken():
        raise PermissionError("state file not readable")

    assert "cannot be read: state file not readable" in processes_section(SimpleNamespace(processes=broken))
