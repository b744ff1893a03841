"""A client and a server that ackscope did not write, for the tests of `ackscope watch`.

Messages are a 4-byte big-endian length and a body, as many programs frame them. With --split a
message is sent as two writes (the length, then the body): with Nagle on, the body waits for the
peer's delayed ACK of the length's small segment. Only the standard library is used.

    pair.py server [--split] [--nodelay]
        listens on 127.0.0.1, a port of the kernel's choosing, prints "port N", and answers each
        message with one of the same size;
    pair.py client --port N --requests R [--size S] [--split] [--nodelay] [--reconnect]
                   [--reconnect-every K]
        makes R requests (one connection, a new one each with --reconnect, or every K requests
        with --reconnect-every K), timing each from before its first write to after its answer's
        last byte, and prints them as JSON.
    pair.py http-server
        http.server's handler (HTTP/1.1, keep-alive), writing its headers and then its body,
        on a port of the kernel's choosing; prints "port N".
    pair.py http-client --port N --requests R
        http.client on one keep-alive connection, R GETs, timed; prints them as JSON.
"""

import argparse
import http.client
import http.server
import json
import socket
import statistics
import sys
import threading
import time


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def send_message(sock, body, split):
    header = len(body).to_bytes(4, "big")
    if split:
        sock.sendall(header)
        sock.sendall(body)
    else:
        sock.sendall(header + body)


def read_message(sock):
    header = read_exact(sock, 4)
    if header is None:
        return None
    return read_exact(sock, int.from_bytes(header, "big"))


def nodelay(sock, on):
    if on:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve(args):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print("port", listener.getsockname()[1], flush=True)

    def handle(conn):
        nodelay(conn, args.nodelay)
        with conn:
            while True:
                body = read_message(conn)
                if body is None:
                    return
                send_message(conn, body, args.split)

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def connect(args):
    sock = socket.create_connection(("127.0.0.1", args.port))
    nodelay(sock, args.nodelay)
    return sock


def client(args):
    body = b"x" * args.size
    times = []
    sock = None
    every = 1 if args.reconnect else args.reconnect_every
    for done in range(1, args.requests + 1):
        if sock is None:
            sock = connect(args)
        start = time.perf_counter()
        send_message(sock, body, args.split)
        answer = read_message(sock)
        times.append((time.perf_counter() - start) * 1000)
        assert answer == body, "the server's answer differs from the request"
        if every and done % every == 0:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    report(times)


def report(times):
    print(json.dumps({"requests": len(times), "p50_ms": statistics.median(times), "ms": times}))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"y" * 600
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def http_server(_args):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("port", server.server_address[1], flush=True)
    server.serve_forever()


def http_client(args):
    conn = http.client.HTTPConnection("127.0.0.1", args.port)
    times = []
    for _ in range(args.requests):
        start = time.perf_counter()
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        times.append((time.perf_counter() - start) * 1000)
    conn.close()
    report(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["server", "client", "http-server", "http-client"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--split", action="store_true")
    parser.add_argument("--nodelay", action="store_true")
    parser.add_argument("--reconnect", action="store_true")
    parser.add_argument("--reconnect-every", type=int, default=0, metavar="K")
    args = parser.parse_args()
    {"server": serve, "client": client, "http-server": http_server, "http-client": http_client}[
        args.role
    ](args)


if __name__ == "__main__":
    sys.exit(main())
