"""The YAML configuration: good files load with the right values, bad files are refused
with a message that names the file, the line and the key."""
from __future__ import annotations

import os
import textwrap

import pytest

from echomq_gevent.host.config import load_config, parse_config
from echomq_gevent.host.runner import build_plugin_host
from echomq_gevent.errors import ConfigError
from echomq_gevent.worker.options import option_defaults


def parse(text: str, env=None):
    return parse_config(textwrap.dedent(text), filename="worker.yaml", env=env or {})


def test_minimal_file_gets_every_default():
    cfg = parse("""
        queues:
          mail: {}
    """)
    assert cfg.redis.url == "redis://127.0.0.1:6379/0"
    assert cfg.prefix == "bull"
    assert cfg.entry_points is True
    assert cfg.gc_freeze is True
    assert parse("gc_freeze: false\nqueues: {mail: {}}").gc_freeze is False
    assert cfg.queues["mail"].options == option_defaults()
    assert cfg.queues["mail"].processor is None


def test_defaults_apply_and_queue_options_override_them():
    cfg = parse("""
        redis: {url: "redis://10.0.0.1:6380/2"}
        prefix: "{bull}"
        defaults:
          concurrency: 10
          lock_duration: 60000
        queues:
          mail:
            concurrency: 3
            processor: "myapp.jobs:send"
            limiter: {max: 10, duration: 1000}
            metrics: {maxDataPoints: 60}
          thumbs: ~
    """)
    assert cfg.redis.url == "redis://10.0.0.1:6380/2"
    assert cfg.prefix == "{bull}"
    mail, thumbs = cfg.queues["mail"], cfg.queues["thumbs"]
    assert (mail.options["concurrency"], mail.options["lock_duration"]) == (3, 60000)
    assert mail.options["limiter"] == {"max": 10, "duration": 1000}
    assert mail.options["metrics"] == {"maxDataPoints": 60} and thumbs.options["metrics"] is None
    assert mail.processor == "myapp.jobs:send"
    assert (thumbs.options["concurrency"], thumbs.options["lock_duration"]) == (10, 60000)
    assert mail.line == 8


def test_environment_expansion_types_plain_scalars():
    cfg = parse("""
        redis:
          url: ${REDIS_URL:-embedded}
        prefix: ${PREFIX}
        queues:
          mail:
            concurrency: ${CONC:-5}
            name: "${HOST}-worker"
            drain_delay: ${DRAIN:-2.5}
    """, env={"PREFIX": "app", "HOST": "box1", "DRAIN": ""})
    assert cfg.redis.url == "embedded"
    assert cfg.redis.embedded
    assert cfg.prefix == "app"
    opts = cfg.queues["mail"].options
    assert opts["concurrency"] == 5 and isinstance(opts["concurrency"], int)
    assert opts["name"] == "box1-worker"
    assert opts["drain_delay"] == 2.5  # empty variable -> default


def test_environment_value_wins_over_default():
    cfg = parse("""
        queues:
          mail:
            concurrency: ${CONC:-5}
    """, env={"CONC": "42"})
    assert cfg.queues["mail"].options["concurrency"] == 42


def test_embedded_settings():
    cfg = parse("""
        redis:
          url: embedded
          embedded: {dir: data/redis, persist: false}
        queues: {q: {}}
    """)
    assert cfg.redis.embedded and cfg.redis.embedded_dir == "data/redis"
    assert cfg.redis.embedded_persist is False


def test_plugin_paths_are_relative_to_the_file(tmp_path):
    path = tmp_path / "conf" / "worker.yaml"
    path.parent.mkdir()
    path.write_text("plugin_paths: [../plugins]\nplugins: [demo]\nqueues: {q: {}}\n")
    cfg = load_config(str(path))
    assert cfg.plugin_paths == [str(tmp_path / "plugins")]
    assert cfg.plugins == ["demo"]


def test_merge_keys_and_anchors_work():
    cfg = parse("""
        queues:
          a: &base {concurrency: 7, lock_duration: 9000}
          b:
            <<: *base
            concurrency: 2
    """)
    assert cfg.queues["b"].options["concurrency"] == 2
    assert cfg.queues["b"].options["lock_duration"] == 9000


# --- bad files: (text, line, key, words the message must contain) ------------------------------
BAD = [
    ("gc-freeze-not-a-bool", """
        gc_freeze: "no"
        queues:
          mail: {}
     """, 2, "gc_freeze", ["must be true or false", "'no'"]),
    ("typo-in-queue-option", """
        queues:
          mail:
            concurrency: 2
            lock_duraton: 5000
     """, 5, "queues.mail.lock_duraton", ["did you mean 'lock_duration'"]),
    ("typo-top-level", """
        redis: {url: embedded}
        queus:
          mail: {}
     """, 3, "queus", ["did you mean 'queues'"]),
    ("wrong-type", """
        queues:
          mail:
            concurrency: "ten"
     """, 4, "queues.mail.concurrency", ["must be an integer", "'ten'"]),
    ("negative-concurrency", """
        defaults:
          concurrency: 1
        queues:
          mail:
            concurrency: -3
     """, 6, "queues.mail.concurrency", [">= 1", "-3"]),
    ("bool-for-int", """
        queues:
          mail: {lock_duration: true}
     """, 3, "queues.mail.lock_duration", ["must be an integer"]),
    ("broken-yaml", """
        queues:
          mail: {concurrency: 2
          other: {}
     """, None, None, ["not valid YAML"]),
    ("bad-indentation", """
        queues:
          mail:
            concurrency: 2
           lock_duration: 3
     """, 5, None, ["not valid YAML"]),
    ("renewal-slower-than-expiry", """
        defaults:
          lock_duration: 10000
        queues:
          mail:
            lock_renew_time: 15000
     """, 6, "queues.mail.lock_renew_time", ["lock_renew_time (15000 ms) must be below lock_duration (10000 ms)"]),
    ("limiter-missing-duration", """
        queues:
          mail:
            limiter:
              max: 10
     """, 4, "queues.mail.limiter", ["limiter.duration is missing"]),
    ("limiter-typo", """
        queues:
          mail:
            limiter: {max: 10, durations: 1000}
     """, 4, "queues.mail.limiter", ["unknown key(s) ['durations']"]),
    ("metrics-typo", """
        queues:
          mail:
            metrics: {maxDatapoints: 10}
     """, 4, "queues.mail.metrics", ["unknown key(s) ['maxDatapoints']", "maxDataPoints"]),
    ("metrics-zero", """
        queues:
          mail:
            metrics: {maxDataPoints: 0}
     """, 4, "queues.mail.metrics", ["metrics.maxDataPoints must be an integer >= 1"]),
    ("bad-offload", """
        queues:
          mail: {offload: processes}
     """, 3, "queues.mail.offload", ["'thread'", "'process'"]),
    ("offload-processes-zero", """
        queues:
          mail:
            offload: process
            offload_processes: 0
     """, 5, "queues.mail.offload_processes", ["integer >= 1"]),
    ("offload-processes-words", """
        queues:
          mail:
            offload: process
            offload_processes: "four"
     """, 5, "queues.mail.offload_processes", ["an integer or null"]),
    ("offload-processes-above-concurrency", """
        queues:
          mail:
            offload: process
            concurrency: 2
            offload_processes: 3
     """, 6, "queues.mail.offload_processes", ["more than concurrency (2)"]),
    ("offload-processes-without-process", """
        defaults:
          offload_processes: 2
        queues:
          mail: {concurrency: 4}
     """, 3, "defaults.offload_processes", ["is for offload: process"]),
    ("remove-on-complete-negative", """
        queues:
          mail:
            remove_on_complete: -5
     """, 4, "queues.mail.remove_on_complete", ["count >= 0"]),
    ("no-queues", """
        redis: {url: embedded}
     """, None, "queues", ["declares no queues"]),
    ("queue-name-with-colon", """
        queues:
          "mail:high": {}
     """, 3, "queues.mail:high", ["must not contain ':'"]),
    ("duplicate-key", """
        queues:
          mail: {concurrency: 1}
          mail: {concurrency: 2}
     """, 4, "queues.mail", ["appears twice", "first on line 3"]),
    ("unset-variable", """
        redis:
          url: ${MISSING_URL}
        queues: {mail: {}}
     """, 3, "redis.url", ["MISSING_URL is not set"]),
    ("bad-redis-url", """
        redis:
          url: "localhost:6379"
        queues: {mail: {}}
     """, 3, "redis.url", ["'embedded' or a redis://"]),
    ("embedded-settings-without-embedded", """
        redis:
          url: redis://127.0.0.1:6379/0
          embedded: {dir: var}
        queues: {mail: {}}
     """, 4, "redis.embedded", ["only apply with url: embedded"]),
    ("processor-not-module-function", """
        queues:
          mail:
            processor: send_mail
     """, 4, "queues.mail.processor", ["'module:function'"]),
    ("processor-in-defaults", """
        defaults:
          processor: "a:b"
        queues: {mail: {}}
     """, 3, "defaults.processor", ["per queue"]),
    ("plugins-not-a-list", """
        plugins: demo
        queues: {mail: {}}
     """, 2, "plugins", ["list of strings"]),
    ("plugin-bad-name", """
        plugins:
          - demo
          - "my plugin"
        queues: {mail: {}}
     """, 4, "plugins[1]", ["not a module name"]),
    ("log-format", """
        logging: {format: xml}
        queues: {mail: {}}
     """, 2, "logging.format", ["text, json"]),
    ("drain-delay-zero", """
        queues:
          mail: {drain_delay: 0}
     """, 3, "queues.mail.drain_delay", ["block on the marker forever"]),
    ("queues-a-list", """
        queues:
          - mail
     """, 2, "queues", ["non-empty mapping"]),
    ("defaults-typo-suggests", """
        defaults:
          stalled_intervall: 5000
        queues: {mail: {}}
     """, 3, "defaults.stalled_intervall", ["did you mean 'stalled_interval'"]),
    ("not-a-mapping", """
        - just
        - a list
     """, None, "(top level)", ["must be a mapping"]),
    ("scheduler-bad-cron", """
        queues:
          reports:
            schedulers:
              nightly:
                repeat:
                  pattern: "0 25 * * *"
     """, 7, "queues.reports.schedulers.nightly.repeat.pattern", ["invalid cron pattern '0 25 * * *'"]),
    ("scheduler-every-and-pattern", """
        queues:
          reports:
            schedulers:
              s: {repeat: {every: 1000, pattern: "* * * * *"}}
     """, 5, "queues.reports.schedulers.s.repeat.every", ["cannot be used together"]),
    ("scheduler-bad-tz", """
        queues:
          reports:
            schedulers:
              s:
                repeat: {pattern: "0 9 * * *", tz: Europe/Pariss}
     """, 6, "queues.reports.schedulers.s.repeat.tz", ["unknown time zone 'Europe/Pariss'"]),
    ("scheduler-key-typo", """
        queues:
          reports:
            schedulers:
              s:
                repeat: {every: 1000}
                templte: {name: x}
     """, 7, "queues.reports.schedulers.s.templte", ["did you mean 'template'"]),
    ("scheduler-without-repeat", """
        queues:
          reports:
            schedulers:
              s: {template: {name: x}}
     """, 5, "queues.reports.schedulers.s", ["needs repeat"]),
    ("scheduler-template-job-id", """
        queues:
          reports:
            schedulers:
              s:
                repeat: {every: 1000}
                template:
                  opts: {jobId: fixed}
     """, 8, "queues.reports.schedulers.s.template.opts", ["'jobId'", "sets it for each run"]),
    ("schedulers-in-defaults", """
        defaults:
          schedulers: {}
        queues: {mail: {}}
     """, 3, "defaults.schedulers", ["per queue"]),
]


def test_schedulers_are_read_per_queue():
    cfg = parse("""
        queues:
          reports:
            schedulers:
              nightly:
                repeat: {pattern: "0 3 * * *", tz: Europe/Paris}
                template: {name: report, data: {kind: nightly}}
              fast: {repeat: {every: 500}}
          mail: {}
    """)
    assert cfg.queues["reports"].schedulers == {
        "nightly": {"repeat": {"pattern": "0 3 * * *", "tz": "Europe/Paris"},
                    "template": {"name": "report", "data": {"kind": "nightly"}}},
        "fast": {"repeat": {"every": 500}, "template": None},
    }
    assert cfg.queues["mail"].schedulers == {}
    assert "schedulers" not in cfg.queues["reports"].options


@pytest.mark.parametrize("text,line,key,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_file_is_refused_naming_line_and_key(text, line, key, words):
    with pytest.raises(ConfigError) as info:
        parse(text)
    msg = str(info.value)
    assert msg.startswith("worker.yaml"), msg
    if line is not None:
        assert f"line {line}" in msg, msg
    if key is not None:
        assert f"key {key}" in msg, msg
    for w in words:
        assert w in msg, msg


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_config(str(path))


# --- resolving plugins and processors (no Redis needed) -------------------------------------------
@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A folder of importable modules for processors and plugins."""
    d = tmp_path / "mods"
    d.mkdir()
    (d / "cfgtest_jobs.py").write_text("def send(job):\n    return 'sent'\nNOT_CALLABLE = 3\n")
    (d / "cfgtest_plugin.py").write_text(textwrap.dedent("""
        from echomq_gevent import hookimpl

        def thumbs(job):
            return 'thumb'

        @hookimpl
        def echomq_register_processors(registry):
            registry.add('thumbs', 'resize', thumbs)

        class Counter:
            seen = 0

            @hookimpl
            def echomq_job_active(self, job):
                self.seen += 1

        counter = Counter()
    """))
    (d / "cfgtest_badhook.py").write_text(textwrap.dedent("""
        from echomq_gevent import hookimpl

        @hookimpl
        def echomq_job_exploded(worker, job):
            pass
    """))
    (d / "cfgtest_typohook.py").write_text(textwrap.dedent("""
        from echomq_gevent import hookimpl

        @hookimpl
        def echomq_job_complete(job):
            pass
    """))
    monkeypatch.syspath_prepend(str(d))
    yield d


def test_processor_and_plugin_resolve(modules):
    cfg = parse("""
        plugins: [cfgtest_plugin]
        entry_points: false
        queues:
          mail: {processor: "cfgtest_jobs:send"}
          thumbs: {}
    """)
    host, processors = build_plugin_host(cfg)
    assert processors["mail"].__name__ == "send"
    assert processors["thumbs"] is None
    assert host.get_processor("thumbs", "resize").__name__ == "thumbs"


def test_an_object_plugin_is_registered_by_its_module_object_name(modules):
    cfg = parse("""
        plugins: [cfgtest_plugin, "cfgtest_plugin:counter"]
        entry_points: false
        queues: {thumbs: {}}
    """)
    host, _processors = build_plugin_host(cfg)
    names = [name for name, _p in host.pm.list_name_plugin()]
    assert "cfgtest_plugin" in names and "cfgtest_plugin:counter" in names, names
    host.notify("echomq_job_active", worker=None, job=None)
    assert host.pm.get_plugin("cfgtest_plugin:counter").seen == 1


@pytest.mark.parametrize("text,line,key,words", [
    ("""
        entry_points: false
        queues:
          mail: {processor: "cfgtest_jobs:missing"}
     """, 4, "queues.mail.processor", ["has no 'missing'"]),
    ("""
        entry_points: false
        queues:
          mail: {processor: "cfgtest_nonexistent:send"}
     """, 4, "queues.mail.processor", ["cannot be imported"]),
    ("""
        entry_points: false
        queues:
          mail: {processor: "cfgtest_jobs:NOT_CALLABLE"}
     """, 4, "queues.mail.processor", ["not callable"]),
    ("""
        entry_points: false
        plugins:
          - cfgtest_plugin
          - cfgtest_no_such_plugin
        queues: {thumbs: {}}
     """, 5, "plugins[1]", ["'cfgtest_no_such_plugin' cannot be imported"]),
    ("""
        entry_points: false
        queues:
          mail: {concurrency: 2}
     """, 4, "queues.mail", ["has no processor"]),
    ("""
        entry_points: false
        plugins:
          - cfgtest_plugin
          - cfgtest_badhook
        queues:
          mail: {processor: "cfgtest_jobs:send"}
     """, 5, "plugins[1]", ["'cfgtest_badhook' implements 'echomq_job_exploded', a hook that does not exist"]),
    ("""
        entry_points: false
        plugins: ["cfgtest_plugin", "cfgtest_typohook"]
        queues:
          mail: {processor: "cfgtest_jobs:send"}
     """, 3, "plugins[1]", ["'echomq_job_complete'", "did you mean 'echomq_job_completed'?"]),
], ids=["processor-missing-attr", "processor-missing-module", "processor-not-callable",
        "unknown-plugin-module", "missing-processor", "unknown-hook", "hook-typo"])
def test_unresolvable_names_are_refused(modules, text, line, key, words):
    cfg = parse(text)
    with pytest.raises(ConfigError) as info:
        build_plugin_host(cfg)
    msg = str(info.value)
    assert f"line {line}" in msg and f"key {key}" in msg, msg
    for w in words:
        assert w in msg, msg


def test_shipped_conf_is_valid():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cfg = load_config(os.path.join(root, "conf", "worker.yaml"), env={})
    assert cfg.redis.embedded
    assert cfg.queues


def _fake_distribution(site, name: str, module: str, source: str) -> None:
    """An installed package (dist-info with an echomq_gevent entry point) in folder ``site``."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[echomq_gevent]\n{name} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


def test_entry_point_plugins_load_unless_turned_off(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _fake_distribution(site, "cfgtest-ep", "cfgtest_ep_plugin", """
        from echomq_gevent import hookimpl

        def run(job):
            return 'from entry point'

        @hookimpl
        def echomq_register_processors(registry):
            registry.add('epq', '*', run)
    """)
    monkeypatch.syspath_prepend(str(site))
    host, processors = build_plugin_host(parse("queues: {epq: {}}"))
    assert host.get_processor("epq", "anything").__name__ == "run"
    assert "cfgtest-ep" in dict(host.pm.list_name_plugin())
    with pytest.raises(ConfigError, match="has no processor"):
        build_plugin_host(parse("entry_points: false\nqueues: {epq: {}}"))


def test_broken_entry_point_plugin_is_named(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _fake_distribution(site, "cfgtest-broken", "cfgtest_broken_plugin", "raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ConfigError) as info:
        build_plugin_host(parse("queues: {q: {processor: 'os.path:join'}}"))
    msg = str(info.value)
    assert "key entry_points" in msg and "'cfgtest-broken'" in msg and "boom at import" in msg, msg


def test_tls_and_password_urls_are_accepted_and_redacted():
    from echomq_gevent.host.config import redact_url

    cfg = parse("""
        redis:
          url: "rediss://:s3cret@redis.example.com:6380/1?ssl_cert_reqs=required"
        queues: {q: {}}
    """)
    assert cfg.redis.url.startswith("rediss://:s3cret@")
    assert redact_url(cfg.redis.url) == "rediss://:***@redis.example.com:6380/1?ssl_cert_reqs=required"
    assert redact_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_sentinel_url_and_mapping_are_accepted():
    from echomq_gevent.host.config import redact_url
    from echomq_gevent.connection.clients import parse_sentinel_url

    cfg = parse("""
        redis: {url: "redis+sentinel://:pw@s1:26379,s2:26380/mymaster/2?sentinel_password=sp"}
        queues: {q: {}}
    """)
    parsed = parse_sentinel_url(cfg.redis.url)
    assert parsed.sentinels == [("s1", 26379), ("s2", 26380)]
    assert (parsed.service, parsed.db, parsed.password, parsed.sentinel_password) == ("mymaster", 2, "pw", "sp")
    assert redact_url(cfg.redis.url) == "redis+sentinel://:***@s1:26379,s2:26380/mymaster/2?sentinel_password=***"

    cfg = parse("""
        redis:
          sentinel: {sentinels: ["s1:26379", "s2:26379"], service: mymaster, db: 1, password: "p@ss"}
        queues: {q: {}}
    """)
    assert cfg.redis.url == "redis+sentinel://:p%40ss@s1:26379,s2:26379/mymaster/1"
    parsed = parse_sentinel_url(cfg.redis.url)
    assert (parsed.password, parsed.db, parsed.username) == ("p@ss", 1, None)


@pytest.mark.parametrize("redis_yaml,expect", [
    ('{url: "redis+sentinel://s1:26379"}', "service name"),
    ('{url: "redis+sentinel://s1/mymaster"}', "each sentinel must be host:port, got 's1'"),
    ('{url: "redis+sentinel://s1:1/mymaster/x"}', "the database must be a number"),
    ('{url: "redis+sentinel://s1:1/mymaster?pasword=x"}', "unknown query parameter 'pasword'"),
    ('{sentinel: {sentinels: [], service: m}}', "redis.sentinel.sentinels"),
    ('{sentinel: {sentinels: ["s1"], service: m}}', "must be host:port, got 's1'"),
    ('{sentinel: {sentinels: ["s1:1"]}}', "redis.sentinel.service"),
    ('{sentinel: {sentinels: ["s1:1"], service: m, servce: n}}', "redis.sentinel.servce"),
    ('{sentinel: {sentinels: ["s1:1"], service: m}, url: "redis://h:1/0"}', "either url or sentinel"),
])
def test_bad_sentinel_settings_are_named(redis_yaml, expect):
    with pytest.raises(ConfigError) as info:
        parse(f"redis: {redis_yaml}\nqueues: {{q: {{}}}}\n")
    assert expect in str(info.value), str(info.value)


def test_make_client_refuses_a_bad_sentinel_url_with_the_form():
    from echomq_gevent.connection.clients import make_client

    with pytest.raises(ValueError, match=r"redis\+sentinel://\[\[user\]:password@\]host:port"):
        make_client("redis+sentinel://s1:26379")


def test_process_keys_default_to_one_process_without_recycling():
    cfg = parse("""
        queues:
          mail: {}
    """)
    assert (cfg.processes, cfg.max_jobs_per_process, cfg.max_memory_per_process) == (1, None, None)
    assert cfg.supervised is False


def test_process_keys_are_read_and_auto_is_the_cpu_count(monkeypatch):
    from echomq_gevent.host import config

    monkeypatch.setattr(config, "cpu_count", lambda: 6)
    cfg = parse("""
        processes: auto
        max_jobs_per_process: 500
        max_memory_per_process: 300
        queues: {mail: {}}
    """)
    assert (cfg.processes, cfg.max_jobs_per_process, cfg.max_memory_per_process) == (6, 500, 300)
    assert cfg.supervised is True
    assert parse("processes: 1\nmax_memory_per_process: 64\nqueues: {mail: {}}").supervised is True
    assert parse("processes: '${N:-3}'\nqueues: {mail: {}}").processes == 3  # a quoted number from the environment


@pytest.mark.parametrize("line, key, words", [
    ("processes: 0", "processes", "at least 1, or auto"),
    ("processes: -1", "processes", "got -1"),
    ("processes: many", "processes", "got 'many'"),
    ("processes: 2.5", "processes", "whole number"),
    ("processes: true", "processes", "got True"),
    ("max_jobs_per_process: 0", "max_jobs_per_process", "at least 1"),
    ("max_jobs_per_process: ten", "max_jobs_per_process", "whole number of jobs"),
    ('max_memory_per_process: "1GB"', "max_memory_per_process", "megabytes"),
    ("max_memory_per_process: -5", "max_memory_per_process", "got -5"),
])
def test_bad_process_values_are_refused_naming_line_and_key(line, key, words):
    with pytest.raises(ConfigError) as info:
        parse(f"prefix: bull\n{line}\nqueues: {{mail: {{}}}}\n")
    assert f"worker.yaml, line 2, key {key}:" in str(info.value)
    assert words in str(info.value)
