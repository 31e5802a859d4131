"""Job options: validation messages, the stored short-key form, keepJobs maps."""
from __future__ import annotations

import json
import math

import pytest

from echomq_gevent.errors import InvalidJobDataError, InvalidJobIdError, InvalidOptionError
from echomq_gevent.protocol.options import (
    PRIORITY_LIMIT, decode_job_options, encode_job_data, encode_job_options, keep_jobs,
    validate_job_id, validate_job_options,
)


@pytest.mark.parametrize("opts,message", [
    ({"atempts": 3}, "job option 'atempts' (job 'j'): is not a BullMQ job option (did you mean 'attempts'?)"),
    ({"remove_on_complete": True}, "'remove_on_complete' (job 'j'): is not a BullMQ job option (did you mean 'removeOnComplete'?)"),
    ({"zzz": 1}, "'zzz' (job 'j'): is not a BullMQ job option"),
    ({"debounce": {"id": "x"}}, "'debounce' (job 'j'): was removed in BullMQ v6; use 'deduplication' instead"),
    ({"priority": -1}, "'priority' (job 'j'): must be between 0 and 2097151, got -1"),
    ({"priority": PRIORITY_LIMIT + 1}, "must be between 0 and 2097151, got 2097152"),
    ({"priority": 1.5}, "'priority' (job 'j'): must be an integer, got 1.5"),
    ({"priority": True}, "'priority' (job 'j'): must be an integer, got True"),
    ({"delay": -5}, "'delay' (job 'j'): must be >= 0, got -5"),
    ({"delay": "10"}, "'delay' (job 'j'): must be an integer, got '10'"),
    ({"attempts": -1}, "'attempts' (job 'j'): must be >= 0, got -1"),
    ({"backoff": -1}, "'backoff' (job 'j'): a backoff delay must be >= 0 ms, got -1"),
    ({"backoff": "fixed"}, "'backoff' (job 'j'): must be a delay in ms or {type, delay, jitter}, got 'fixed'"),
    ({"backoff": {"delay": 5}}, "'backoff' (job 'j'): needs a 'type' string"),
    ({"backoff": {"type": "fixed", "jitter": 1.5}}, "'jitter' must be a number between 0 and 1, got 1.5"),
    ({"backoff": {"type": "fixed", "jitter": -0.1}}, "'jitter' must be a number between 0 and 1, got -0.1"),
    ({"backoff": {"type": "fixed", "delay": -3}}, "'delay' must be a number of ms >= 0, got -3"),
    ({"backoff": {"type": "fixed", "dealy": 3}}, "unknown key 'dealy' (did you mean 'delay'?)"),
    ({"backoff": math.inf}, "must be a delay in ms or {type, delay, jitter}, got inf"),
    ({"lifo": 1}, "'lifo' (job 'j'): must be true or false, got 1"),
    ({"removeOnComplete": -1}, "'removeOnComplete' (job 'j'): a count of jobs to keep must be >= 0, got -1"),
    ({"removeOnFail": "yes"}, "'removeOnFail' (job 'j'): must be true, false, a count, or {age, count, limit}"),
    ({"removeOnFail": {"limit": 5}}, "'removeOnFail' (job 'j'): needs 'age' (seconds) or 'count'"),
    ({"removeOnFail": {"age": -1}}, "'age' must be a number of seconds >= 0, got -1"),
    ({"removeOnFail": {"count": 1.5}}, "'count' must be an integer >= 0, got 1.5"),
    ({"removeOnFail": {"cnt": 1}}, "unknown key 'cnt' (did you mean 'count'?)"),
    ({"timestamp": -1}, "'timestamp' (job 'j'): must be >= 0, got -1"),
    ({"stackTraceLimit": -2}, "'stackTraceLimit' (job 'j'): must be >= 0, got -2"),
    ({"keepLogs": 0}, "'keepLogs' (job 'j'): must be >= 1, got 0"),
    ({"sizeLimit": 0}, "'sizeLimit' (job 'j'): must be >= 1, got 0"),
    ({"parent": "p1"}, "'parent' (job 'j'): must be {id, queue}"),
    ({"parent": {"id": "1"}}, "'queue' must be the parent's qualified queue name '<prefix>:<name>'"),
    ({"parent": {"id": "1", "queue": "parents"}}, "got 'parents'"),
    ({"parent": {"id": "", "queue": "bull:p"}}, "'id' must be the parent job's id as a non-empty string"),
    ({"parent": {"id": "1", "queue": "bull:p", "x": 1}}, "unknown key 'x'"),
    ({"failParentOnFailure": "yes"}, "'failParentOnFailure' (job 'j'): must be true or false"),
    ({"failParentOnFailure": True, "removeDependencyOnFailure": True},
     "'removeDependencyOnFailure' (job 'j'): cannot be used together with failParentOnFailure"),
    ({"deduplication": {"ttl": 5}}, "'id' must be a non-empty string (deduplication id must be provided)"),
    ({"deduplication": {"id": "d", "ttl": 0}}, "'ttl' must be an integer number of ms >= 1, got 0"),
    ({"deduplication": {"id": "d", "keepLastIfActive": "yes"}}, "'keepLastIfActive' must be true or false"),
    ({"deduplication": {"id": "d", "extend": "y"}}, "'extend' must be true or false"),
    ({"deduplication": {"id": "d"}, "parent": {"id": "1", "queue": "bull:p"}},
     "'deduplication' (job 'j'): cannot be used together with 'parent'"),
    ({"telemetry": {"metadata": 5}}, "'metadata' must be a string"),
    ({"repeat": 5}, "'repeat' (job 'j'): must be a mapping"),
    ({"repeatJobKey": ""}, "'repeatJobKey' (job 'j'): must be a non-empty string"),
])
def test_bad_options_are_refused_with_a_named_message(opts, message):
    with pytest.raises(InvalidOptionError) as info:
        validate_job_options(opts, "j")
    assert message in str(info.value)


def test_options_must_be_a_mapping():
    with pytest.raises(InvalidOptionError, match="job options of job 'j' must be a mapping"):
        validate_job_options([("attempts", 1)], "j")


@pytest.mark.parametrize("job_id,message", [
    ("0", "cannot be '0' or start with '0:'"),
    ("0:abc", "cannot be '0' or start with '0:'"),
    ("12", "cannot be an integer string"),
    ("-7", "cannot be an integer string"),
    ("a:b", "cannot contain ':'"),
    ("", "must not be empty"),
    (12, "must be a string"),
])
def test_bad_custom_ids(job_id, message):
    with pytest.raises(InvalidJobIdError, match=message):
        validate_job_id(job_id)
    with pytest.raises(InvalidJobIdError, match=message):
        validate_job_options({"jobId": job_id}, "j")


@pytest.mark.parametrize("job_id", ["order-12", "012x", "abc", "x/y", "ünï", "1.5"])
def test_good_custom_ids(job_id):
    assert validate_job_id(job_id) == job_id


def test_good_options_pass_and_none_is_dropped():
    opts = {
        "attempts": 3, "backoff": {"type": "exponential", "delay": 200, "jitter": 0.5},
        "delay": 0, "priority": PRIORITY_LIMIT, "lifo": False, "jobId": "abc",
        "removeOnComplete": True, "removeOnFail": {"age": 3600, "count": 10, "limit": 5},
        "timestamp": 1795965485578, "stackTraceLimit": 0, "keepLogs": 5, "sizeLimit": 100,
        "repeat": {"every": 1000},
    }
    clean = validate_job_options(dict(opts, priority=None), "j")
    assert "priority" not in clean
    assert validate_job_options(opts, "j") == opts
    assert validate_job_options(None) == {}


def test_encode_matches_node_stored_form():
    # the stored opts of a job Node added: {"kl":5,"jobId":"custom-id","removeOnFail":{...},"lifo":true,"attempts":0}
    enc = encode_job_options(validate_job_options(
        {"keepLogs": 5, "jobId": "custom-id", "removeOnFail": {"age": 3600, "count": 100}, "lifo": True}))
    assert enc == {"kl": 5, "jobId": "custom-id", "removeOnFail": {"age": 3600, "count": 100},
                   "lifo": True, "attempts": 0}
    enc = encode_job_options({"removeOnComplete": 10, "backoff": 1000, "attempts": 3})
    assert enc == {"removeOnComplete": 10, "backoff": {"type": "fixed", "delay": 1000}, "attempts": 3}


def test_encode_short_keys_telemetry_and_rjk():
    enc = encode_job_options({
        "deduplication": {"id": "d"}, "failParentOnFailure": True, "telemetry": {"metadata": "m", "omitContext": True},
        "repeatJobKey": "sched", "continueParentOnFailure": False, "ignoreDependencyOnFailure": False,
        "removeDependencyOnFailure": False,
    })
    assert enc == {"attempts": 0, "de": {"id": "d"}, "fpof": True, "tm": "m", "omc": True,
                   "cpof": False, "idof": False, "rdof": False}
    assert decode_job_options(enc) == {
        "attempts": 0, "deduplication": {"id": "d"}, "failParentOnFailure": True,
        "telemetry": {"metadata": "m", "omitContext": True}, "continueParentOnFailure": False,
        "ignoreDependencyOnFailure": False, "removeDependencyOnFailure": False}


def test_decode_passes_unknown_keys_through():
    assert decode_job_options({"kl": 3, "foo": 1}) == {"keepLogs": 3, "foo": 1}


@pytest.mark.parametrize("value,expected", [
    (True, {"count": 0}), (False, {"count": -1}), (None, {"count": -1}), (0, {"count": 0}),
    (5, {"count": 5}), ({"age": 10}, {"age": 10}), ({"age": 1, "count": 2, "limit": 3}, {"age": 1, "count": 2, "limit": 3}),
])
def test_keep_jobs(value, expected):
    assert keep_jobs(value) == expected


def test_keep_jobs_refuses_garbage():
    with pytest.raises(InvalidOptionError, match="removeOnComplete/removeOnFail must be"):
        keep_jobs("all")


def test_encode_job_data_like_json_stringify():
    assert encode_job_data({"a": [1, 2.5, None, True], "é": "ü/"}, "j") == '{"a":[1,2.5,null,true],"é":"ü/"}'
    assert encode_job_data(None, "j") == "null"
    assert encode_job_data({1: "x"}, "j") == '{"1":"x"}'


@pytest.mark.parametrize("data", [float("nan"), {"x": float("inf")}, {"s": {1, 2}}, object(), b"bytes"])
def test_unserialisable_data_names_the_job(data):
    with pytest.raises(InvalidJobDataError, match="data of job 'mail' cannot be stored as JSON"):
        encode_job_data(data, "mail")


def test_size_limit():
    assert encode_job_data("ab", "j", size_limit=4) == '"ab"'
    with pytest.raises(InvalidJobDataError, match="the size of job 'j' exceeds the limit 4 bytes"):
        encode_job_data("abc", "j", size_limit=4)
    # counted in UTF-8 bytes, like Node
    with pytest.raises(InvalidJobDataError, match="exceeds the limit 4 bytes"):
        encode_job_data("éé", "j", size_limit=4)


def test_stored_options_are_checked_with_the_add_rules_but_run_what_node_writes():
    from echomq_gevent.protocol.options import stored_options_problems

    bad = stored_options_problems({"attempts": "three", "removeOnComplete": "yes", "lifo": True})
    assert set(bad) == {"attempts", "removeOnComplete"}
    assert "'attempts'" in bad["attempts"] and "'three'" in bad["attempts"]
    # what a Node producer writes and our producer would not: runs as is
    assert stored_options_problems({
        "jobId": "repeat:abc:1700000000000",  # a scheduler's id, with ':'
        "deduplication": {"id": "d", "keepLastIfActive": True},
        "someOptionOfANewerBullMQ": {"x": 1},
        "attempts": 0,
    }) == {}
    assert "keepLastIfActive" in stored_options_problems(
        {"deduplication": {"id": "d", "keepLastIfActive": "yes"}})["deduplication"]


@pytest.mark.parametrize("value", [None, True, 0, -1.5, "", "é ✓ \u2028", [1, {"a": None}], {"b": [], "c": "x"}])
def test_compact_json_writes_what_json_dumps_writes(value):
    from echomq_gevent.protocol.options import compact_json

    assert compact_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@pytest.mark.parametrize("value,error", [(float("nan"), ValueError), ({"x": float("inf")}, ValueError),
                                         ({1, 2}, TypeError), (object(), TypeError)])
def test_compact_json_refuses_what_node_cannot_read(value, error):
    from echomq_gevent.protocol.options import compact_json

    with pytest.raises(error):
        compact_json(value)


# ------------------------------------------------------------------ text Redis can take
def test_compact_json_escapes_a_lone_surrogate_as_node_writes_it():
    from echomq_gevent.protocol.options import compact_json

    value = {"path": "a\udcffb", "pair": "\ud83d\ude00", "ok": "é😀", "n": [1, None]}
    text = compact_json(value)
    # JSON.stringify({path: "a\udcffb"}) in Node is {"path":"a\\udcffb"}: lower-case hex
    assert text == '{"path":"a\\udcffb","pair":"\\ud83d\\ude00","ok":"é😀","n":[1,null]}'
    text.encode("utf-8")  # writable
    assert json.loads(text)["path"] == "a\udcffb" and json.loads(text)["ok"] == "é😀"
    assert compact_json("plain") == '"plain"' and compact_json(None) == "null"


def test_wire_text_escapes_lone_surrogates_and_leaves_other_text_alone():
    from echomq_gevent.protocol.options import wire_text

    assert wire_text("bad name \udcff") == "bad name \\udcff"
    for text in ("", "plain", "é😀 ünïcode", "\\udcff already escaped"):
        assert wire_text(text) == text
