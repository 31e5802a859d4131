"""``python -m bench.run --outbox``: enqueueing through the transactional outbox on
PostgreSQL against plain after-commit enqueueing (``make bench`` runs it after the
worker cases when PostgreSQL is installed).

Each run starts C writer greenlets in a gevent-patched process (``drivers/outbox_enqueue.py``)
that commit N transactions of one order row and one job each, on a throwaway PostgreSQL
cluster (``tests/pg_server.py``) and the harness's Redis, through SQLAlchemy on each
driver installed: psycopg2 (``postgresql+psycopg2``) and psycopg 3 (``postgresql+psycopg``):

* ``enqueue_on_commit``: the session's after-commit hook adds the job (the outbox off);
* ``outbox``: the row is written in the transaction and a relay in another process
  (``drivers/outbox_relay.py``, woken by LISTEN/NOTIFY) adds it. Where this build's
  relay cannot LISTEN on the driver's connections it polls (every
  :data:`POLL_WITHOUT_LISTEN` s), and the report says so.
* ``outbox <ref>`` (``--outbox-baseline REF``): the same with the package of commit REF
  (``git archive``), for before/after figures from the same rounds.
* ``outbox order=id`` (``--outbox-id-order``): the outbox's ``order: "id"``: rows written
  without their NOTIFY, the relay going by id, looking again after ``linger`` while it
  finds rows and every :data:`ID_ORDER_POLL` s otherwise.

Reported per driver and mode (medians over the rounds, the modes alternating): transactions/s of
the writers, jobs/s end to end (N over the time from the first write to the last job in
Redis), and p50/p99 of commit-to-added: from the moment the writer called ``commit()``
(its clock) to the job's ``added`` event in the queue's stream (Redis's clock,
millisecond ids; the same machine); and the CPU time a transaction costs, by part: the
writers' process, the relay's process, PostgreSQL (the postmaster and its backends) and
Redis (``INFO cpu``). On a shared machine wall-clock rates move with other work; CPU per
transaction is the steadier measure. Writes ``outbox.md`` and ``outbox.json``.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence

from .harness import Bench, BenchError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DRIVERS = os.path.join(HERE, "drivers")
MODES = ("enqueue_on_commit", "outbox")
#: the mode of the outbox's ``order: "id"`` (``--outbox-id-order``), and its poll_interval
ID_ORDER_MODE = "outbox order=id"
ID_ORDER_POLL = 0.05
#: SQLAlchemy dialect+driver names, psycopg2 first
DB_DRIVERS = ("psycopg2", "psycopg")
#: the relay's poll_interval where it cannot LISTEN on the driver's connections
POLL_WITHOUT_LISTEN = 0.1


def _pg_module() -> Any:
    """``tests/pg_server.py`` by path (the test tree is not a package)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    spec = importlib.util.spec_from_file_location("echomq_bench_pg_server", os.path.join(ROOT, "tests", "pg_server.py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def missing() -> Optional[str]:
    """Why the outbox case cannot run here, or None."""
    try:
        import psycopg2  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    if _pg_module().find_pg_bin() is None:
        return "no PostgreSQL server binaries (apt-get install postgresql)"
    return None


def installed_drivers(wanted: Sequence[str] = DB_DRIVERS) -> List[str]:
    """The drivers of ``wanted`` this Python can import (psycopg 3 is optional)."""
    found = []
    for name in wanted:
        if name not in DB_DRIVERS:
            raise BenchError(f"unknown PostgreSQL driver {name!r} (one of {', '.join(DB_DRIVERS)})")
        if importlib.util.find_spec(name) is not None:
            found.append(name)
    return found


def driver_url(url: str, driver: str) -> str:
    """``url`` (``postgresql+psycopg2://...``) for SQLAlchemy dialect driver ``driver``."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}+{driver}://{rest}"


def relay_listens(db_url: str) -> bool:
    """True when this build's relay can LISTEN on the connections of ``db_url``'s driver."""
    from sqlalchemy import create_engine

    from echomq_gevent.contrib.outbox import listen

    engine = create_engine(db_url)
    try:
        raw = engine.raw_connection()
        try:
            conn = getattr(raw, "driver_connection", None) or raw.connection
            return bool(listen.supported(conn))
        finally:
            raw.close()
    finally:
        engine.dispose()


@contextlib.contextmanager
def baseline_tree(ref: Optional[str]) -> Iterator[Optional[str]]:
    """The package as of commit ``ref`` in a temporary folder (``git archive``), or None."""
    if not ref:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="echomq-bench-baseline-")
    try:
        archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "echomq_gevent", "lua"],
                                 capture_output=True, timeout=60)
        if archive.returncode != 0:
            raise BenchError(f"git archive {ref} failed: {archive.stderr.decode(errors='replace')}")
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True, timeout=60)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _env(package_root: Optional[str] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root or ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _percentile(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid``, its reaped children and its live ones (psutil)."""
    import psutil

    proc = psutil.Process(pid)
    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            ct = child.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:  # ended meanwhile: its time is in the parent's children_* now
            pass
    return total


def _redis_cpu_s(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _one(bench: Bench, db_url: str, mode: str, n: int, c: int, interval_ms: int = 0,
         package_root: Optional[str] = None, poll_interval: Optional[float] = None,
         pg_pid: Optional[int] = None, order: Optional[str] = None) -> Dict[str, Any]:
    import redis
    from sqlalchemy import create_engine

    prefix = "ob" + uuid.uuid4().hex[:8]
    queue = "orders"
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE bench_orders, echomq_outbox")
    engine.dispose()
    cfg = {"db": db_url, "url": bench.url, "prefix": prefix, "queue": queue, "n": n, "c": c,
           "interval_ms": interval_ms,
           "mode": "on_commit" if mode == "enqueue_on_commit" else "outbox"}
    if poll_interval is not None:
        cfg["poll_interval"] = poll_interval
    if order is not None:
        cfg["order"] = order
    env = _env(package_root)
    relay = None
    if cfg["mode"] == "outbox":
        relay = subprocess.Popen([sys.executable, os.path.join(DRIVERS, "outbox_relay.py"), json.dumps(cfg)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = relay.stdout.readline() if relay.stdout else ""
        if "ready" not in line:
            relay.kill()
            raise BenchError(f"the bench relay did not start: {relay.stderr.read() if relay.stderr else ''}")
        time.sleep(0.3)  # its LISTEN connection opens right after "ready"
    client = redis.Redis.from_url(bench.url, decode_responses=True)
    events = f"{prefix}:{queue}:events"
    cpu0 = {"relay": _tree_cpu_s(relay.pid) if relay is not None else 0.0,
            "postgres": _tree_cpu_s(pg_pid) if pg_pid else 0.0, "redis": _redis_cpu_s(client)}
    try:
        res = subprocess.run([sys.executable, os.path.join(DRIVERS, "outbox_enqueue.py"), json.dumps(cfg)],
                             capture_output=True, text=True, env=env, timeout=600)
        if res.returncode != 0:
            raise BenchError(f"the bench writers failed: {res.stderr[-2000:]}")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        deadline = time.monotonic() + 120
        added: Dict[str, float] = {}
        last = "-"
        while len(added) < n:
            for entry_id, fields in client.xrange(events, min=f"({last}" if last != "-" else "-"):
                last = entry_id
                if fields.get("event") == "added":
                    added[fields["jobId"]] = float(entry_id.split("-")[0])
            if len(added) >= n:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"only {len(added)} of {n} jobs were added within 120 s ({mode})")
            time.sleep(0.01)
        cpu = {"relay": _tree_cpu_s(relay.pid) if relay is not None else 0.0,
               "postgres": _tree_cpu_s(pg_pid) if pg_pid else 0.0, "redis": _redis_cpu_s(client)}
        cpu = {part: cpu[part] - cpu0[part] for part in cpu}
        cpu["writers"] = float(out.get("cpu_s") or 0.0)
    finally:
        if relay is not None:
            relay.terminate()
            relay.wait(10)
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
        client.close()
    committed: Dict[str, float] = out["committed"]
    lat = [max(0.0, added[j] - t) for j, t in committed.items() if j in added]
    return {"mode": mode, "n": n, "c": c, "interval_ms": interval_ms, "writes_per_s": n / out["wall_s"],
            "jobs_per_s": n / max(1e-9, (max(added.values()) - out["start_ms"]) / 1000.0),
            "p50_ms": _percentile(lat, 0.5), "p99_ms": _percentile(lat, 0.99), "load1": os.getloadavg()[0],
            "cpu_us_per_tx": {part: round(v * 1e6 / n, 1) for part, v in cpu.items()},
            "cpu_us_per_tx_total": round(sum(cpu.values()) * 1e6 / n, 1)}


def measure_outbox(bench: Bench, n: int = 2000, c: int = 10, rounds: int = 3, idle_n: int = 200,
                   idle_interval_ms: int = 20, drivers: Sequence[str] = DB_DRIVERS,
                   baseline: Optional[str] = None, id_order: bool = False) -> Dict[str, Any]:
    """Start PostgreSQL, run every mode ``rounds`` times alternating, on each installed
    driver of ``drivers``, under load (``n`` transactions from ``c`` writers) and idle
    (``idle_n`` transactions one at a time, ``idle_interval_ms`` apart); the medians.
    ``baseline``: a commit whose package runs as mode ``outbox <baseline>`` too;
    ``id_order``: the outbox's ``order: "id"`` runs as mode :data:`ID_ORDER_MODE` too."""
    use = installed_drivers(drivers)
    if not use:
        raise BenchError(f"none of the drivers {', '.join(drivers)} is installed")
    pg = _pg_module().PostgresServer().start()
    try:
        pg.wait_ready()
        base_url = pg.create_database("bench")
        from sqlalchemy import create_engine

        from echomq_gevent.contrib.outbox.sqlalchemy import metadata

        engine = create_engine(base_url)
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE bench_orders (id serial PRIMARY KEY, n integer NOT NULL)")
        engine.dispose()
        with pg_version_conn(pg) as version:
            pg_version = version
        urls = {d: driver_url(base_url, d) for d in use}
        listens = {d: relay_listens(urls[d]) for d in use}
        modes = list(MODES) + ([f"outbox {baseline}"] if baseline else []) + ([ID_ORDER_MODE] if id_order else [])
        runs: List[Dict[str, Any]] = []
        with baseline_tree(baseline) as old_root:
            for r in range(rounds):
                # the loaded runs of a driver's modes back to back, the idle ones after
                # them: the runs a ratio compares are seconds apart, not a minute (the
                # machine's speed drifts over a round by more than the differences)
                for load, args in (("load", (n, c, 0)), ("idle", (idle_n, 1, idle_interval_ms))):
                    for d in (use if r % 2 == 0 else list(reversed(use))):
                        for mode in (modes if r % 2 == 0 else list(reversed(modes))):
                            root = old_root if baseline and mode == f"outbox {baseline}" else None
                            order = "id" if mode == ID_ORDER_MODE else None
                            poll = ID_ORDER_POLL if order else None if listens[d] else POLL_WITHOUT_LISTEN
                            row = _one(bench, urls[d], mode.split()[0], *args, package_root=root, poll_interval=poll,
                                       pg_pid=pg.postmaster_pid(), order=order)
                            row.update(mode=mode, load=load, driver=d, round=r)
                            bench.log(f"bench outbox: {d} {mode} {load} round {r + 1}: {row['writes_per_s']:.0f} tx/s, "
                                      f"{row['jobs_per_s']:.0f} jobs/s, p50 {row['p50_ms']:.1f} ms, "
                                      f"p99 {row['p99_ms']:.1f} ms, CPU {row['cpu_us_per_tx_total']:.0f} us/tx "
                                      f"{row['cpu_us_per_tx']}")
                            runs.append(row)
    finally:
        pg.stop()
    summary: Dict[str, Any] = {}
    for d in use:
        for load in ("load", "idle"):
            for mode in modes:
                rows = [r for r in runs if r["driver"] == d and r["mode"] == mode and r["load"] == load]
                summary[f"{d} {mode} {load}"] = {k: statistics.median(r[k] for r in rows)
                                                 for k in ("writes_per_s", "jobs_per_s", "p50_ms", "p99_ms",
                                                           "cpu_us_per_tx_total")}
                summary[f"{d} {mode} {load}"]["cpu_us_per_tx"] = {
                    part: statistics.median(r["cpu_us_per_tx"][part] for r in rows)
                    for part in ("writers", "relay", "postgres", "redis")}
        for mode in modes[1:]:
            summary[f"{d} {mode} load"].update(paired_ratios(runs, d, mode))
    return {"runs": runs, "summary": summary, "n": n, "c": c, "idle_n": idle_n, "idle_interval_ms": idle_interval_ms,
            "rounds": rounds, "postgres": pg_version, "redis": bench.redis_version, "drivers": use,
            "listen": listens, "baseline": baseline, "modes": modes}


def paired_ratios(runs: List[Dict[str, Any]], driver: str, mode: str) -> Dict[str, Any]:
    """Each round's ratio of ``mode`` to ``enqueue_on_commit`` under load, both from the
    same round (seconds apart), and their medians: transactions/s, and the transactions
    the same CPU buys (the plain mode's CPU a transaction over this mode's)."""
    tps: List[float] = []
    cpu: List[float] = []
    for r in sorted({row.get("round", 0) for row in runs}):
        got = {row["mode"]: row for row in runs
               if row["driver"] == driver and row["load"] == "load" and row.get("round", 0) == r}
        base, ob = got.get(MODES[0]), got.get(mode)
        if base is None or ob is None:
            continue
        tps.append(round(ob["writes_per_s"] / base["writes_per_s"], 3))
        if ob.get("cpu_us_per_tx_total") and base.get("cpu_us_per_tx_total"):
            cpu.append(round(base["cpu_us_per_tx_total"] / ob["cpu_us_per_tx_total"], 3))
    out: Dict[str, Any] = {"x_plain_rounds": tps}
    if tps:
        out["x_plain_median"] = statistics.median(tps)
    if cpu:
        out["x_plain_cpu_rounds"] = cpu
        out["x_plain_cpu_median"] = statistics.median(cpu)
    return out


class pg_version_conn:
    def __init__(self, pg: Any) -> None:
        self.pg = pg

    def __enter__(self) -> str:
        import psycopg2

        self.conn = psycopg2.connect(self.pg.dsn)
        with self.conn.cursor() as cur:
            cur.execute("SHOW server_version")
            return str(cur.fetchone()[0])

    def __exit__(self, *exc: Any) -> None:
        self.conn.close()


def _driver_label(d: str) -> str:
    return {"psycopg2": "psycopg2 (`postgresql+psycopg2`)", "psycopg": "psycopg 3 (`postgresql+psycopg`)"}.get(d, d)


def outbox_markdown(result: Dict[str, Any], meta: Dict[str, Any]) -> str:
    s = result["summary"]
    loads = [r["load1"] for r in result["runs"]]
    lines = [
        "# Enqueue through the outbox (PostgreSQL) against enqueue_on_commit", "",
        f"{meta['date']}; {meta['cpu']} ({meta['machine']}); PostgreSQL {result['postgres']} (fsync off, "
        f"throwaway cluster), Redis {result['redis']}; load average {min(loads):.2f}-{max(loads):.2f} "
        f"(a shared machine: other work moves these figures); commit {meta.get('commit', '?')}. Under load: "
        f"{result['n']} transactions of one order row and one job from {result['c']} writer greenlets; idle: "
        f"{result['idle_n']} transactions one at a time, {result['idle_interval_ms']} ms apart. Median of "
        f"{result['rounds']} rounds, the drivers and the modes alternating; in a round, a driver's loaded runs go "
        "back to back, the idle ones after them. Commit-to-added: from the writer "
        "calling commit() to the job's added event (millisecond stream ids; the relay in a process of its own).",
    ]
    if result.get("baseline"):
        lines += ["", f"`outbox {result['baseline']}`: the same relay and writes with the package of commit "
                      f"{result['baseline']}, in the same rounds."]
    if ID_ORDER_MODE in result.get("modes", ()):
        lines += ["", f"`{ID_ORDER_MODE}`: the outbox's `order: \"id\"` (rows without their NOTIFY, the relay "
                      f"going by id and not listening; poll_interval {ID_ORDER_POLL:g} s, linger while it finds "
                      "rows), in the same rounds."]
    for d in result.get("drivers", ["psycopg2"]):
        wake = ("woken by LISTEN/NOTIFY" if result.get("listen", {}).get(d, True) else
                f"**polling every {POLL_WITHOUT_LISTEN:g} s**: this build's relay cannot LISTEN on this "
                "driver's connections, so its latency is not the LISTEN relay's")
        lines += ["", f"## {_driver_label(d)}", "", f"The relay {wake}.", "",
                  "| mode | transactions/s | jobs/s end to end | commit-to-added p50 | p99 |",
                  "| --- | --- | --- | --- | --- |"]
        for load in ("load", "idle"):
            for mode in result.get("modes", MODES):
                r = s[f"{d} {mode} {load}"]
                tps = f"{r['writes_per_s']:,.0f}" if load == "load" else "(spaced)"
                jps = f"{r['jobs_per_s']:,.0f}" if load == "load" else "(spaced)"
                lines.append(f"| {mode} {load} | {tps} | {jps} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms |")
        lines += ["", "CPU time a transaction costs under load (µs, median; the whole machine's work for it):", "",
                  "| mode | writers | relay | PostgreSQL | Redis | total |", "| --- | --- | --- | --- | --- | --- |"]
        for mode in result.get("modes", MODES):
            r = s[f"{d} {mode} load"]
            parts = r.get("cpu_us_per_tx") or {}
            if parts:
                lines.append(f"| {mode} | {parts['writers']:.0f} | {parts['relay']:.0f} | {parts['postgres']:.0f} | "
                             f"{parts['redis']:.0f} | {r['cpu_us_per_tx_total']:.0f} |")
        base = s[f"{d} enqueue_on_commit load"]
        ratios = []
        paired = []
        for mode in result.get("modes", MODES)[1:]:
            ob = s[f"{d} {mode} load"]
            cpu = (f", transactions the same CPU buys {base['cpu_us_per_tx_total'] / ob['cpu_us_per_tx_total']:.2f}"
                   if ob.get("cpu_us_per_tx_total") and base.get("cpu_us_per_tx_total") else "")
            ratios.append(f"{mode} / enqueue_on_commit: transactions/s {ob['writes_per_s'] / base['writes_per_s']:.2f}, "
                          f"jobs/s {ob['jobs_per_s'] / base['jobs_per_s']:.2f}{cpu}")
            if ob.get("x_plain_rounds"):
                by_cpu = (_median_and_rounds(ob["x_plain_cpu_median"], ob["x_plain_cpu_rounds"])
                          if ob.get("x_plain_cpu_rounds") else "-")
                paired.append(f"| {mode} | {_median_and_rounds(ob['x_plain_median'], ob['x_plain_rounds'])} "
                              f"| {by_cpu} |")
        lines += ["", "Ratios of the medians: " + "; ".join(ratios) + "."]
        if paired:
            lines += ["", "Paired by round (each round's run against the enqueue_on_commit run of the same round, "
                          "seconds apart; the median of the rounds, then each round):", "",
                      "| mode / enqueue_on_commit | transactions/s | transactions the same CPU buys |",
                      "| --- | --- | --- |"] + paired
    lines.append("")
    return "\n".join(lines)


def _median_and_rounds(median: float, rounds: Sequence[float]) -> str:
    return f"**{median:.2f}** ({', '.join(f'{x:.2f}' for x in rounds)})"


def write_outbox(result: Dict[str, Any], meta: Dict[str, Any], out_dir: str) -> str:
    """Write ``outbox.md`` and ``outbox.json`` into ``out_dir``; returns the markdown."""
    text = outbox_markdown(result, meta)
    with open(os.path.join(out_dir, "outbox.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    with open(os.path.join(out_dir, "outbox.json"), "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, **result}, fh, indent=2)
    return text
