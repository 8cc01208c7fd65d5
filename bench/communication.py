#!/usr/bin/python3
"""What spec.training.communication buys: `adam run` of one manifest under each setting of the
significantly-modified filter, half precision and zstd, against the same job without them in the
same run. Prints a table (bytes per image each way, images/s, test accuracy, each beside its
baseline's) and writes build/bench/communication.json.

  bench/communication.py [--build build] [--job examples/fashion-mnist.yaml] [--epochs N]
"""
import argparse, json, os, re, subprocess, sys, tempfile

import machine  # bench/ is the script's folder, first on sys.path

# (name, training fields added, the baseline it is compared with)
SETTINGS = [
    ("plain", "", None),
    ("float16", "communication: {values: float16}", "plain"),
    ("zstd", "communication: {compress: zstd}", "plain"),
    ("float16+zstd", "communication: {values: float16, compress: zstd}", "plain"),
    ("weights", "denseUpdates: weights", None),
    ("weights, filter 0.001", "denseUpdates: weights, communication: {filter: 0.001}", "weights"),
    ("weights, filter 0.003", "denseUpdates: weights, communication: {filter: 0.003}", "weights"),
    ("weights, filter 0.01", "denseUpdates: weights, communication: {filter: 0.01}", "weights"),
    ("weights, filter 0.003, float16+zstd",
     "denseUpdates: weights, communication: {filter: 0.003, values: float16, compress: zstd}",
     "weights"),
]


def manifest(base, fields, epochs):
    text = base
    if epochs:
        text = re.sub(r"(\n    epochs:) \d+", r"\1 %d" % epochs, text, count=1)
    if fields:
        # Each setting goes in as its own lines under spec.training.
        lines = "".join("\n    " + f.strip() for f in split_fields(fields))
        text = re.sub(r"(\n  training:)", r"\1" + lines, text, count=1)
    return text


def split_fields(fields):
    """'a: 1, b: {c: 2, d: 3}' -> ['a: 1', 'b: {c: 2, d: 3}'] (commas inside braces kept)."""
    out, depth, cur = [], 0, ""
    for ch in fields:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def run(adam, path):
    p = subprocess.run([adam, "run", path, "--output", "json", "-q"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise SystemExit("adam run %s failed (%d):\n%s" % (path, p.returncode, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--job", default="examples/fashion-mnist.yaml")
    ap.add_argument("--epochs", type=int, default=0, help="override the manifest's epochs")
    ap.add_argument("--only", default="", help="comma-separated setting names")
    args = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    adam = os.path.join(args.build, "adam")
    base = open(args.job).read()
    settings = [s for s in SETTINGS if not args.only or s[0] in args.only.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, fields, _) in enumerate(settings):
            path = os.path.join(tmp, "job-%d.yaml" % i)
            with open(path, "w") as f:
                f.write(manifest(base, fields, args.epochs))
            print("communication: %s ..." % name, file=sys.stderr, flush=True)
            r = run(adam, path)
            results[name] = {
                "fields": fields,
                "push_bytes_per_image": r.get("push_bytes_per_image", 0),
                "pull_bytes_per_image": r.get("pull_bytes_per_image", 0),
                "images_per_second": r["images_per_second"],
                "test_accuracy": r["test_accuracy"],
            }
    print("%-38s %10s %10s %8s %9s %6s %9s %7s" %
          ("setting", "push B/img", "pull B/img", "bytes", "img/s", "ratio", "accuracy", "delta"))
    for name, fields, against in settings:
        r = results[name]
        b = results.get(against) if against else None
        total = r["push_bytes_per_image"] + r["pull_bytes_per_image"]
        if b:
            b_total = b["push_bytes_per_image"] + b["pull_bytes_per_image"]
            ratio_bytes = "%.3f" % (total / b_total) if b_total else "-"
            ratio_ips = "%.2f" % (r["images_per_second"] / b["images_per_second"])
            delta = "%+.2f" % (100 * (r["test_accuracy"] - b["test_accuracy"]))
        else:
            ratio_bytes, ratio_ips, delta = "1", "1", "-"
        r["bytes_vs_baseline"], r["images_per_second_vs_baseline"] = ratio_bytes, ratio_ips
        r["accuracy_points_vs_baseline"] = delta
        print("%-38s %10.0f %10.0f %8s %9.0f %6s %8.2f%% %7s" %
              (name, r["push_bytes_per_image"], r["pull_bytes_per_image"], ratio_bytes,
               r["images_per_second"], ratio_ips, 100 * r["test_accuracy"], delta))
    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    with open(os.path.join(args.build, "bench", "communication.json"), "w") as f:
        json.dump({"machine": machine.describe(), "job": args.job, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
