#!/usr/bin/env python3
"""Issue 24's scale-out benchmark: contexts and questions from many clients through the balancer,
one replica vs several (scripts/cluster: Redis + N replicas + nginx on loopback).

For each replica count: C contexts are created through the balancer (the time of each is the cost
of recreating a context), then K client threads ask questions about random contexts for S seconds.
Reported: aggregate questions/s and generated tokens/s, latency p50/p99, errors, and the share of
questions answered by a replica that held the context in memory (1 - loads from Redis / questions,
from the replicas' /metrics). Last, a fresh replica joins the same Redis and each context is asked
twice: the difference of the two latencies is the time to load the context from Redis, set
against the time it took to create it.

  cluster_bench.py --bin build/tools/kvshrink --model M.gguf [--replicas 1,2] [--contexts 16]
                   [--context-tokens 1024] [--clients 32] [--seconds 60] [--resident-mib 0]
                   [--routing hash|random] [--json OUT] [--check]
With 2 cores, replicas share the CPU: each replica gets 2/N threads (-t), so the comparison is of
the same machine split, not of added machines. Standard library only."""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cluster_test import ROOT, free_base_port  # noqa: E402


def call(port, method, path, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # connection reset, timeout
        return 0, str(e)


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def run_config(a, n_rep, d):
    base = free_base_port(3 + n_rep)
    cluster = [os.path.join(ROOT, "scripts", "cluster")]
    threads = max(1, 2 // n_rep)
    serve = ["-t", str(threads), "--parallel", "16", "--ctx-size", str(a.context_tokens + 256),
             "--max-prompt-tokens", str(a.context_tokens + 64)]
    if a.resident_mib:
        serve += ["--contexts-resident-mib", str(a.resident_mib)]
    subprocess.run(cluster + ["start", "-m", a.model, "--replicas", str(n_rep), "--port", str(base), "--dir", d,
                              "--bin", a.bin, "--"] + serve, check=True, stdout=subprocess.DEVNULL)
    lb = base
    reps = [base + 1 + i for i in range(1, n_rep + 1)]
    out = {"replicas": n_rep, "threads_per_replica": threads, "routing": a.routing}
    try:
        rng = random.Random(7)
        ids, create_s = [], []
        for i in range(a.contexts):
            toks = [rng.randrange(10, 500) for _ in range(a.context_tokens)]
            t = time.perf_counter()
            st, j = call(lb, "POST", "/v1/contexts", {"tokens": toks, "kv_compression": {"press": a.press, "keep": a.keep}})
            create_s.append(time.perf_counter() - t)
            assert st == 200, (st, j)
            ids.append(j["id"])
        out["context_kv_bytes_held"] = j["kv_bytes_held"]
        out["create_s_median"] = statistics.median(create_s)

        def scrape():
            s = {"loads": 0.0, "questions": 0.0}
            for p in reps:
                st, txt = call(p, "GET", "/metrics")
                if st == 200:
                    s["loads"] += metric(txt, "kvshrink_contexts_reloaded_total")
            return s

        before = scrape()
        lat, toks_out, errors = [], [0], [0]
        lock = threading.Lock()
        stop_at = time.perf_counter() + a.seconds

        def client(k):
            r = random.Random(1000 + k)
            while time.perf_counter() < stop_at:
                cid = r.choice(ids)
                prompt = [r.randrange(10, 500) for _ in range(8)]
                t = time.perf_counter()
                port = lb if a.routing == "hash" else r.choice(reps)  # random: a balancer without affinity
                st, j = call(port, "POST", "/v1/completions",
                             {"context_id": cid, "prompt": prompt, "max_tokens": a.max_tokens, "ignore_eos": True})
                dt = time.perf_counter() - t
                with lock:
                    if st == 200:
                        lat.append(dt)
                        toks_out[0] += j["usage"]["completion_tokens"]
                    else:
                        errors[0] += 1

        t0 = time.perf_counter()
        ths = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.perf_counter() - t0
        after = scrape()
        q = len(lat)
        loads = after["loads"] - before["loads"]
        out.update({"questions": q, "errors": errors[0], "wall_s": wall, "questions_per_s": q / wall,
                    "tokens_per_s": toks_out[0] / wall, "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
                    "loads_from_redis": loads, "resident_share": 1 - loads / q if q else float("nan")})

        if a.measure_load:
            # A fresh replica on the same Redis: first question loads, second finds it resident.
            port = base + 2 + n_rep
            fresh = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", str(port), "-t", "2",
                                      "--contexts-url", f"redis://127.0.0.1:{base + 1}", "--ctx-size",
                                      str(a.context_tokens + 256)], stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(d, "fresh.log"), "w"))
            try:
                for _ in range(600):
                    if call(port, "GET", "/health", timeout=2)[0] == 200:
                        break
                    time.sleep(0.1)
                load_s = []
                for cid in ids[: min(8, len(ids))]:
                    body = {"context_id": cid, "prompt": [11, 12], "max_tokens": 1}
                    t = time.perf_counter()
                    st, j = call(port, "POST", "/v1/completions", body)
                    assert st == 200, (st, j, open(os.path.join(d, "fresh.log")).read()[-2000:])
                    first = time.perf_counter() - t
                    t = time.perf_counter()
                    assert call(port, "POST", "/v1/completions", body)[0] == 200
                    load_s.append(first - (time.perf_counter() - t))
                out["load_from_redis_s_median"] = statistics.median(load_s)
            finally:
                fresh.terminate()
                fresh.wait()
    finally:
        subprocess.run(cluster + ["stop", "--dir", d], stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--contexts", type=int, default=16)
    ap.add_argument("--context-tokens", type=int, default=1024)
    ap.add_argument("--press", default="snapkv")
    ap.add_argument("--keep", type=float, default=0.25)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--resident-mib", type=float, default=0)
    ap.add_argument("--routing", choices=["hash", "random"], default="hash",
                    help="hash: through nginx (deploy/nginx.conf); random: each question to a random replica directly")
    ap.add_argument("--json", default="")
    ap.add_argument("--check", action="store_true", help="fail on any error or a resident share under 0.5 with 2+ replicas")
    a = ap.parse_args()
    results = []
    for n in [int(x) for x in a.replicas.split(",")]:
        d = tempfile.mkdtemp(prefix="kvs-cbench-")
        a.measure_load = n == int(a.replicas.split(",")[-1])
        try:
            r = run_config(a, n, d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n| replicas (threads each) | routing | questions/s | tokens/s | p50 s | p99 s | errors | answered where resident |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['replicas']} ({r['threads_per_replica']}) | {r['routing']} | {r['questions_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
              f"{r['p50_s']:.3f} | {r['p99_s']:.3f} | {r['errors']} | {100 * r['resident_share']:.1f}% |")
    last = results[-1]
    if "load_from_redis_s_median" in last:
        print(f"\ncontext ({last['context_kv_bytes_held']} KV bytes held): created in {last['create_s_median']:.3f} s "
              f"(median), loaded from Redis in {last['load_from_redis_s_median']:.4f} s")
    if a.json:
        json.dump({"args": vars(a), "results": results}, open(a.json, "w"), indent=1)
    if a.check:
        bad = [r for r in results if r["errors"] or (r["replicas"] > 1 and r["resident_share"] < 0.5)]
        print("PASS" if not bad else f"FAIL: {bad}")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
