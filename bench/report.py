#!/usr/bin/env python3
"""Renders bench/run's results (JSON lines) as the tables of BENCHMARKS.md.

Each table sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in BENCHMARKS.md; the
prose around the markers is kept. Every figure is min / median / max over the measured runs
(run 0 is the warm-up and is left out)."""

import json
import platform
import re
import statistics
import subprocess
import sys
from collections import defaultdict


def load(path):
    runs = defaultdict(list)  # scenario -> [(run, result)]
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            entry = json.loads(line)
            if entry["run"] == 0:
                continue
            result = entry["result"]
            scenario = result["scenario"]
            if "redis_mode" in result:
                scenario += f" ({result['redis_mode']})"
            if "compare" in result:
                scenario += f" [{result['compare']}]"
            runs[scenario].append((entry["run"], result))
    return runs


def spread(values, fmt="{:,.0f}"):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    low, mid, high = min(values), statistics.median(values), max(values)
    if len(values) == 1:
        return fmt.format(mid)
    return f"{fmt.format(low)} / **{fmt.format(mid)}** / {fmt.format(high)}"


def ms(values):
    return spread(values, "{:.2f}")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def cpu_us(result, count="requests"):
    """The server's CPU µs (user + system, all threads) per request, or per `count`."""
    if "server_cpu_s" not in result or not result.get(count):
        return None
    return result["server_cpu_s"] * 1e6 / result[count]


def likes_share_us(result, runs):
    """The subscription scenario's likes' own CPU µs per delivery: the likes cost as much
    per like as in the run with one subscriber per remark (median of its runs)."""
    alone = [r["server_cpu_s"] / r["likes"] for _, r in runs.get("likes alone", [])
             if r.get("server_cpu_s") is not None and r.get("likes")]
    if not alone or not result.get("deliveries"):
        return None
    return statistics.median(alone) * result["likes"] * 1e6 / result["deliveries"]


def own_delivery_us(result, runs):
    """A delivery's CPU µs with the likes' own work taken out."""
    share = likes_share_us(result, runs)
    total = cpu_us(result, "deliveries")
    return None if share is None or total is None else total - share


def verdict(ok):
    return "met" if ok else "**missed**"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def command(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "?"


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 1024 / 1024
    redis = re.search(r"v=(\S+)", command("redis-server", "--version"))
    return table(
        ["", ""],
        [
            ["CPU", f"{command('nproc')} × {cpu}"],
            ["memory", f"{mem_gib:.0f} GiB"],
            ["kernel", platform.release()],
            ["Redis", redis.group(1) if redis else "?"],
            ["PostgreSQL", (re.search(r"PostgreSQL\) (\S+)", command("psql", "--version")) or [None, "?"])[1]],
            ["load generator", command("sh", "-c", "wrk -v 2>&1 | head -1").split(" [")[0]],
            ["rustc", command("rustc", "--version")],
        ],
    ) + "\n\nServer, Redis, PostgreSQL and the load generators share these cores."


def per_run(runs, scenario, key, connections=None):
    out = {}
    for run, result in runs.get(scenario, []):
        if connections is None or result.get("connections") == connections:
            out[run] = result.get(key)
    return out


def ratio(a, b):
    return [a[r] / b[r] for r in a if r in b and b[r]]


# What a profiled function belongs to: the first group whose pattern matches its symbol (the
# kernel by its DSO). Order matters: async-graphql's generic code instantiates tokio's.
PROFILE_GROUPS = [
    ("kernel: socket reads and writes, epoll, scheduling", None),
    ("allocation and memory copies (mimalloc, memmove, memcmp)",
     r"^(_?mi_|__mem|mem(cpy|move|set|cmp)|malloc|free|realloc)"),
    ("async-graphql: validation, field resolution, response building", r"async_graphql|pest"),
    ("SQL (sqlx, SQLite)", r"sqlx|sqlite3"),
    ("tokio and futures", r"tokio|futures|mio::"),
    ("HTTP (hyper, axum, tower)", r"hyper|axum|tower|\bhttp::"),
    ("redis client", r"\bredis::|combine::"),
    ("engage's own code", r"engage::"),
    ("the rest: generic `core`/`alloc`/`serde`/`hashbrown` code inlined from all of the above", r""),
]


def profile_groups(name, report):
    """Shares of a flat `perf report --sort dso,sym` per group of PROFILE_GROUPS."""
    shares = defaultdict(float)
    for line in report:
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        percent, dso, kind, symbol = float(m[1]), m[2], m[3], m[4]
        for group, pattern in PROFILE_GROUPS:
            if (pattern is None and (kind == "k" or "kernel" in dso)) or (
                    pattern is not None and kind != "k" and re.search(pattern, symbol)):
                shares[group] += percent
                break
    total = sum(shares.values()) or 1
    return {"scenario": "profile", "profile": name,
            "groups": {group: round(100 * shares[group] / total, 1) for group, _ in PROFILE_GROUPS}}


# The comparison with the Node peer: each scenario's name in the results and in the table.
PEER_SCENARIOS = [("likeRemark", "likeRemark"), ("remarks page", "remarks page (20, likedByMe)"),
                  ("signIn", "signIn"), ("leaderboard", "leaderboard page (20 of the board)")]


def redis_us(result):
    """Redis's CPU µs (INFO cpu) per request answered."""
    if result.get("redis_cpu_s") is None or not result.get("requests"):
        return None
    return result["redis_cpu_s"] * 1e6 / result["requests"]


def render_peer(runs):
    """engage beside the Node peer: medians over the runs; the peer with graphql-jit or
    without, whichever cost less CPU per request in that scenario. A server whose runs of a
    scenario answered any error has no figure in it: its work was not the same."""
    def med(results, f):
        return median([f(r) for r in results])

    def errors_in(results):
        return sum(r["non2xx"] + r["socket_errors"] + r.get("graphql_errors", 0) for r in results)

    fmt = lambda v, f="{:,.0f}": "–" if v is None else f.format(v)
    rows, notes = [], []
    for name, label in PEER_SCENARIOS:
        engage = [r for _, r in runs.get(f"{name} [engage]", [])]
        modes = {mode: [r for _, r in runs.get(f"{name} [{mode}]", [])] for mode in ("peer", "peer-jit")}
        for server, results in [("engage", engage), *modes.items()]:
            if errors_in(results):
                notes.append(f"{label}, {server}: {errors_in(results):,} errors, left out")
        engage = engage if not errors_in(engage) else []
        costs = {mode: med(results, cpu_us) for mode, results in modes.items()
                 if results and not errors_in(results)}
        costs = {mode: cost for mode, cost in costs.items() if cost is not None}
        if not engage or not costs:
            rows.append([label, "–", "–", "–", "–", "–", "–"])
            continue
        mode = min(costs, key=costs.get)
        peer = modes[mode]
        e_cpu, p_cpu = med(engage, cpu_us), costs[mode]
        rows.append([
            label,
            fmt(e_cpu),
            f"{fmt(p_cpu)} ({'jit' if mode == 'peer-jit' else 'no jit'})",
            "–" if not e_cpu else f"{p_cpu / e_cpu:.1f}×",
            f"{fmt(med(engage, lambda r: r['rps']))} / {fmt(med(peer, lambda r: r['rps']))}",
            f"{fmt(med(engage, lambda r: r['p99_ms']), '{:.1f}')} / {fmt(med(peer, lambda r: r['p99_ms']), '{:.1f}')} ms",
            f"{fmt(med(engage, redis_us), '{:.1f}')} / {fmt(med(peer, redis_us), '{:.1f}')}",
        ])
    body = table(["scenario (64 connections)", "engage µs/req", "peer µs/req", "ratio (peer ÷ engage)",
                  "req/s engage / peer", "p99 engage / peer", "Redis µs/req engage / peer"], rows)
    checks = [r for _, r in runs.get("peer check", [])]
    if checks:
        passed = all(r["passed"] for r in checks)
        body += ("\n\nbench/peer/check.mjs before the runs: "
                 + ("both peers answered as engage did." if passed else "**the peer's answers differed** (see the run's log)."))
    if notes:
        body += "\n\nErrors: " + "; ".join(notes) + "."
    return body


def render(runs):
    blocks = {"machine": machine(), "peer": render_peer(runs)}
    http = ["bare like route", "likeRemark", "remarks page", "signIn"]
    rows = []
    for name in http:
        results = [r for _, r in runs.get(name, [])]
        rows.append([
            name,
            spread([r["rps"] for r in results]),
            ms([r["p50_ms"] for r in results]),
            ms([r["p99_ms"] for r in results]),
            spread([cpu_us(r) for r in results]),
            sum(r["non2xx"] + r["socket_errors"] + r.get("graphql_errors", 0) for r in results),
        ])
    blocks["http"] = table(
        ["scenario (64 connections)", "req/s", "p50 ms", "p99 ms", "server CPU µs/request",
         "errors"], rows)

    like = per_run(runs, "likeRemark", "rps")
    bare = per_run(runs, "bare like route", "rps")
    page = per_run(runs, "remarks page", "rps")
    sign = per_run(runs, "signIn", "rps")
    evalsha = per_run(runs, "redis-benchmark EVALSHA like", "rps")
    like_p99 = median(per_run(runs, "likeRemark", "p99_ms").values())
    rows = [
        ["likeRemark ÷ bare route", "≥ 80 %", spread([x * 100 for x in ratio(like, bare)], "{:.0f} %"),
         verdict((median(ratio(like, bare)) or 0) >= 0.80)],
        ["likeRemark p99", "≤ 10 ms", ms(per_run(runs, "likeRemark", "p99_ms").values()),
         verdict(like_p99 is not None and like_p99 <= 10)],
        ["likeRemark ÷ redis-benchmark EVALSHA", "(reported)",
         spread([x * 100 for x in ratio(like, evalsha)], "{:.0f} %"), ""],
        ["remarks page ÷ likeRemark", "≥ 50 %", spread([x * 100 for x in ratio(page, like)], "{:.0f} %"),
         verdict((median(ratio(page, like)) or 0) >= 0.50)],
        ["signIn ÷ likeRemark", "≥ 80 %", spread([x * 100 for x in ratio(sign, like)], "{:.0f} %"),
         verdict((median(ratio(sign, like)) or 0) >= 0.80)],
    ]
    blocks["ratios"] = table(["measure (same run)", "target", "min / median / max", ""], rows)
    rows = []
    for name in ("bare like route", "likeRemark"):
        for mode in ("pool", "shared"):
            results = [r for _, r in runs.get(f"{name} ({mode})", [])]
            if results:
                rows.append([name, mode, spread([r["rps"] for r in results]),
                             ms([r["p50_ms"] for r in results]), ms([r["p99_ms"] for r in results]),
                             spread([cpu_us(r) for r in results])])
    blocks["redis_mode"] = table(
        ["path", "ENGAGE_REDIS_MODE", "req/s", "p50 ms", "p99 ms", "server CPU µs/request"], rows)
    blocks["redis"] = table(
        ["redis-benchmark, like script by EVALSHA", "req/s"],
        [["64 connections, no pipelining", spread(list(evalsha.values()))]])

    rows = []
    for connections in (1, 4, 16, 64):
        results = [r for _, r in runs.get("leaderboard", []) if r["connections"] == connections]
        if results:
            p99 = median([r["p99_ms"] for r in results])
            rows.append([connections, spread([r["rps"] for r in results]),
                         ms([r["p50_ms"] for r in results]), ms([r["p99_ms"] for r in results]),
                         spread([cpu_us(r) for r in results]), verdict(p99 <= 5)])
    blocks["leaderboard"] = table(
        ["connections", "req/s", "p50 ms", "p99 ms", "server CPU µs/request", "p99 ≤ 5 ms"], rows)

    rows = []
    for name, connections, target in (("board page", 4, "p99 ≤ 5 ms"), ("board page", 64, ""),
                                      ("submitScore", 64, "")):
        results = [r for _, r in runs.get(name, []) if r["connections"] == connections]
        if results:
            p99 = median([r["p99_ms"] for r in results])
            rows.append([name, connections, spread([r["rps"] for r in results]),
                         ms([r["p50_ms"] for r in results]), ms([r["p99_ms"] for r in results]),
                         spread([cpu_us(r) for r in results]),
                         sum(r["non2xx"] + r["socket_errors"] + r.get("graphql_errors", 0)
                             for r in results),
                         f"{target} {verdict(p99 <= 5)}" if target else "(reported)"])
    blocks["boards"] = table(
        ["scenario", "connections", "req/s", "p50 ms", "p99 ms", "server CPU µs/request",
         "errors", "target"], rows)

    results = [r for _, r in runs.get("seckillVoucher", [])]
    if results:
        outcomes = defaultdict(set)
        for r in results:
            for k, v in r["outcomes"].items():
                outcomes[k].add(v)
        p99 = median([r["p99_ms"] for r in results])
        sql = [r["all_orders_in_sql_after_ms"] for r in results]
        blocks["seckill"] = table(
            ["attempts", "stock", "req/s", "p50 ms", "p99 ms", "server CPU µs/attempt",
             "outcomes (every run)",
             "all orders in SQL after", "targets"],
            [[f"{results[0]['attempts']:,}", f"{results[0]['stock']:,}",
              spread([r["rps"] for r in results]), ms([r["p50_ms"] for r in results]),
              ms([r["p99_ms"] for r in results]),
              spread([cpu_us(r, "attempts") for r in results]),
              ", ".join(f"{k} {'/'.join(str(v) for v in sorted(vs))}" for k, vs in sorted(outcomes.items())),
              spread(sql, "{:,.0f} ms"),
              f"p99 ≤ 50 ms {verdict(p99 <= 50)}; SQL ≤ 2 s {verdict(max(sql) <= 2000)}"]])

    verify = [r for _, r in runs.get("verify", [])]
    if verify and "seckill" in blocks:
        blocks["seckill"] += f"\n\n`engage verify` after the runs: {verify[0]['summary']}."
    results = [r for _, r in runs.get("subscriptions", [])]
    if results:
        p99 = median([r["p99_ms"] for r in results])
        rss = max(r["server_peak_rss_mib"] for r in results)
        complete = all(r["saw_final_count"] == r["subscribers"] for r in results)
        pubsub = {r["server_pubsub_connections"] for r in results}
        blocks["subscriptions"] = table(
            ["subscribers", "likes/s", "deliveries per run", "p50 ms", "p99 ms", "max ms",
             "server CPU µs/delivery",
             "every subscriber saw the final count", "server peak RSS MiB",
             "Redis pub/sub connections"],
            [[f"{results[0]['subscribers']:,}", spread([r["likes_per_s"] for r in results]),
              spread([r["deliveries"] for r in results]), ms([r["p50_ms"] for r in results]),
              ms([r["p99_ms"] for r in results]), ms([r["max_ms"] for r in results]),
              spread([cpu_us(r, "deliveries") for r in results]),
              "yes" if complete else "**no**", spread([r["server_peak_rss_mib"] for r in results]),
              "/".join(str(p) for p in sorted(pubsub, key=str))]]) + (
            f"\n\nTargets: p99 ≤ 100 ms {verdict(p99 <= 100)}; nothing lost {verdict(complete)}; "
            f"one pub/sub connection {verdict(pubsub == {1})}; RSS ≤ 400 MiB {verdict(rss <= 400)}.")

    results = [r for _, r in runs.get("subscriptions", [])]
    bounds = [r for _, r in runs.get("send bound", [])]
    apart = [own_delivery_us(r, runs) for r in results]
    if results and "server_steady_cpu_s" in results[0]:
        def per_delivery(key):
            return [r[key] * 1e6 / r["deliveries"] if r.get(key) is not None else None
                    for r in results]
        handshakes = median(per_delivery("server_handshakes_cpu_s"))
        send = median([b["sys_us_per_write"] for b in bounds])
        rows = [
            ["all of the run (the target's measure)",
             spread([cpu_us(r, "deliveries") for r in results], "{:.1f}"), "–"],
            ["connecting and subscribing the subscribers, spread over the deliveries",
             spread(per_delivery("server_handshakes_cpu_s"), "{:.1f}"), "–"],
            ["the likes and their deliveries (steady state)",
             spread(per_delivery("server_steady_cpu_s"), "{:.1f}"),
             spread(per_delivery("server_steady_sys_s"), "{:.1f}")],
            ["the likes themselves (the same likes, one subscriber per remark), "
             "spread over the deliveries",
             spread([likes_share_us(r, runs) for r in results], "{:.1f}"), "–"],
            ["a delivery, the likes' own work set apart",
             spread(apart, "{:.1f}"), "–"],
            [f"one frame written to each of {bounds[0]['sockets']:,} loopback sockets, "
             "without the server (`bench/send_bound.py`)" if bounds else "the kernel's send alone",
             "–", spread([b["sys_us_per_write"] for b in bounds], "{:.1f}")],
        ]
        if handshakes is not None and send is not None:
            floor = handshakes + send
            left = (f"over the target of 15 before the server does any work of its own"
                    if floor >= 15 else
                    f"which leaves {15 - floor:.1f} µs of the target of 15 for the server's own "
                    "work (following the count, rendering each message and handing it to the "
                    "socket)")
            likes = median([likes_share_us(r, runs) for r in results])
            on_top = ("" if likes is None else
                      f" On the measure of the whole run the likes' own work ({likes:.1f} µs) "
                      "comes on top.")
            bound = (f"\n\nBound: the handshakes ({handshakes:.1f} µs) and the kernel's send alone "
                     f"({send:.1f} µs) come to {floor:.1f} µs a delivery, {left}.{on_top}")
        else:
            bound = ""
        blocks["delivery"] = table(
            ["server CPU µs per delivery", "all", "of which the kernel"], rows) + bound

    rows = []
    for backend, target in (("PostgreSQL", 20000), ("SQLite", 10000)):
        results = [r for _, r in runs.get(f"archive into {backend}", [])]
        if results:
            drain = median([r["drain_per_s"] for r in results])
            lag = max(r["lag_max_ms"] for r in results)
            exact = all(r["vote_log_rows"] == r["likes"] for r in results)
            rows.append([backend, spread([r["drain_per_s"] for r in results]),
                         f"≥ {target:,}/s {verdict(drain >= target)}",
                         spread([r["steady_rate"] for r in results]),
                         spread([r["lag_max_ms"] for r in results], "{:,.0f} ms"),
                         f"≤ 2 s {verdict(lag <= 2000)}",
                         "yes" if exact else "**no**"])
    blocks["archive"] = table(
        ["database", "drain events/s", "target", "steady events/s", "max lag", "target",
         "one row per like"], rows)

    rows = []
    for name in sorted(n for n in runs if n.startswith("delay queue")):
        results = [r for _, r in runs[name]]
        rate = median([r["jobs_per_s"] for r in results])
        late = max(r["lateness_max_ms"] for r in results)
        rows.append([name.removeprefix("delay queue").strip(" ()") or "one topic, priority 0",
                     f"{results[0]['jobs']:,}", spread([r["jobs_per_s"] for r in results]),
                     spread([r["delivered_over_ms"] for r in results], "{:,.0f} ms"),
                     spread([r["lateness_p50_ms"] for r in results]),
                     spread([r["lateness_p99_ms"] for r in results]),
                     spread([r["lateness_max_ms"] for r in results]),
                     f"≥ 20,000/s {verdict(rate >= 20000)}; all within 5 s {verdict(late <= 5000)}"])
    if rows:
        blocks["jobs"] = table(
            ["queue", "jobs due together", "jobs/s (promoted and delivered)", "delivered over",
             "lateness p50 ms", "p99 ms", "max ms", "targets"], rows)

    def target_row(path, target, values, fmt="{:,.0f}"):
        mid = median(values)
        if mid is None:
            return [path, f"≤ {target}", "–", "not measured in this run"]
        return [path, f"≤ {target}", spread(values, fmt), verdict(mid <= target)]

    def cpu_row(path, target, results, count="requests"):
        return target_row(path, target, [cpu_us(r, count) for r in results])

    def own_delivery_row(runs):
        return target_row("… the likes' own work set apart (see the deliveries' table)", 15,
                          [own_delivery_us(r, runs) for _, r in runs.get("subscriptions", [])],
                          "{:.1f}")

    board = [r for _, r in runs.get("leaderboard", []) if r["connections"] == 64]
    blocks["cpu"] = table(
        ["server CPU µs per request (64 connections)", "target", "min / median / max", ""],
        [cpu_row("likeRemark", 90, [r for _, r in runs.get("likeRemark", [])]),
         cpu_row("signIn", 75, [r for _, r in runs.get("signIn", [])]),
         cpu_row("remarks page", 250, [r for _, r in runs.get("remarks page", [])]),
         cpu_row("leaderboard page", 150, board),
         cpu_row("a likeCountChanged delivery to one subscriber", 15,
                 [r for _, r in runs.get("subscriptions", [])], "deliveries"),
         own_delivery_row(runs)])

    profiles = {r["profile"]: r["groups"] for _, r in runs.get("profile", [])}
    if profiles:
        names = [n for n in ("like_remark", "remarks_page") if n in profiles]
        blocks["profile"] = table(
            ["share of the server's CPU samples"]
            + [{"like_remark": "likeRemark", "remarks_page": "remarks page"}[n] for n in names],
            [[group] + [f"{profiles[n].get(group, 0):.0f} %" for n in names]
             for group, _ in PROFILE_GROUPS])

    results = [r for _, r in runs.get("start", [])]
    if results:
        ready = median([r["ready_ms"] for r in results])
        rss = max(r["idle_rss_mib"] for r in results)
        blocks["start"] = table(
            ["start to ready (migrations applied)", "idle RSS MiB", "targets"],
            [[spread([r["ready_ms"] for r in results], "{:,.0f} ms"),
              spread([r["idle_rss_mib"] for r in results], "{:.1f}"),
              f"≤ 1 s {verdict(ready <= 1000)}; ≤ 50 MiB {verdict(rss <= 50)}"]])
    return blocks


def rewrite(path, blocks):
    with open(path) as f:
        text = f.read()
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        text, n = pattern.subn(lambda m: m.group(1) + body + "\n" + m.group(2), text)
        if n == 0:
            print(f"BENCHMARKS.md has no <!-- bench:{name} --> block", file=sys.stderr)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    if sys.argv[1] == "--profile":  # bench/run pipes `perf report` in: print one result line
        print(json.dumps(profile_groups(sys.argv[2], sys.stdin)))
        sys.exit(0)
    args = sys.argv[1:]
    only = None
    if "--only" in args:  # `--only peer`: that block alone (bench/run --compare)
        at = args.index("--only")
        only = args[at + 1]
        del args[at:at + 2]
    blocks = render(load(args[0]))
    if only:
        blocks = {only: blocks[only]}
    if len(args) > 1:
        rewrite(args[1], blocks)
    else:
        for name, body in blocks.items():
            print(f"## {name}\n\n{body}\n")
