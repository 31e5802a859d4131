"""The frames of offload: process (:mod:`echomq_gevent.worker.offload.wire`) and the
processor names a child can import (:func:`echomq_gevent.worker.offload.pool.processor_spec`)."""
from __future__ import annotations

import io
import struct

import pytest

from echomq_gevent.errors import ConfigError
from echomq_gevent.worker.offload.pool import describe_exit, processor_spec
from echomq_gevent.worker.offload.wire import MAX_FRAME, WireError, encode, read_frame


def reader(data: bytes):
    stream = io.BytesIO(data)
    return lambda n: stream.read(n)


def test_frames_round_trip_in_order():
    messages = [{"op": "run", "job": {"data": {"x": [1, 2.5, None, "é"]}, "id": "7"}}, {"op": "result", "value": b"\x00"}]
    read = reader(b"".join(encode(m) for m in messages))
    assert [read_frame(read), read_frame(read), read_frame(read)] == messages + [None]


def test_a_frame_cut_short_is_the_end_of_the_stream():
    frame = encode({"op": "result", "value": "x" * 100})
    assert read_frame(reader(frame[:-1])) is None
    assert read_frame(reader(frame[:2])) is None


@pytest.mark.parametrize("data, words", [
    (struct.pack(">I", MAX_FRAME + 1), "more than"),
    (struct.pack(">I", 1) + b"\xc1", "not msgpack"),
    (struct.pack(">I", 1) + b"\x01", "without an op"),
])
def test_bad_frames_are_refused(data, words):
    with pytest.raises(WireError, match=words):
        read_frame(reader(data))


def test_a_value_msgpack_cannot_carry_raises_type_error():
    with pytest.raises(TypeError):
        encode({"op": "result", "value": object()})


def module_level(job):
    return 1


class Holder:
    def method(self, job):
        return 1


def test_processor_names():
    assert processor_spec(module_level) == f"{__name__}:module_level"
    with pytest.raises(ConfigError, match="bound method"):
        processor_spec(Holder().method)
    with pytest.raises(ConfigError, match="closure or a lambda"):
        processor_spec(lambda job: 1)
    with pytest.raises(ConfigError, match="no module and name"):
        processor_spec(functools_partial())


def functools_partial():
    import functools

    return functools.partial(module_level)


def test_exit_statuses_are_described():
    assert describe_exit(-6) == "died of SIGABRT"
    assert describe_exit(-9) == "died of SIGKILL"
    assert describe_exit(3) == "exited with status 3"


def test_a_child_that_cannot_set_django_up_says_so_naming_the_settings_module():
    """A child asked to set Django up (the worker runs with Django) whose settings module
    does not import answers ``load_error`` naming ``DJANGO_SETTINGS_MODULE``, before it
    imports any processor."""
    pytest.importorskip("django")
    import os
    import subprocess
    import sys

    from echomq_gevent.worker.offload.child import SETUP_ENV

    env = dict(os.environ, DJANGO_SETTINGS_MODULE="no_such_settings_module_here")
    env[SETUP_ENV] = "django"
    child = subprocess.Popen([sys.executable, "-m", "echomq_gevent.worker.offload.child"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        out, _ = child.communicate(encode({"op": "load", "specs": ["json:dumps"]}), timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    answer = read_frame(reader(out))
    assert answer["op"] == "load_error"
    assert "DJANGO_SETTINGS_MODULE='no_such_settings_module_here'" in answer["error"]
    assert "ModuleNotFoundError" in answer["error"]
