#!/usr/bin/python3
"""adam run's run-to-run spread: the same manifest trained --runs times, trainer 0's test accuracy
after every epoch (the summary's `history`), per epoch the lowest, median and highest. The floors
`make multihost` holds its jobs to (tests/multihost/jobs_test.go) come from these runs.

  bench/spread.py [--build build] [--runs 8] [--epochs 5] MANIFEST...

Writes build/bench/spread.json (every run's history and the table).
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time


def with_epochs(manifest, epochs, tmp):
    """The manifest with spec.training.epochs replaced (the examples have one such line)."""
    text = open(manifest).read()
    out, n = re.subn(r"(?m)^(\s+epochs:\s*)\d+", lambda m: m.group(1) + str(epochs), text, count=1)
    if n != 1:
        sys.exit("%s: no `epochs:` line to set" % manifest)
    path = os.path.join(tmp, os.path.basename(manifest))
    with open(path, "w") as f:
        f.write(out)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("manifests", nargs="+")
    a = ap.parse_args()
    adam = os.path.join(a.build, "adam")
    report = {"epochs": a.epochs, "runs": a.runs, "jobs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for manifest in a.manifests:
            job = with_epochs(manifest, a.epochs, tmp)
            name = os.path.splitext(os.path.basename(manifest))[0]
            runs = []
            for i in range(a.runs):
                t0 = time.time()
                p = subprocess.run([adam, "run", job, "--output", "json", "-q"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0:
                    sys.exit("%s run %d failed (exit %d):\n%s" % (name, i + 1, p.returncode,
                                                                  p.stderr[-4000:]))
                s = json.loads(p.stdout)
                accs = [e.get("test_accuracy") for e in s["history"]]
                runs.append({"history": s["history"], "images": s["images"],
                             "test_accuracy": s["test_accuracy"], "wall_seconds": s["wall_seconds"]})
                print("%s run %d/%d: %s; %d images, %.0f s" % (
                    name, i + 1, a.runs, " ".join("%.2f" % (100 * x) for x in accs),
                    s["images"], time.time() - t0), file=sys.stderr, flush=True)
            table = []
            for e in range(a.epochs):
                accs = [r["history"][e]["test_accuracy"] for r in runs if len(r["history"]) > e]
                table.append({"epoch": e + 1, "lowest": min(accs),
                              "median": statistics.median(accs), "highest": max(accs)})
            report["jobs"][name] = {"runs": runs, "per_epoch": table}
            print("\n%s, %d runs of %d epochs: test accuracy per epoch" % (name, a.runs, a.epochs))
            print("| epoch | lowest | median | highest |\n| --- | --- | --- | --- |")
            for row in table:
                print("| %d | %.2f%% | %.2f%% | %.2f%% |" % (row["epoch"], 100 * row["lowest"],
                                                         100 * row["median"], 100 * row["highest"]))
    os.makedirs(os.path.join(a.build, "bench"), exist_ok=True)
    with open(os.path.join(a.build, "bench", "spread.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
