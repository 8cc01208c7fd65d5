#!/usr/bin/python3
"""Time to accuracy, ours against PyTorch, in one run: each AdamJob with `adam run` (the whole
distributed stack: data server, parameter servers, trainers), then the same model, recipe and
trainer threads in PyTorch (`bench/torch_trainer.py --manifest`), given `--torch-factor` times
our wall time before it is stopped. Both clocks start when the process is launched, so data
loading and start-up count on both sides. Prints, per job, the seconds to each target accuracy
and the ratio, and writes build/bench/tta.json.

  bench/tta.py [--build build] [--jobs examples/fashion-mnist.yaml,...] [--targets 0.91,0.92,0.93,0.94]
"""
import argparse, json, os, re, subprocess, sys, threading, time

import yaml  # Debian's python3-yaml

import machine  # bench/ is the script's folder, first on sys.path

OURS_EPOCH = re.compile(r"^epoch\s+(\d+)/\d+\s+loss \S+\s+test acc\s+([\d.]+)%")
TORCH_EPOCH = re.compile(r"^torch tta: epoch (\d+) test accuracy ([\d.]+)")


def follow(cmd, pattern, scale, limit=None):
    """Runs `cmd`, reading its stderr as it comes; every line matching `pattern` (epoch, accuracy)
    becomes a point of the curve at the seconds since launch. Stops the process after `limit`
    seconds. Returns (curve, wall seconds, exit status, stdout)."""
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    curve = []
    stdout = []
    reader = threading.Thread(target=lambda: stdout.append(p.stdout.read()))
    reader.start()
    timer = None
    if limit:
        timer = threading.Timer(limit, p.kill)
        timer.start()
    for line in p.stderr:
        m = pattern.match(line)
        if m:
            point = {"epoch": int(m.group(1)), "accuracy": float(m.group(2)) / scale,
                     "seconds": round(time.monotonic() - t0, 1)}
            curve.append(point)
            print(f'  epoch {point["epoch"]:3d}  {100 * point["accuracy"]:6.2f}%  '
                  f'{point["seconds"]:7.1f} s', file=sys.stderr, flush=True)
    rc = p.wait()
    wall = time.monotonic() - t0
    if timer:
        timer.cancel()
    reader.join()
    return curve, wall, rc, "".join(stdout)


def first_at(curve, target):
    """Seconds at the first epoch whose test accuracy reached `target`, or None."""
    return next((c["seconds"] for c in curve if c["accuracy"] >= target), None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--jobs", default="examples/fashion-mnist.yaml,examples/fashion-mnist-best.yaml")
    ap.add_argument("--targets", default="0.91,0.92,0.93,0.94")
    ap.add_argument("--torch-factor", type=float, default=3,
                    help="PyTorch runs at least this many times our wall time before it is stopped")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    m = machine.describe()
    print("machine:", machine.line(m), flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    targets = [float(t) for t in a.targets.split(",")]
    results = []
    for job in a.jobs.split(","):
        with open(job) as f:
            manifest = yaml.safe_load(f)
        trainer = manifest["spec"].get("roles", {}).get("trainer", {})
        threads = trainer.get("replicas", 1) * trainer.get("threads", 1)
        ours, ours_wall, rc, out = follow(
            [os.path.join(a.build, "adam"), "run", job, "--quiet", "-o", "json"], OURS_EPOCH, 100)
        if rc != 0:
            raise SystemExit(f"adam run {job} exited {rc}")
        summary = json.loads(out)
        cap = a.torch_factor * ours_wall
        torch, torch_wall, trc, _ = follow(
            [sys.executable, os.path.join(here, "torch_trainer.py"), "--throughput", "0",
             "--threads", str(threads), "--data-dir", a.data_dir, "--manifest", job,
             "--tta", str(max(targets)), "--tta-seconds", str(cap)], TORCH_EPOCH, 1, limit=cap + 60)
        # Stopped at its limit (SIGKILL) is a result; any other failure is not a slow PyTorch.
        if trc not in (0, -9):
            raise SystemExit(f"PyTorch on {job} exited {trc} (its error is above; is {sys.executable}"
                             " the Python with Debian's python3-torch? make bench-tta installs it)")
        rows = []
        for t in targets:
            o, p = first_at(ours, t), first_at(torch, t)
            rows.append({"target": t, "ours_seconds": o, "torch_seconds": p,
                         "ratio": p / o if o and p else None})
        results.append({"job": job, "trainer_threads": threads, "ours_wall_seconds": round(ours_wall, 1),
                        "ours_final_accuracy": summary.get("test_accuracy"),
                        "ours_epochs": summary.get("epochs"), "torch_seconds_allowed": round(cap, 1),
                        "torch_wall_seconds": round(torch_wall, 1), "rows": rows,
                        "ours_curve": ours, "torch_curve": torch})
    print(f'\n{"job":<34} {"target":>6} {"ours":>9} {"PyTorch":>12} {"PyTorch / ours":>15}')
    for r in results:
        for row in r["rows"]:
            o = f'{row["ours_seconds"]:.0f} s' if row["ours_seconds"] else "not reached"
            if row["torch_seconds"]:
                p = f'{row["torch_seconds"]:.0f} s'
            else:
                p = f'> {r["torch_wall_seconds"]:.0f} s' if row["ours_seconds"] else "not reached"
            ratio = f'{row["ratio"]:.1f}x' if row["ratio"] else (
                f'> {r["torch_wall_seconds"] / row["ours_seconds"]:.1f}x'
                if row["ours_seconds"] and not row["torch_seconds"] else "")
            print(f'{os.path.basename(r["job"]):<34} {100 * row["target"]:5.0f}% {o:>9} {p:>12} {ratio:>15}')
        print(f'{"":<34} final: ours {100 * (r["ours_final_accuracy"] or 0):.2f}% after '
              f'{r["ours_epochs"]} epochs in {r["ours_wall_seconds"]:.0f} s; PyTorch '
              f'{r["trainer_threads"]} threads, stopped or done at {r["torch_wall_seconds"]:.0f} s')
    path = a.out or os.path.join(a.build, "bench", "tta.json")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump({"machine": m, "jobs": results}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
