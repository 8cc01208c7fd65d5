#!/usr/bin/python3
"""Fault tolerance on the real job: runs examples/fashion-mnist-ha.yaml (three copies of every
shard, three controller members) with `adam run`: without faults, with `kill -9` of a parameter
server mid-training, and with `kill -9` of the controller leader (restarted 5 s later); then
without faults again with `acknowledge: applied` (a push answered once its primary applied it,
not once a quorum of copies holds it), interleaved with the default, for what quorum
acknowledgement costs in images/s. Prints a table and writes build/bench/failover.json.

  bench/failover.py [--build build] [--at 30]
"""
import argparse, json, os, subprocess, sys, tempfile, time

import machine  # bench/ is the script's folder, first on sys.path


def run(adam, job, extra):
    cmd = [adam, "run", job, "-q", "-o", "json"] + extra
    print("failover: " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit("failover: the run failed (exit %d)" % p.returncode)
    for line in p.stderr.splitlines():
        if line.startswith("adam run:") or line.startswith("epoch"):
            print("  " + line, file=sys.stderr)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    print("failover: %.0f s" % (time.time() - t0), file=sys.stderr, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--job", default="examples/fashion-mnist-ha.yaml")
    ap.add_argument("--at", type=float, default=30, help="seconds into training of each kill")
    ap.add_argument("--pairs", type=int, default=2,
                    help="runs of acknowledge: applied and of the default, alternately")
    ap.add_argument("--ack-only", action="store_true",
                    help="only the acknowledge runs (e.g. with a shorter --job)")
    args = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    adam = os.path.join(args.build, "adam")
    if not args.ack_only:
        clean = run(adam, args.job, [])
        ps = run(adam, args.job, ["--kill", "ps-0@%g" % args.at])
        ctl = run(adam, args.job, ["--kill", "controller-leader@%g+5" % args.at])
    # The cost of quorum acknowledgement: the same job with pushes answered once applied, run
    # alternately with the default (this machine is shared: the ratio of each pair is reported).
    with open(args.job) as f:
        text = f.read()
    if "copies: 3}" not in text:
        raise SystemExit("failover: %s has no `copies: 3}` to add `acknowledge: applied` to" % args.job)
    applied_job = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    applied_job.write(text.replace("copies: 3}", "copies: 3, acknowledge: applied}"))
    applied_job.close()
    ratios, quorum_ips, applied_ips, quorum_acc, applied_acc = [], [], [], [], []
    for _ in range(args.pairs):
        a = run(adam, applied_job.name, [])
        q = run(adam, args.job, [])
        applied_ips.append(a["images_per_second"])
        applied_acc.append(a["test_accuracy"])
        quorum_acc.append(q["test_accuracy"])
        quorum_ips.append(q["images_per_second"])
        ratios.append(q["images_per_second"] / a["images_per_second"])
    os.unlink(applied_job.name)
    result = {
        "images_per_second_quorum": quorum_ips,
        "images_per_second_applied": applied_ips,
        "quorum_to_applied_ratios": ratios,
        "accuracy_quorum": quorum_acc,
        "accuracy_applied": applied_acc,
    }
    if not args.ack_only:
        result.update({
            "ps_failover_ms": ps.get("failover_ms"),
            "ps_failover_first_ms": ps.get("failover_first_ms"),
            "shards_promoted": ps.get("shards_promoted"),
            "controller_failover_ms": ctl.get("controller_failover_ms"),
            "accuracy_without_faults": clean["test_accuracy"],
            "accuracy_with_faults": ps["test_accuracy"],
            "accuracy_with_controller_fault": ctl["test_accuracy"],
            "train_seconds_without_faults": clean["train_seconds"],
            "train_seconds_with_faults": ps["train_seconds"],
            "kill_at_seconds": args.at,
        })
        print("\n%-48s %10s" % ("examples/fashion-mnist-ha.yaml, adam run", ""))
        print("%-48s %8s ms" % ("kill -9 ps-0: first update at a new primary", result["ps_failover_ms"]))
        print("%-48s %8s ms" % ("kill -9 controller leader: new leader committed",
                                result["controller_failover_ms"]))
        print("%-48s %9.2f%%" % ("test accuracy, no faults", 100 * result["accuracy_without_faults"]))
        print("%-48s %9.2f%%" % ("test accuracy, ps-0 killed", 100 * result["accuracy_with_faults"]))
        print("%-48s %9.2f%%" % ("test accuracy, controller leader killed",
                                 100 * result["accuracy_with_controller_fault"]))
    for a, q, r, aa, qa in zip(applied_ips, quorum_ips, ratios, applied_acc, quorum_acc):
        print("%-48s %10.0f  %6.2f%%" % ("images/s, acknowledge: applied", a, 100 * aa))
        print("%-48s %10.0f  %6.2f%%  (x%.3f)" % ("images/s, acknowledge: quorum (default)", q,
                                                  100 * qa, r))
    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    with open(os.path.join(args.build, "bench", "failover.json"), "w") as f:
        json.dump(dict(result, machine=machine.describe()), f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
