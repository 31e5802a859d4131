"""One validator of worker options: ``Worker(...)`` and the YAML file accept and refuse
the same values, with the same reason."""
from __future__ import annotations

import textwrap

import pytest

from echomq_gevent import Worker
from echomq_gevent.host.config import parse_config
from echomq_gevent.errors import ConfigError
from echomq_gevent.worker.options import OptionError, validate_worker_options

# (options, the key the refusal names, words of the reason); None: accepted
CASES = [
    ({"drain_delay": 0}, "drain_delay", "block on the marker forever"),
    ({"drain_delay": 0.5}, None, None),
    ({"lock_duration": 50}, "lock_duration", "too short"),
    ({"lock_duration": 100}, None, None),
    ({"lock_duration": 1000, "lock_renew_time": 1000}, "lock_renew_time", "must be below lock_duration"),
    ({"offload": "thread", "concurrency": 1001}, "concurrency", "more than 1000"),
    ({"offload": "thread", "concurrency": 1000}, None, None),
    ({"concurrency": True}, "concurrency", "must be an integer"),
    ({"drain_delay": True}, "drain_delay", "must be"),
    ({"hub_block_threshold": False}, "hub_block_threshold", "must be"),
    ({"skip_stalled_check": 1}, "skip_stalled_check", "true/false"),
    ({"remove_on_complete": "yes"}, "remove_on_complete", "must be"),
    ({"concurency": 3}, "concurency", "did you mean 'concurrency'"),
]


def _yaml(options):
    body = ", ".join(f"{k}: {_scalar(v)}" for k, v in options.items())
    return textwrap.dedent(f"""
        queues:
          mail: {{{body}}}
    """)


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


@pytest.mark.parametrize("options,key,words", CASES, ids=[repr(c[0]) for c in CASES])
def test_code_and_yaml_agree(options, key, words):
    if key is None:
        worker = Worker("mail", lambda job: None, connection="redis://127.0.0.1:1/0", **options)
        cfg = parse_config(_yaml(options), filename="worker.yaml", env={})
        for name, value in options.items():
            assert worker.options[name] == value
            assert cfg.queues["mail"].options[name] == value
        return
    with pytest.raises(OptionError) as in_code:
        Worker("mail", lambda job: None, connection="redis://127.0.0.1:1/0", **options)
    assert in_code.value.option == key
    assert words in str(in_code.value)
    with pytest.raises(ConfigError) as in_yaml:
        parse_config(_yaml(options), filename="worker.yaml", env={})
    msg = str(in_yaml.value)
    assert f"key queues.mail.{key}:" in msg, msg
    assert words in msg, msg


def test_a_default_that_breaks_a_combination_is_named_in_defaults():
    text = textwrap.dedent("""
        defaults: {drain_delay: 0}
        queues:
          mail: {}
    """)
    with pytest.raises(ConfigError, match=r"key defaults\.drain_delay: .*forever"):
        parse_config(text, filename="worker.yaml", env={})


def test_validator_fills_defaults_and_names_the_caller():
    out = validate_worker_options({"concurrency": 4})
    assert out["concurrency"] == 4 and out["drain_delay"] == 5
    with pytest.raises(OptionError, match=r"^Worker for queue 'x': drain_delay 0"):
        validate_worker_options({"drain_delay": 0}, where="Worker for queue 'x'")
