"""msgpack arguments exactly as the Lua side expects them (docs/protocol.md, "Arguments")."""
from __future__ import annotations

import msgpack
import pytest
import redis

from echomq_gevent.protocol.options import encode_job_options
from echomq_gevent.protocol.keys import QueueKeys
from echomq_gevent.protocol.scripts import Scripts, pack


def test_pack_uses_str_and_bin_types_and_nil():
    # fixstr for text, bin for bytes, nil for None, no extension types
    assert pack("ab") == b"\xa2ab"
    assert pack(b"ab") == b"\xc4\x02ab"
    assert pack(None) == b"\xc0"
    assert pack({"a": True}) == b"\x81\xa1a\xc3"
    assert pack([1, None, 3]) == b"\x93\x01\xc0\x03"


def test_pack_round_trips_nested_options():
    opts = encode_job_options({"backoff": {"type": "exponential", "delay": 200, "jitter": 0.5},
                               "removeOnFail": {"age": 3600, "count": 100}, "keepLogs": 5})
    assert msgpack.unpackb(pack(opts), raw=False) == opts


@pytest.fixture
def scripts():
    # No command is sent: only argument building is exercised.
    return Scripts(redis.Redis(), QueueKeys("q", "bull"))


def test_add_job_args_positional_array(scripts):
    args = scripts.add_job_args("", "send", 1795965485578, '{"a":1}', {"attempts": 0})
    arr = msgpack.unpackb(args[0], raw=False)
    # prefix, custom id ("" = auto), name, timestamp, then nil holes for parent/rjk/dedup
    assert arr == ["bull:q:", "", "send", 1795965485578, None, None, None, None, None]
    assert args[1] == '{"a":1}'
    assert msgpack.unpackb(args[2], raw=False) == {"attempts": 0}


def test_add_job_args_with_parent_and_dedup(scripts):
    args = scripts.add_job_args("c1", "child", 5, "{}", {}, parent_key="bull:p:1",
                                parent_deps_key="bull:p:1:dependencies",
                                parent={"id": "1", "queueKey": "bull:p", "fpof": True},
                                repeat_job_key="sched", dedup_key="bull:q:de:x")
    arr = msgpack.unpackb(args[0], raw=False)
    assert arr[4:] == ["bull:p:1", "bull:p:1:dependencies", {"id": "1", "queueKey": "bull:p", "fpof": True},
                       "sched", "bull:q:de:x"]


@pytest.mark.parametrize("opts,script", [
    ({}, "addStandardJob-9"),
    ({"delay": 0}, "addStandardJob-9"),
    ({"delay": 10}, "addDelayedJob-6"),
    ({"delay": 10, "priority": 3}, "addDelayedJob-6"),
    ({"priority": 3}, "addPrioritizedJob-9"),
    ({"priority": 0, "lifo": True}, "addStandardJob-9"),
])
def test_add_script_choice(scripts, opts, script):
    name, keys = scripts.add_script_for(opts)
    assert name == script
    assert len(keys) == int(script.rsplit("-", 1)[1])


def test_add_script_keys_order(scripts):
    k = QueueKeys("q")
    assert scripts.add_script_for({})[1] == [k.wait, k.paused, k.meta, k.id, k.completed, k.delayed,
                                             k.active, k.events, k.marker]
    assert scripts.add_script_for({"delay": 1})[1] == [k.marker, k.meta, k.id, k.delayed, k.completed,
                                                       k.events]
    assert scripts.add_script_for({"priority": 1})[1] == [k.marker, k.meta, k.id, k.prioritized, k.delayed,
                                                          k.completed, k.active, k.events, k.pc]
