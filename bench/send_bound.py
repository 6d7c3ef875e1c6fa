#!/usr/bin/env python3
"""The kernel's share of a WebSocket delivery, measured without the server.

Opens SOCKETS loopback TCP connections (the reading ends in a child process, which reads
everything on epoll, as the subscribers of `bench_ws` do) and writes one small WebSocket
text frame, the size of a `likeCountChanged` update, to each of them, ROUNDS times over.
Prints a `RESULT {json}` line with the writer's system time per write: what one delivery
costs in the kernel before the server has done any work of its own. On loopback that time
includes the receiving side's TCP processing, which runs in the sender's context.

    bench/send_bound.py 10000 30
"""

import json
import os
import resource
import select
import socket
import sys
import time

PAYLOAD = (b'{"type":"next","id":"1","payload":{"data":{"likeCountChanged":'
           b'{"remarkId":"UmVtYXJrOjEyMzQ1Njc=","likeCount":12}}}}')
FRAME = bytes([0x81, len(PAYLOAD)]) + PAYLOAD  # FIN + text, unmasked (server to client)


def read_all(port, sockets):
    poller = select.epoll()
    held = {}
    for _ in range(sockets):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.setblocking(False)
        poller.register(conn.fileno(), select.EPOLLIN)
        held[conn.fileno()] = conn
    while held:
        for fd, _ in poller.poll():
            if not held[fd].recv(65536):
                poller.unregister(fd)
                held.pop(fd).close()


def main():
    sockets, rounds = int(sys.argv[1]), int(sys.argv[2])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    reader = os.fork()
    if reader == 0:
        read_all(port, sockets)
        os._exit(0)
    conns = [listener.accept()[0] for _ in range(sockets)]
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(rounds):
        for conn in conns:
            conn.send(FRAME)
        time.sleep(0.01)  # as updates come: a burst, then the reader catches up
    after = resource.getrusage(resource.RUSAGE_SELF)
    for conn in conns:
        conn.close()
    os.waitpid(reader, 0)
    writes = sockets * rounds
    print("RESULT " + json.dumps({
        "scenario": "send bound",
        "sockets": sockets,
        "writes": writes,
        "frame_bytes": len(FRAME),
        "sys_us_per_write": round((after.ru_stime - before.ru_stime) * 1e6 / writes, 2),
    }))


if __name__ == "__main__":
    main()
