#!/usr/bin/env python3
"""Bounded soak of the context stores' default budgets (ctest -L slow: server.store_soak).

    python3 tests/server/bench/store_soak.py --bin build/tools/kvshrink --model stories260K.gguf [--seconds N]

Three servers with default store flags (under a KV cap of --cap): contexts in memory, in a
directory (--contexts-dir), in a real redis-server (--contexts-url; skipped without redis-server).
Clients create contexts against each without pause for $KVSHRINK_SOAK_SECONDS (default 30; 300 for
a five-minute soak) while one live client per server asks short completions. Fails (exit 1) unless:
every create and completion answers 200 (or, for a create, a documented budget refusal), each
server's RSS stays under its start RSS plus its stated resident budget plus 96 MiB, the directory
under its stated disk budget, Redis's used_memory under its stated budget (the disk budget of a
Redis store), the count of contexts under the count budget, and the live completions keep their
latency as contexts pile up: the median of the last third of the soak within 3x (+0.25 s) of the
first third's (beside creators the engine is shared, so latency alone is not the reference; growth over
time is what an unbounded store would show). Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
         "saw a big, red ball. She wanted to play with it, but it was too high. Lily asked her mom to help her.")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def parse_bytes(text):
    m = re.match(r"([0-9.]+) (GiB|MiB|bytes)", text)
    if not m:
        return 0
    return int(float(m.group(1)) * {"GiB": 1 << 30, "MiB": 1 << 20, "bytes": 1}[m.group(2)])


class Server:
    def __init__(self, binary, model, extra):
        cmd = [binary, "serve", "-m", model, "--port", "0", "-t", "1"] + extra
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err, self.port, self.budget = "", None, {}
        deadline = time.time() + 30
        while time.time() < deadline and not self.budget:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.err += line
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            m = re.search(r"context budgets: resident ([^,]+), disk ([^,]+), at most (\d+) contexts", line)
            if m:
                self.budget = {"resident": parse_bytes(m.group(1)), "disk": parse_bytes(m.group(2)),
                               "count": int(m.group(3))}
        if self.port is None or not self.budget:
            raise RuntimeError("server did not start: " + self.err)
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        self.rss_start = rss_kib(self.proc.pid) * 1024
        self.rss_peak = self.rss_start

    def request(self, method, path, body=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            return r.status, data
        finally:
            c.close()

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return float("nan")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def redis_used_memory(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
    data = b""
    while b"used_memory:" not in data or not data.endswith(b"\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    m = re.search(rb"used_memory:(\d+)", data)
    return int(m.group(1)) if m else 0


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("inf")


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs)))] if xs else float("inf")


def live_latencies(srv, seconds, out, errors):
    """Appends (start time, latency) of back-to-back short completions."""
    end = time.time() + seconds
    while time.time() < end:
        t = time.time()
        st, body = srv.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
        if st != 200:
            errors.append(f"live completion: {st} {body[:200]!r}")
        out.append((t, time.time() - t))


def creator(srv, end, stats, errors):
    while time.time() < end:
        st, body = srv.request("POST", "/v1/contexts", {"text": STORY, "kv_compression": {"press": "knorm", "keep": 0.5}})
        if st == 200:
            stats["made"] += 1
            stats["largest"] = max(stats["largest"], json.loads(body).get("kv_bytes_held", 0))
        elif st not in (429, 507):
            errors.append(f"create: {st} {body[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("KVSHRINK_SOAK_SECONDS", "30")))
    ap.add_argument("--cap", default="16M", help="--max-kv-bytes of the servers")
    ap.add_argument("--creators", type=int, default=3)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kvs_soak_")
    redis = None
    servers = {}
    try:
        common = ["--max-kv-bytes", a.cap]
        servers["memory"] = Server(a.bin, a.model, common)
        servers["dir"] = Server(a.bin, a.model, common + ["--contexts-dir", os.path.join(work, "ctx")])
        redis_bin = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
        redis_port = None
        if redis_bin:
            redis_port = free_port()
            redis = subprocess.Popen([redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", work,
                                      "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
            time.sleep(0.5)
            servers["redis"] = Server(a.bin, a.model, common + ["--contexts-url", f"redis://127.0.0.1:{redis_port}"])
        else:
            print("redis-server not installed: the Redis store is not soaked")
        errors = []
        start = time.time()
        end = start + a.seconds
        stats = {n: {"made": 0, "largest": 0} for n in servers}
        during = {n: [] for n in servers}
        threads = []
        for name, srv in servers.items():
            for _ in range(a.creators):
                threads.append(threading.Thread(target=creator, args=(srv, end, stats[name], errors)))
            threads.append(threading.Thread(target=live_latencies, args=(srv, a.seconds, during[name], errors)))
        for t in threads:
            t.start()
        redis_peak = 0
        while any(t.is_alive() for t in threads):
            for srv in servers.values():
                srv.rss_peak = max(srv.rss_peak, rss_kib(srv.proc.pid) * 1024)
            if redis_port:
                redis_peak = max(redis_peak, redis_used_memory(redis_port))
            time.sleep(0.5)
        ok = not errors
        for e in errors[:20]:
            print("FAIL", e)
        for name, srv in servers.items():
            b = srv.budget
            rss_limit = srv.rss_start + b["resident"] + (96 << 20)
            n = srv.metric("kvshrink_contexts")
            first = [d for t, d in during[name] if t < start + a.seconds / 3]
            last = [d for t, d in during[name] if t >= start + 2 * a.seconds / 3]
            line = (f"{name}: {stats[name]['made']} contexts made, {int(n)} stored (budget {b['count']}), peak RSS "
                    f"{srv.rss_peak >> 20} MiB (limit {rss_limit >> 20} MiB), live median {median(first):.3f} s (p90 "
                    f"{p90(first):.3f}) in the first third, {median(last):.3f} s (p90 {p90(last):.3f}) in the last")
            if srv.rss_peak > rss_limit or n > b["count"]:
                ok = False
                line = "FAIL " + line
            if median(last) > 3 * median(first) + 0.25:
                ok = False
                line = "FAIL " + line + ": live latency"
            if name == "dir":
                du = sum(os.path.getsize(os.path.join(work, "ctx", f)) for f in os.listdir(os.path.join(work, "ctx")))
                line += f", directory {du >> 20} MiB (budget {b['disk'] >> 20} MiB)"
                if du > b["disk"]:
                    ok = False
                    line = "FAIL " + line
            if name == "redis":
                limit = b["disk"]
                line += f", Redis used_memory peak {redis_peak >> 20} MiB (budget {limit >> 20} MiB)"
                if redis_peak > limit:
                    ok = False
                    line = "FAIL " + line
            print(line)
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        for srv in servers.values():
            srv.stop()
        if redis:
            redis.kill()
            redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
