#!/usr/bin/env python3
"""Attacks `kvshrink serve` over raw sockets and prints what each attack got (issue 23).

    python3 tests/server/bench/attack.py --bin build/tools/kvshrink --model stories260K.gguf [--only NAME,...] [--legacy]

Each attack starts its own server on a free loopback port (the same flags every time, so that an
older binary can be attacked the same way: pass its --bin) and reports the status the attacker
got, how long it took, the server's RSS growth and whether /health kept answering. Not a test: a
tool for looking at a server the way a hostile client does. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

ARGS = None


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    def __init__(self, extra=(), port=0):
        self.extra = list(extra)
        cmd = [ARGS.bin, "serve", "-m", ARGS.model, "--port", str(port), "-t", "2"] + self.extra
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = ""
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.err += line
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.wait(5)
            raise RuntimeError("server did not start: " + self.err)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.err += line

    def rss(self):
        return rss_kib(self.proc.pid)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class PeakRss:
    """The server's peak RSS (KiB), sampled every `interval` s on a thread until stop()."""

    def __init__(self, srv, interval):
        self.peak = srv.rss()
        self._done = threading.Event()

        def sample():
            while not self._done.is_set():
                self.peak = max(self.peak, srv.rss())
                time.sleep(interval)

        threading.Thread(target=sample, daemon=True).start()

    def stop(self):
        self._done.set()
        return self.peak


def connect(port, src=None, timeout=30):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if src:
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, timeout=30):
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                m = re.search(rb"\r\ncontent-length:\s*(\d+)", data[:head_end].lower())
                if m and len(data) >= head_end + 4 + int(m.group(1)):
                    break
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionError):
        pass
    return data


def status(data):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(m.group(1)) if m else None


def body_json(data):
    try:
        return json.loads(data[data.find(b"\r\n\r\n") + 4:])
    except ValueError:
        return None


def exchange(port, raw, timeout=30):
    s = connect(port, timeout=timeout)
    try:
        s.sendall(raw)
    except OSError:
        pass
    r = read_response(s, timeout)
    s.close()
    return r


def post(path, body, ctype="application/json", extra=""):
    b = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n{extra}"
            f"Content-Length: {len(b)}\r\nConnection: close\r\n\r\n").encode() + b


def health_latency(port, timeout=10):
    t = time.time()
    try:
        r = exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", timeout)
    except OSError:
        return None
    return time.time() - t if status(r) == 200 else None


def report(name, **kv):
    print(f"{name:32s} " + "  ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


# --- attacks ---------------------------------------------------------------------------------

def chunked_body(mb=100):
    srv = Server(["--max-body-mib", "8"])
    rss0 = srv.rss()
    s = connect(srv.port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    sent, t0, peak = 0, time.time(), 0
    s.settimeout(2)
    try:
        for _ in range(mb):
            s.sendall(chunk)
            sent += 1
            peak = max(peak, srv.rss())
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    r = read_response(s, 60)
    s.close()
    peak = max(peak, srv.rss())
    report("chunked body 100 MiB", status=status(r), sent_mib=sent, seconds=round(time.time() - t0, 2),
           rss_growth_mib=round((peak - rss0) / 1024, 1))
    srv.stop()


def content_length_lies():
    srv = Server([])
    for name, raw in [
            ("CL 100 MB, no body", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 100000000\r\n\r\n"),
            ("CL 'abc'", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: abc\r\n\r\n"),
            ("CL + chunked (smuggling)", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                         b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            ("CL 1000, 10 sent (lie)", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                       b"Content-Length: 1000\r\n\r\n{\"prompt\":")]:
        t0 = time.time()
        r = exchange(srv.port, raw, timeout=90)
        report(name, status=status(r), seconds=round(time.time() - t0, 2))
    srv.stop()


def slow_clients(n=70, seconds=12, idle=200):
    srv = Server([])
    stop = threading.Event()
    got = []

    def slow(i):
        try:
            s = connect(srv.port, src=f"127.0.{1 + i // 250}.{1 + i % 250}")
            req = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 10000
            k = 0
            s.settimeout(1)
            while not stop.is_set():
                s.sendall(req[k:k + 1])
                k = (k + 1) % len(req)
                try:
                    d = s.recv(4096)
                    got.append(status(d))
                    break
                except socket.timeout:
                    pass
            s.close()
        except OSError:
            got.append("error")

    threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    idles = []
    for i in range(idle):
        try:
            idles.append(connect(srv.port, src=f"127.1.{i // 250}.{1 + i % 250}"))
        except OSError:
            pass
    lat = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        lat.append(health_latency(srv.port))
        time.sleep(0.25)
    stop.set()
    for t in threads:
        t.join(5)
    idle_status = []
    for s in idles:
        idle_status.append(status(read_response(s, 10)))
        s.close()
    ok = [x for x in lat if x is not None]
    report(f"{n} slow + {idle} idle clients", health_ok=f"{len(ok)}/{len(lat)}",
           health_max_s=round(max(ok), 3) if ok else None,
           slow_got=sorted({str(x) for x in got}), idle_got=sorted({str(x) for x in idle_status}))
    srv.stop()


def cross_site():
    d = tempfile.mkdtemp()
    srv = Server(["--contexts-dir", d])
    ctx = json.dumps({"text": "Once upon a time there was a cat."}).encode()
    r1 = exchange(srv.port, b"GET /v1/models HTTP/1.1\r\nHost: evil.example:8080\r\nConnection: close\r\n\r\n")
    r2 = exchange(srv.port, b"POST /v1/contexts HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n"
                  b"Content-Type: text/plain\r\nContent-Length: " + str(len(ctx)).encode() + b"\r\nConnection: close\r\n\r\n" + ctx)
    r3 = exchange(srv.port, post("/v1/contexts", ctx, ctype="text/plain"))
    report("foreign Host / Origin / text/plain", host=status(r1), origin=status(r2), text_plain=status(r3),
           contexts_persisted=len(os.listdir(d)))
    srv.stop()
    shutil.rmtree(d, ignore_errors=True)


def huge_prompt(mb=7.9):
    srv = Server(["--max-body-mib", "8"])
    text = ("Once upon a time, there was a little girl named Lily. " * 200000)[: int(mb * 1e6)]
    rss0 = srv.rss()
    peak = PeakRss(srv, 0.05)
    t0 = time.time()
    r = exchange(srv.port, post("/v1/completions", {"prompt": text, "max_tokens": 4}), timeout=120)
    peak_kib = peak.stop()
    report(f"{mb} MB prompt", status=status(r), code=(body_json(r) or {}).get("error", {}).get("code"),
           seconds=round(time.time() - t0, 2), rss_growth_mib=round((peak_kib - rss0) / 1024, 1))
    srv.stop()


def taken_port():
    a = Server([])
    try:
        b = Server([], port=a.port)
        report("second server, same port", started=True)
        b.stop()
    except RuntimeError as e:
        report("second server, same port", started=False, said=e.args[0].strip().splitlines()[-1][-90:])
    a.stop()


def sigterm_stream():
    srv = Server(["--step-delay-ms", "20"] + ([] if ARGS.legacy else ["--shutdown-grace", "2"]))
    s = connect(srv.port)
    s.sendall(post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2000, "stream": True, "ignore_eos": True}))
    s.settimeout(5)
    data = s.recv(65536)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    code = srv.proc.wait(60)
    report("SIGTERM during a stream", error_event=b'"error"' in data, done=b"[DONE]" in data,
           exit_code=code, exit_s=round(time.time() - t0, 2))


def kill9_persist(rounds=10):
    d = tempfile.mkdtemp()
    text = "Once upon a time, there was a little girl named Lily. " * 60
    made, killed_during = 0, 0
    for i in range(rounds):
        srv = Server(["--contexts-dir", d, "--max-prompt-tokens", "8192"])
        # create contexts in a loop and kill -9 at a random moment
        stop_at = time.time() + 0.2 + 0.1 * (i % 5)
        while time.time() < stop_at:
            try:
                r = exchange(srv.port, post("/v1/contexts", {"text": text}), timeout=10)
                made += status(r) == 200
            except OSError:
                break
        t = threading.Thread(target=lambda: exchange(srv.port, post("/v1/contexts", {"text": text}), timeout=10),
                             daemon=True)
        t.start()
        time.sleep(0.01 * (i % 4))
        srv.proc.kill()
        srv.proc.wait()
        killed_during += 1
    srv = Server(["--contexts-dir", d])
    listed = body_json(exchange(srv.port, b"GET /v1/contexts?limit=100 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
    n_listed = len(listed["data"]) if listed else None
    files = [f for f in os.listdir(d) if f.endswith(".kvc")]
    tmp = [f for f in os.listdir(d) if not f.endswith(".kvc")]
    warnings = srv.err.count("warning")
    ask_ok = 0
    for c in (listed or {}).get("data", [])[:5]:
        r = exchange(srv.port, post("/v1/completions", {"context_id": c["id"], "prompt": " Then", "max_tokens": 4}))
        ask_ok += status(r) == 200
    report("kill -9 while persisting", rounds=rounds, created_200=made, kvc_files=len(files), listed=n_listed,
           stray_files=len(tmp), restart_warnings=warnings, questions_ok=f"{ask_ok}/5")
    srv.stop()
    shutil.rmtree(d, ignore_errors=True)


def malformed():
    srv = Server([])
    cases = {
        "garbage line": b"HELLO\r\n\r\n",
        "no version": b"GET /health\r\n\r\n",
        "header no colon": b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nBroken header\r\n\r\n",
        "NUL in path": b"GET /v1/mod\x00els HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "absolute URI": b"GET http://127.0.0.1/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "10k headers": b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: b\r\n" * 10000 + b"\r\n",
        "Expect 100 over limit": b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 b"Expect: 100-continue\r\nContent-Length: 99999999\r\n\r\n",
        "bad chunk size": b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "HTTP/1.0 no Host": b"GET /v1/models HTTP/1.0\r\n\r\n",
        "pipelined x3": (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2 +
                         b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        "DELETE without length": b"DELETE /v1/contexts/ctx_x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    }
    out = {}
    for name, raw in cases.items():
        t0 = time.time()
        s = connect(srv.port)
        s.sendall(raw)
        data = b""
        s.settimeout(10)
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
                if name != "pipelined x3" and status(data) and read_complete(data):
                    break
        except OSError:
            pass
        s.close()
        codes = [int(c) for c in re.findall(rb"HTTP/1\.1 (\d{3})", data)]
        out[name] = f"{codes} {time.time() - t0:.2f}s"
    for k, v in out.items():
        report("malformed: " + k, got=v)
    report("malformed: server alive", health=health_latency(srv.port) is not None)
    srv.stop()


def read_complete(data):
    h = data.find(b"\r\n\r\n")
    if h < 0:
        return False
    m = re.search(rb"\r\ncontent-length:\s*(\d+)", data[:h].lower())
    return bool(m) and len(data) >= h + 4 + int(m.group(1))


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def one_address_phase(srv, n, duration):
    """`n` idle connections from 127.0.0.1 (the loopback deployment, or everything behind one proxy:
    one address), reopened when the server closes them, while /health is probed from that same
    address every 0.5 s: past the per-client cap /health must still answer."""
    stop = threading.Event()
    conns = []

    def hold():
        while not stop.is_set():
            try:
                s = connect(srv.port, timeout=2)
            except OSError:
                time.sleep(0.05)
                continue
            conns.append(s)
            try:
                s.recv(4096)  # the server's 503 / 408, or its close: open another
            except OSError:
                pass
            s.close()
            time.sleep(0.2)  # idle clients, not a connect flood

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    time.sleep(1)
    health = []
    t0 = time.time()
    while time.time() - t0 < duration:
        health.append(health_latency(srv.port))
        time.sleep(0.5)
    stop.set()
    for c in list(conns):
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for t in threads:
        t.join(10)
    ok = [h for h in health if h is not None]
    return {"idle_connections": n, "health_ok": f"{len(ok)}/{len(health)}",
            "health_max_s": round(max(ok), 3) if ok else None, "all_ok": len(ok) == len(health) and bool(health)}


def siege(slow_n=100, normal_n=32, seconds=60, quiet_s=20):
    """Issue 23's bounded adversarial benchmark: `normal_n` clients asking completions in a loop,
    alone (quiet) and then beside `slow_n` clients that each trickle a request's headers one byte
    a second from their own address (reconnecting when the server drops them) for `seconds`.
    Reports the normal clients' latency percentiles in both phases, their errors, the server's
    peak RSS and /health; with --check, fails unless the attacked p99 is within 2x of the quiet
    one, no normal request failed and the peak RSS is under --rss-bound-mib. A last phase holds
    --one-address-connections idle connections from the probes' own address: /health must answer
    every probe."""
    srv = Server(ARGS.serve_args.split() if ARGS.serve_args else [])
    body = {"prompt": "Once upon a time", "max_tokens": ARGS.max_tokens, "temperature": 0, "ignore_eos": True}
    raw = post("/v1/completions", body)
    peak = PeakRss(srv, 0.1)

    def phase(duration, attackers):
        stop = threading.Event()
        lat, errors, slow_events = [], [], []

        def normal():
            while not stop.is_set():
                t0 = time.time()
                try:
                    st = status(exchange(srv.port, raw, timeout=60))
                except OSError as e:
                    st = repr(e)[:60]
                if st == 200:
                    lat.append(time.time() - t0)
                else:
                    errors.append(st)

        def slow(i):
            req = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 10000
            while not stop.is_set():
                try:
                    s = connect(srv.port, src=f"127.0.{2 + i // 250}.{1 + i % 250}")
                    s.settimeout(1)
                    k = 0
                    while not stop.is_set():
                        s.sendall(req[k:k + 1])
                        k = (k + 1) % len(req)
                        try:
                            d = s.recv(4096)
                            slow_events.append(status(d))  # answered (408) or closed: come back
                            break
                        except socket.timeout:
                            pass
                    s.close()
                except OSError as e:
                    slow_events.append(type(e).__name__)
                    time.sleep(1)

        threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(attackers)]
        threads += [threading.Thread(target=normal, daemon=True) for _ in range(normal_n)]
        for t in threads:
            t.start()
        health = []
        t0 = time.time()
        while time.time() - t0 < duration:
            health.append(health_latency(srv.port))
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(70)
        ok = [h for h in health if h is not None]
        return {"requests": len(lat), "errors": len(errors), "error_kinds": sorted({str(e) for e in errors}),
                "p50_s": round(percentile(lat, 0.5), 3) if lat else None,
                "p99_s": round(percentile(lat, 0.99), 3) if lat else None,
                "health_ok": f"{len(ok)}/{len(health)}", "health_max_s": round(max(ok), 3) if ok else None,
                "slow_got": sorted({str(x) for x in slow_events})}

    rss0 = srv.rss()
    quiet = phase(quiet_s, 0)
    report(f"siege: quiet, {normal_n} clients, {quiet_s} s", **quiet)
    attacked = phase(seconds, slow_n)
    report(f"siege: +{slow_n} slow clients, {seconds} s", **attacked)
    one = one_address_phase(srv, ARGS.one_address_connections, ARGS.one_address_seconds)
    report(f"siege: {ARGS.one_address_connections} idle from one address", **one)
    peak_mib = round(peak.stop() / 1024, 1)
    report("siege: server", rss_start_mib=round(rss0 / 1024, 1), rss_peak_mib=peak_mib,
           p99_ratio=round(attacked["p99_s"] / quiet["p99_s"], 2) if quiet["p99_s"] and attacked["p99_s"] else None)
    srv.stop()
    if ARGS.check:
        bad = []
        if not quiet["p99_s"] or not attacked["p99_s"]:
            bad.append("no request answered")
        elif attacked["p99_s"] > 2 * quiet["p99_s"]:
            bad.append(f"p99 {attacked['p99_s']} s under attack > 2x the quiet {quiet['p99_s']} s")
        if quiet["errors"] or attacked["errors"]:
            bad.append(f"normal requests failed: {quiet['error_kinds'] + attacked['error_kinds']}")
        if peak_mib > ARGS.rss_bound_mib:
            bad.append(f"peak RSS {peak_mib} MiB > {ARGS.rss_bound_mib} MiB")
        if attacked["health_max_s"] is None or attacked["health_max_s"] > 1.0:
            bad.append(f"/health slow or silent under attack: {attacked['health_ok']} max {attacked['health_max_s']} s")
        if not one["all_ok"] or one["health_max_s"] is None or one["health_max_s"] > 1.0:
            bad.append(f"/health failed from an address holding {one['idle_connections']} connections: "
                       f"{one['health_ok']} max {one['health_max_s']} s")
        if bad:
            raise SystemExit("siege FAILED: " + "; ".join(bad))
        print("siege passed", flush=True)


ATTACKS = {
    "chunked": chunked_body, "content_length": content_length_lies, "slow": slow_clients, "cross_site": cross_site,
    "prompt": huge_prompt, "port": taken_port, "sigterm": sigterm_stream, "kill9": kill9_persist,
    "malformed": malformed,
    "siege": lambda: siege(ARGS.slow_clients, ARGS.normal_clients, ARGS.seconds, ARGS.quiet_seconds),
}


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default="build/tools/kvshrink")
    p.add_argument("--model", required=True)
    p.add_argument("--only", default=",".join(ATTACKS))
    p.add_argument("--legacy", action="store_true", help="a binary without the issue-23 options (--shutdown-grace)")
    p.add_argument("--check", action="store_true", help="siege: exit non-zero unless its bounds hold (ctest -L slow)")
    p.add_argument("--seconds", type=int, default=60, help="siege: length of the attacked phase")
    p.add_argument("--quiet-seconds", type=int, default=20, help="siege: length of the quiet phase")
    p.add_argument("--slow-clients", type=int, default=100)
    p.add_argument("--normal-clients", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=32, help="siege: tokens each normal request generates")
    p.add_argument("--rss-bound-mib", type=float, default=256, help="siege: the server's peak RSS bound")
    p.add_argument("--serve-args", default="", help="siege: extra `kvshrink serve` flags")
    p.add_argument("--one-address-connections", type=int, default=300,
                   help="siege: idle connections held from the probes' address in the last phase")
    p.add_argument("--one-address-seconds", type=int, default=10, help="siege: length of the one-address phase")
    ARGS = p.parse_args()
    for name in ARGS.only.split(","):
        try:
            ATTACKS[name]()
        except Exception as e:  # an attack that breaks the tool must not hide the others
            report(name, failed=repr(e)[:200])


if __name__ == "__main__":
    main()
