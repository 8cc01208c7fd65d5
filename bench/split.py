#!/usr/bin/python3
"""What splitting a model across K model workers buys (Project Adam §3.2): K split_worker
processes train one replica, trading boundary activations and errors over gRPC streams.

  1. Largest model: with every worker's memory capped (RLIMIT_DATA, --limit-mib), a wide MLP
     (784-H-H-10, relu) grown by --grow until a step no longer fits; the largest H that trains
     for K = 1, 2, 4 (a short run whose loss must stay finite).
  2. Throughput: images/s of one model every K fits (784-1024-1024-10 by default), per K, at
     batch 1 (Adam's per-image steps: every image crosses each boundary) and batch 32.
  3. Accuracy: Fashion-MNIST (the demo's model and data) unsplit and split 2 ways, test accuracy
     after --epochs epochs on --images training images; two unsplit runs give the run-to-run
     spread (one lane each: both are the same sequence of steps, so they agree to the digit).

Writes build/bench/split.json.

  bench/split.py [--build build] [--limit-mib 512] [--grow 1.25] [--workers 1,2,4]
                 [--fit-units 1024] [--threads 1[,2...]] [--images 20000] [--epochs 2] [--skip-largest]
                 [--skip-accuracy]
"""
import argparse, json, os, resource, socket, subprocess, sys

import machine  # bench/ is the script's folder, first on sys.path


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run(worker_bin, k, args, limit_mib=None, timeout=900):
    """K workers of one replica; their JSON lines, or None when any failed."""
    addrs = ",".join("127.0.0.1:%d" % p for p in free_ports(k))

    def cap():
        if limit_mib:
            b = limit_mib << 20
            resource.setrlimit(resource.RLIMIT_DATA, (b, b))

    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([worker_bin, "--workers", str(k), "--worker", str(w),
                               "--addresses", addrs] + args,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=cap, env=env) for w in range(k)]
    outs, ok = [], True
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if p.returncode != 0:
            ok = False
            if limit_mib is None:
                print(err, file=sys.stderr)
            for q in procs:  # a peer of a failed worker waits for it: stop them all
                if q.poll() is None:
                    q.kill()
        else:
            outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs if ok else None


def largest(worker_bin, k, limit, grow, steps):
    """The largest H whose 784-H-H-10 MLP trains under the cap, split k ways."""
    h, best = 256, None
    while True:
        r = run(worker_bin, k, ["--mlp-units", str(h), "--images", str(steps), "--lr", "0.001"],
                limit_mib=limit, timeout=600)
        fits = r is not None and all(x["loss"] == x["loss"] and x["loss"] < 1e3 for x in r)
        print("split: K=%d H=%d %s" % (k, h, "trains" if fits else "does not fit"),
              file=sys.stderr, flush=True)
        if not fits:
            return best
        best = {"units": h, "params": r[0]["params"],
                "max_rss_mib": max(x["max_rss_mib"] for x in r)}
        h = int(h * grow)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--limit-mib", type=int, default=512)
    ap.add_argument("--grow", type=float, default=1.25)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--fit-units", type=int, default=1024)
    ap.add_argument("--fit-images", type=int, default=3000)
    ap.add_argument("--threads", default="1", help="Hogwild lanes per worker: a list measures each")
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--manifest", default="examples/fashion-mnist.yaml")
    ap.add_argument("--skip-largest", action="store_true")
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    worker_bin = os.path.join(args.build, "bench", "split_worker")
    ks = [int(x) for x in args.workers.split(",")]
    result = {"limit_mib": args.limit_mib, "largest": {}, "throughput": [], "accuracy": []}

    print("%-3s %12s %14s %14s" % ("K", "largest H", "parameters", "peak RSS MiB"))
    for k in ([] if args.skip_largest else ks):
        b = largest(worker_bin, k, args.limit_mib, args.grow, 50)
        result["largest"][str(k)] = b
        print("%-3d %12s %14s %14s" % (k, b and b["units"], b and b["params"],
                                        b and "%.0f" % b["max_rss_mib"]), flush=True)

    print("\n%-3s %6s %6s %12s %10s" % ("K", "lanes", "batch", "images/s", "vs K=1"))
    for lanes in [int(x) for x in args.threads.split(",")]:
        for batch in (1, 32):
            base = None
            for k in ks:
                r = run(worker_bin, k, ["--mlp-units", str(args.fit_units), "--batch", str(batch),
                                        "--images", str(args.fit_images), "--lr", "0.001",
                                        "--threads", str(lanes)])
                ips = r[0]["images_per_s"] if r else 0
                base = base or ips
                result["throughput"].append({"workers": k, "lanes": lanes, "batch": batch,
                                             "units": args.fit_units, "images_per_s": ips})
                print("%-3d %6d %6d %12.0f %9.2fx" % (k, lanes, batch, ips,
                                                      ips / base if base else 0), flush=True)

    if not args.skip_accuracy:
        print("\n%-12s %10s %10s" % ("run", "accuracy", "images/s"))
        for name, k in (("unsplit", 1), ("unsplit", 1), ("split 2", 2)):
            r = run(worker_bin, k, ["--manifest", args.manifest, "--images", str(args.images),
                                    "--epochs", str(args.epochs), "--lr", "0.005"])
            acc = r[0]["accuracy"] if r else None
            result["accuracy"].append({"workers": k, "accuracy": acc,
                                       "images_per_s": r and r[0]["images_per_s"]})
            print("%-12s %9.2f%% %10.0f" % (name, 100 * acc, r[0]["images_per_s"]), flush=True)

    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    with open(os.path.join(args.build, "bench", "split.json"), "w") as f:
        json.dump(dict(result, machine=machine.describe()), f, indent=1)


if __name__ == "__main__":
    main()
