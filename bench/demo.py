#!/usr/bin/python3
"""Runs `make demo`'s job (examples/fashion-mnist.yaml) once with `adam run -o json` and records
what the README quotes: test accuracy, epochs, wall time and images/s, with the machine it ran on.
Writes docs/bench/demo.json (or --out); its "readme" line is what README.md must say, word for
word (the docs test checks it).

  bench/demo.py [--build build] [--out docs/bench/demo.json]
"""
import argparse, json, os, subprocess, sys, time

import machine  # bench/ is the script's folder, first on sys.path


def minutes(seconds):
    s = int(round(seconds))
    return "%d min %d s" % (s // 60, s % 60) if s >= 60 else "%d s" % s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--job", default="examples/fashion-mnist.yaml")
    ap.add_argument("--out", default="docs/bench/demo.json")
    a = ap.parse_args()
    m = machine.describe()
    print("machine:", machine.line(m), flush=True)
    cmd = [os.path.join(a.build, "adam"), "run", a.job, "--quiet", "-o", "json",
           "--model-out", os.path.join(a.build, "fashion-mnist.onnx")]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    # stderr (the per-epoch lines) streams through; stdout is the summary object.
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit("adam run exited %d" % out.returncode)
    summary = json.loads(out.stdout)
    record = {
        "machine": m,
        "command": "make demo (" + " ".join(cmd[1:4]) + ")",
        "test_accuracy": summary["test_accuracy"],
        "epochs": summary["epochs"],
        "wall_seconds": round(wall, 1),
        "images_per_second": round(summary["images_per_second"]),
    }
    record["readme"] = ("On one %s (%d cores, %s%s), commit %s, %s: **%.2f%%** test accuracy "
                        "after %d epochs in **%s** (%s images/s, data loading included)." % (
                            m["cpu"], m["cores"], m["isa"],
                            ", a virtual machine" if m["virtual"] else "", m["commit"], m["date"],
                            100 * record["test_accuracy"], record["epochs"], minutes(wall),
                            format(record["images_per_second"], ",")))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(record["readme"])


if __name__ == "__main__":
    main()
