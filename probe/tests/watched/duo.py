"""A client and its server as one command, for the tests of `ackscope watch -- COMMAND`: a
program ackscope did not write, started by ackscope itself. Only the standard library is used.

    duo.py [--requests R] [--exit STATUS]
        starts `pair.py server --split` (beside this file) as its child, prints "server pid N",
        connects to it, and makes requests one at a time: each message a 4-byte length and a
        100-byte body in two writes, Nagle on, answered the same way. For each it prints
        "request N ms X nodelay F": the time from before its first write to after its answer's
        last byte, and TCP_NODELAY of its own socket as the program reads it after the answer.
        It stops when its standard input closes (or after R requests), stops the server, and
        exits with STATUS (0 by default).
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pair  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int)
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    server = subprocess.Popen(
        [sys.executable, "-B", os.path.join(here, "pair.py"), "server", "--split"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    # A SIGTERM ends this program through its `finally`, so that the server goes with it.
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        line = server.stdout.readline().decode()
        port = int(line.split()[1])
        print("server pid", server.pid, flush=True)

        closed = threading.Event()
        if args.requests is None:
            threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()

        sock = socket.create_connection(("127.0.0.1", port))
        body = b"x" * 100
        n = 0
        while not closed.is_set() and (args.requests is None or n < args.requests):
            n += 1
            start = time.perf_counter()
            pair.send_message(sock, body, True)
            answer = pair.read_message(sock)
            ms = (time.perf_counter() - start) * 1000
            assert answer == body, "the server's answer differs from the request"
            nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            print(f"request {n} ms {ms:.3f} nodelay {1 if nodelay else 0}", flush=True)
        sock.close()
    finally:
        server.terminate()
        server.wait()
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
