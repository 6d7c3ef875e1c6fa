#!/usr/bin/env python3
"""Redis instructions per job of the delay queue's scripts, counted by callgrind: a figure
that does not move with the CPU, for comparing two versions of lua/ where Redis time on a
shared machine moves by a third between runs.

    bench/queue_instructions.py [--topics T] [--jobs J] [--limit L] [--runs-before R]
        [--priorities] LUA_DIR...

Each LUA_DIR is a lua/ directory (this checkout's, or an earlier commit's from
`git archive REV lua | tar -x -C DIR`). For each, in a redis-server run under callgrind,
J jobs of each of T topics are scheduled as repeating jobs and run R times uncounted (each
run ends with its next one due at once, so after 7 runs a job's history is full, as a
long-lived job's is), then once more counted: every topic promoted, then taken from (L jobs
a take, a topic's concurrency limit) and its deliveries ended, until none is left. The calls
are pipelined per phase, as the workers do. Prints thousands of instructions a job for each
script.

Needs valgrind and redis-server on the PATH; speaks RESP itself, so no Python package.
"""
import argparse
import glob
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

def expand(lua_dir, text, seen):
    """A script with its `-- @include` lines replaced, as build.rs does."""
    out = []
    for line in text.splitlines():
        found = re.match(r"^-- @include (\S+)$", line)
        if found:
            if found.group(1) not in seen:
                seen.add(found.group(1))
                included = open(os.path.join(lua_dir, "include", found.group(1))).read()
                out.append(expand(lua_dir, included, seen))
        else:
            out.append(line)
    return "\n".join(out)


def script(lua_dir, name):
    return expand(lua_dir, open(os.path.join(lua_dir, name)).read(), set())


class Redis:
    """Just enough RESP for pipelines of commands."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def pipeline(self, commands):
        out = bytearray()
        for command in commands:
            out += b"*%d\r\n" % len(command)
            for arg in command:
                arg = str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(out)
        return [self.reply() for _ in commands]

    def call(self, *command):
        return self.pipeline([command])[0]

    def reply(self):
        line = self.file.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return int(rest) if kind == b":" else rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            if int(rest) < 0:
                return None
            data = self.file.read(int(rest) + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return None if int(rest) < 0 else [self.reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def keys(topic):
    base = "{jobs:%s}:" % topic
    return {name: base + name for name in
            ("delayed", "waiting", "ready", "running", "settings", "counts", "finished", "live")} | {
        "jobs": base + "job:"}


def measure(redis, pid, out_dir, lua_dir, args):
    sha = {name: redis.call("SCRIPT", "LOAD", script(lua_dir, f"jobs_{name}.lua"))
           for name in ("schedule", "promote", "take", "finish")}
    # A repeating job's success as the workers of this version write it: with no result,
    # `next` where the finish script reads it.
    if "outcome == 'next'" in script(lua_dir, "jobs_finish.lua"):
        def ended_so(next_run):
            return ["next", next_run, ""]
    else:
        def ended_so(next_run):
            return ["done+", "", "", next_run, ""]
    topics = [f"t{n}" for n in range(args.topics)]
    now = int(time.time() * 1000)
    body = '{"body":"{\\"order\\":12345}","run_at_ms":%d,"max_attempts":5,"callback_url":null,' \
           '"created_at_ms":%d,"seq":1,"priority":0,"repeat":{"every_seconds":3600}}' % (now, now)
    setup = []
    for topic in topics:
        k = keys(topic)
        setup.append(("HSET", k["settings"], "concurrency", args.limit))
        jobs = []
        for n in range(args.jobs):
            priority = n * 1000 // max(args.jobs - 1, 1) if args.priorities else 0
            jobs += [f"j{n}", body.replace('"priority":0', '"priority":%d' % priority),
                     now - 1000, 0, priority, 0]
        setup.append(("EVALSHA", sha["schedule"], 4, k["jobs"], k["delayed"], k["finished"],
                      k["counts"], now, k["live"], "PUBLISH", *jobs))
    redis.pipeline(setup)
    counted = {}

    def phase(name, commands, count):
        if count:
            subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)
        replies = redis.pipeline(commands)
        if count:
            subprocess.run(["callgrind_control", "-d", name, str(pid)], capture_output=True,
                           check=True)
        return replies

    for run in range(args.runs_before + 1):
        count = run == args.runs_before
        now = int(time.time() * 1000)
        phase("promote", [("EVALSHA", sha["promote"], 6, *(keys(t)[n] for n in (
            "delayed", "waiting", "ready", "running", "jobs", "counts")), now, 5000,
            keys(t)["live"], "PUBLISH", 1000) for t in topics], count)
        left, take = set(topics), 0
        while left:
            order = sorted(left)
            taken = phase("take", [("EVALSHA", sha["take"], 5, *(keys(t)[n] for n in (
                "waiting", "running", "jobs", "settings", "counts")), now + 60000,
                f"lease{run}.{take}", args.limit, now, keys(t)["live"], "PUBLISH")
                for t in order], count)
            take += 1
            ends = []
            for topic, reply in zip(order, taken):
                if reply[0] == 0:
                    left.discard(topic)
                deliveries = []
                for i in range(1, len(reply), 5):
                    # Done; the next run due at once, so that the next round runs it.
                    deliveries += [reply[i], reply[i + 3], *ended_so(now)]
                if deliveries:
                    k = keys(topic)
                    ends.append(("EVALSHA", sha["finish"], 6, k["running"], k["delayed"],
                                 k["jobs"], k["finished"], k["counts"], k["waiting"], now, 1000,
                                 k["live"], "PUBLISH", *deliveries))
            if ends:
                phase("finish", ends, count)
    for dump in glob.glob(os.path.join(out_dir, "callgrind.out.*")):
        text = open(dump, errors="replace").read(4096)
        trigger = re.search(r"Trigger: dump (\w+)", text)
        total = re.search(r"summary: (\d+)", text)
        if trigger and total:
            counted[trigger.group(1)] = counted.get(trigger.group(1), 0) + int(total.group(1))
        os.remove(dump)
    cleanup = []
    for topic in topics:
        k = keys(topic)
        cleanup.append(("DEL", *(v for n, v in k.items() if n != "jobs")))
        cleanup.append(("DEL", *(k["jobs"] + f"j{n}" for n in range(args.jobs))))
    redis.pipeline(cleanup)
    return counted


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lua_dirs", nargs="+")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=40, help="jobs per topic")
    parser.add_argument("--limit", type=int, default=4, help="jobs a take, per topic")
    parser.add_argument("--runs-before", type=int, default=0)
    parser.add_argument("--priorities", action="store_true",
                        help="a topic's jobs get priorities 0 to 1000, spread evenly")
    parser.add_argument("--port", type=int, default=6398)
    args = parser.parse_args()
    out_dir = tempfile.mkdtemp(prefix="queue-instructions.")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(
            out_dir, "callgrind.out.%p"), "redis-server", "--port", str(args.port), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                redis = Redis(args.port)
                redis.call("PING")
                break
            except (OSError, RuntimeError):
                time.sleep(0.1)
        pid = int(re.search(r"process_id:(\d+)", redis.call("INFO", "server")).group(1))
        jobs = args.topics * args.jobs
        print(f"{args.topics} topics x {args.jobs} jobs"
              f"{' with priorities' if args.priorities else ''}, {args.limit} a take, counted "
              f"after {args.runs_before} runs; thousands of Redis instructions a job")
        print(f"{'lua':40} {'promote':>8} {'take':>8} {'finish':>8} {'all':>8}")
        for lua_dir in args.lua_dirs:
            counted = measure(redis, pid, out_dir, lua_dir, args)
            per_job = {name: counted.get(name, 0) / jobs / 1000
                       for name in ("promote", "take", "finish")}
            print(f"{lua_dir:40} {per_job['promote']:8.1f} {per_job['take']:8.1f} "
                  f"{per_job['finish']:8.1f} {sum(per_job.values()):8.1f}")
    finally:
        server.terminate()
        server.wait()
        for leftover in glob.glob(os.path.join(out_dir, "*")):
            os.remove(leftover)
        os.rmdir(out_dir)


if __name__ == "__main__":
    sys.exit(main())
