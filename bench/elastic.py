#!/usr/bin/python3
"""Elastic parameter servers: `adam run` of the HA example (three copies of every shard) while
`adam scale` changes its server count at the start of given epochs, against the same job left
alone, in the same bench run. Prints, per resize, the copies moved against the ideal (the share
of the servers that joined or left), the seconds until the controller had every copy in place
and the primaries spread, and the primaries handed over; then images/s and test accuracy of the
two runs. Writes build/bench/elastic.json.

  bench/elastic.py [--build build] [--job examples/fashion-mnist-ha.yaml] [--epochs 5]
                   [--shard-bytes 16384] [--steps 4,5,3]
"""
import argparse, json, os, re, subprocess, sys, tempfile, threading

import machine  # bench/ is the script's folder, first on sys.path


def manifest(base, epochs, shard_bytes):
    text = re.sub(r"(\n    epochs:) \d+", r"\1 %d" % epochs, base, count=1)
    return re.sub(r"shardBytes: \d+", "shardBytes: %d" % shard_bytes, text, count=1)


def run(adam, path, state_dir=None, steps=()):
    """Runs the job; with steps, scales to steps[k] when epoch k+1 starts."""
    cmd = [adam, "run", path, "--output", "json", "-q"]
    if state_dir:
        cmd += ["--state-dir", state_dir]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []

    def follow():
        done = 0
        for line in p.stderr:
            err.append(line)
            m = re.match(r"epoch +(\d+)/", line)
            if m and done < len(steps) and int(m.group(1)) == done + 1:
                n = steps[done]
                done += 1
                print("elastic: after epoch %s: %d servers" % (m.group(1), n), file=sys.stderr,
                      flush=True)
                subprocess.run([adam, "scale", "--state-dir", state_dir,
                                "--parameter-servers", str(n)], check=True,
                               capture_output=True)

    t = threading.Thread(target=follow)
    t.start()
    out = p.stdout.read()
    p.wait()
    t.join()
    if p.returncode != 0:
        raise SystemExit("adam run failed (%d):\n%s" % (p.returncode, "".join(err[-40:])))
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--job", default="examples/fashion-mnist-ha.yaml")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--shard-bytes", type=int, default=16384)
    ap.add_argument("--steps", default="4,5,3", help="server counts, one per epoch from the 1st")
    args = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    adam = os.path.join(args.build, "adam")
    steps = [int(x) for x in args.steps.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.yaml")
        with open(path, "w") as f:
            f.write(manifest(open(args.job).read(), args.epochs, args.shard_bytes))
        print("elastic: the job left alone ...", file=sys.stderr, flush=True)
        alone = run(adam, path)
        print("elastic: the job resized %s ..." % args.steps, file=sys.stderr, flush=True)
        resized = run(adam, path, os.path.join(tmp, "state"), steps)
    rows = []
    print("%-8s %7s %7s %7s %7s %9s %9s" %
          ("servers", "copies", "moved", "ideal", "ratio", "handoffs", "seconds"))
    for r in resized.get("rebalances", []):
        a, b, copies = r["from"], r["servers"], r["copies"]
        # The ideal: a server that joins takes copies/b; one that leaves gives its copies/a.
        ideal = copies * abs(b - a) / max(a, b)
        row = dict(r, ideal=ideal, moved_vs_ideal=r["copies_moved"] / ideal if ideal else 0)
        rows.append(row)
        print("%-8s %7d %7d %7.1f %7.2f %9d %9.2f" %
              ("%d->%d" % (a, b), copies, r["copies_moved"], ideal, row["moved_vs_ideal"],
               r["handoffs"], r["seconds"]))
    if len(rows) != len(steps):
        print("elastic: %d of %d resizes reported a rebalance" % (len(rows), len(steps)),
              file=sys.stderr)
    ratio = resized["images_per_second"] / alone["images_per_second"]
    print("images/s: %.0f resized, %.0f left alone (%.2fx); test accuracy %.2f%% and %.2f%%" %
          (resized["images_per_second"], alone["images_per_second"], ratio,
           100 * resized["test_accuracy"], 100 * alone["test_accuracy"]))
    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    with open(os.path.join(args.build, "bench", "elastic.json"), "w") as f:
        json.dump({"machine": machine.describe(), "job": args.job, "shard_bytes": args.shard_bytes, "steps": steps,
                   "rebalances": rows, "resized": resized, "alone": alone,
                   "images_per_second_ratio": ratio}, f, indent=2)
    if len(rows) != len(steps):
        sys.exit(1)


if __name__ == "__main__":
    main()
