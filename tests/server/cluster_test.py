#!/usr/bin/env python3
"""Two kvshrink replicas behind the committed nginx configuration, sharing contexts through a real
Redis (issue 24), all started by scripts/cluster on loopback ports:
  - requests about one context (its id in the path or in the JSON body) go to one replica, the
    same every time (consistent hash), and different contexts use both replicas;
  - plain requests are spread over both;
  - a context answers the same tokens through the balancer and directly from either replica;
  - the replica a context hashes to is killed: the balancer sends its questions to the other,
    which loads the context from Redis and answers the same tokens.
Usage: cluster_test.py --bin build/tools/kvshrink --model MODEL.gguf   (ctest: server.cluster)
Standard library only."""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big, red ball. She wanted to play with it, but it was too high.")


def free_base_port(n):
    """A port P with P..P+n-1 all free now."""
    for _ in range(200):
        p = random.randint(20000, 60000 - n)
        ok = True
        for q in range(p, p + n):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return p
    raise RuntimeError("no free port range")


def call(port, method, path, body=None):
    """(status, json, upstream header)"""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null"), r.headers.get("X-Kvshrink-Upstream", "")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode(errors="replace")[:500]  # nginx's own error page
        return e.code, body, e.headers.get("X-Kvshrink-Upstream", "")


def ask(port, cid):
    st, j, up = call(port, "POST", "/v1/completions",
                     {"context_id": cid, "prompt": " Then", "max_tokens": 10, "temperature": 0})
    assert st == 200, (st, j)
    return j["choices"][0]["text"], up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    for tool in ("redis-server", "nginx"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            print(f"FAIL: {tool} is not installed (scripts/setup installs it)")
            return 1
    d = tempfile.mkdtemp(prefix="kvs-cluster-")
    base = free_base_port(4)
    cluster = [os.path.join(ROOT, "scripts", "cluster")]
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    try:
        subprocess.run(cluster + ["start", "-m", args.model, "--replicas", "2", "--port", str(base), "--dir", d,
                                  "--bin", args.bin, "--", "-t", "1"], check=True)
        lb, r1, r2 = base, base + 2, base + 3
        replicas = {f"127.0.0.1:{r1}": r1, f"127.0.0.1:{r2}": r2}

        # Contexts made through the balancer; each one's questions stick to one replica.
        home = {}
        for i in range(16):
            st, j, _ = call(lb, "POST", "/v1/contexts",
                            {"text": STORY + f" Story {i}.", "kv_compression": {"press": "snapkv", "keep": 0.5}})
            assert st == 200, (st, j)
            cid = j["id"]
            ups = set()
            for _ in range(3):
                ups.add(ask(lb, cid)[1])
            ups.add(call(lb, "GET", f"/v1/contexts/{cid}")[2])
            check(len(ups) == 1, f"{cid}: questions and GET all routed to one replica ({sorted(ups)})")
            home[cid] = ups.pop()
        check(set(home.values()) == set(replicas), f"the 16 contexts use both replicas ({sorted(set(home.values()))})")

        plain = set()
        for _ in range(20):
            st, _, up = call(lb, "POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 2})
            assert st == 200
            plain.add(up)
        check(plain == set(replicas), f"plain requests spread over both replicas ({sorted(plain)})")

        # The same tokens through the balancer and from each replica directly.
        cid = next(iter(home))
        via_lb = ask(lb, cid)[0]
        check(all(ask(p, cid)[0] == via_lb for p in replicas.values()),
              "the same answer through the balancer and from either replica")
        lists = [sorted(c["id"] for c in call(p, "GET", "/v1/contexts?limit=100")[1]["data"]) for p in replicas.values()]
        check(lists[0] == lists[1] == sorted(home), "both replicas list the same 16 contexts")

        # The home replica of some context dies: its contexts are answered by the other one.
        victim_addr = home[cid]
        victim = 1 if replicas[victim_addr] == r1 else 2
        subprocess.run(cluster + ["kill-replica", str(victim), "--dir", d], check=True)
        text, up = ask(lb, cid)
        check(text == via_lb and victim_addr not in up.split(", ")[-1],
              f"after killing replica {victim}, its context answers the same through {up}")
        orphans = [c for c, h in home.items() if h == victim_addr]
        check(all(ask(lb, c)[1].split(", ")[-1] != victim_addr for c in orphans),
              f"all {len(orphans)} contexts of the dead replica answered by the other one")
    finally:
        subprocess.run(cluster + ["stop", "--dir", d])
        for log in ("nginx-error.log", "replica1.log", "replica2.log", "redis.log"):
            p = os.path.join(d, log)
            if failures and os.path.exists(p):
                print(f"--- {log} (tail)")
                print("".join(open(p, errors="replace").readlines()[-15:]))
        shutil.rmtree(d, ignore_errors=True)
    print("PASS" if not failures else f"FAILED: {len(failures)} checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
