#!/usr/bin/env python3
"""examples/servers/mongo_ycsb.py — a YCSB-style workload A client for mongod
(used by mongod.sh): 50% reads, 50% updates of one field, scrambled zipfian
key popularity, N client threads each with its own connection.

    mongo_ycsb.py load --port P --records N
    mongo_ycsb.py run  --port P --records N --threads T --time S [--warmup S] [--read-pct 50]

Prints one line: `mongo_ycsb ok ops=.. ops_per_s=.. p95_us=.. read_p95_us=..
update_p95_us=.. errors=..`. Needs pymongo (Debian: python3-pymongo)."""
import argparse
import random
import sys
import threading
import time

try:
    import pymongo
except ImportError:
    print("mongo_ycsb: pymongo is not installed (Debian package python3-pymongo)", file=sys.stderr)
    sys.exit(77)

FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv64(v):
    h = FNV_OFFSET
    for _ in range(8):
        h ^= v & 0xFF
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        v >>= 8
    return h


class Zipf:
    """YCSB's ZipfianGenerator (Gray et al.), scrambled by FNV-1a 64 as YCSB's ScrambledZipfianGenerator."""

    def __init__(self, n, theta=0.99):
        self.n, self.theta = n, theta
        self.zetan = sum(1.0 / (i ** theta) for i in range(1, n + 1))
        zeta2 = 1.0 + 1.0 / (2 ** theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.eta = (1 - (2.0 / n) ** (1 - theta)) / (1 - zeta2 / self.zetan)

    def next(self, rnd):
        u = rnd.random()
        uz = u * self.zetan
        if uz < 1.0:
            rank = 0
        elif uz < 1.0 + 0.5 ** self.theta:
            rank = 1
        else:
            rank = min(self.n - 1, int(self.n * (self.eta * u - self.eta + 1) ** self.alpha))
        return fnv64(rank) % self.n


def key(k):
    return "user%012d" % k


def field():
    return "x" * 100


def coll(port):
    c = pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=30000)
    return c.ycsb.usertable


def load(a):
    col = coll(a.port)
    col.drop()
    batch = []
    for k in range(a.records):
        doc = {"_id": key(k)}
        doc.update({f"field{i}": field() for i in range(10)})
        batch.append(doc)
        if len(batch) == 1000:
            col.insert_many(batch, ordered=False)
            batch = []
    if batch:
        col.insert_many(batch, ordered=False)
    print(f"mongo_ycsb loaded records={a.records}")


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def run(a):
    zipf = Zipf(a.records)
    phase = [0]
    results = []
    lock = threading.Lock()

    def worker(i):
        col = coll(a.port)
        rnd = random.Random(i * 7919 + int(time.time()))
        rl, ul, errors = [], [], 0
        while phase[0] != 2:
            k = key(zipf.next(rnd))
            t0 = time.perf_counter()
            try:
                if rnd.randrange(100) < a.read_pct:
                    ok = col.find_one({"_id": k}) is not None
                    is_read = True
                else:
                    ok = col.update_one({"_id": k}, {"$set": {f"field{rnd.randrange(10)}": field()}}).matched_count == 1
                    is_read = False
            except pymongo.errors.PyMongoError:
                ok, is_read = False, True
            dt = (time.perf_counter() - t0) * 1e6
            if not ok:
                errors += 1
            elif phase[0] == 1:
                (rl if is_read else ul).append(dt)
        with lock:
            results.append((rl, ul, errors))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
    for t in threads:
        t.start()
    time.sleep(a.warmup)
    phase[0] = 1
    t0 = time.perf_counter()
    time.sleep(a.time)
    phase[0] = 2
    secs = time.perf_counter() - t0
    for t in threads:
        t.join()
    rl = [x for r, _, _ in results for x in r]
    ul = [x for _, u, _ in results for x in u]
    errors = sum(e for _, _, e in results)
    ops = len(rl) + len(ul)
    print(f"mongo_ycsb {'ok' if not errors else 'FAIL'} threads={a.threads} records={a.records} ops={ops} "
          f"ops_per_s={ops / secs:.0f} p95_us={pct(rl + ul, 0.95):.0f} read_p95_us={pct(rl, 0.95):.0f} "
          f"update_p95_us={pct(ul, 0.95):.0f} errors={errors}")
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["load", "run"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--time", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--read-pct", type=int, default=50)
    a = ap.parse_args()
    return load(a) or 0 if a.mode == "load" else run(a)


if __name__ == "__main__":
    sys.exit(main())
