#!/usr/bin/python3
"""Where each role's CPU goes, thread by thread: `adam run` of a manifest, and between two
instants of its training every role process's threads sampled from /proc (the roles name their
threads: worker-N, sync, prefetch, apply-N, raft...; gRPC names its own). Per process: CPU in
% of one core, by thread name (threads of one name summed). For trainers also the share of the
process that is not its workers' (sync, prefetch, gRPC...): what a pod limited to `threads` CPUs
takes from its workers (docs/reference/kubernetes.md, "Placement").

  bench/thread_cpu.py [--build build] [--epochs 2] [--from 10] [--to 30] MANIFEST

--from/--to count seconds from the first trainer's start. Writes build/bench/thread_cpu.json.
"""
import argparse, collections, json, os, subprocess, sys, tempfile, time

import machine
from spread import with_epochs  # bench/ is the script's folder, first on sys.path

TICK = os.sysconf("SC_CLK_TCK")


def ticks(stat_path):
    """utime + stime of a /proc stat file (fields 14 and 15, after the parenthesised name)."""
    with open(stat_path) as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])


def roles(adam):
    """{pid: role instance name} of the processes running `adam`'s roles."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().decode().split("\0")
        except OSError:
            continue
        if len(argv) > 3 and os.path.realpath(argv[0]) == adam and "--name" in argv:
            out[int(pid)] = argv[argv.index("--name") + 1]
    return out


def snapshot(procs):
    """{pid: (process ticks, {tid: (thread name, ticks)})}; processes gone are left out."""
    snap = {}
    for pid in procs:
        try:
            total = ticks("/proc/%d/stat" % pid)
            threads = {}
            for tid in os.listdir("/proc/%d/task" % pid):
                base = "/proc/%d/task/%s/" % (pid, tid)
                try:
                    threads[tid] = (open(base + "comm").read().strip(), ticks(base + "stat"))
                except OSError:
                    pass
            if threads:  # none: the process has exited (a zombie not yet reaped)
                snap[pid] = (total, threads)
        except OSError:
            pass
    return snap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--from", dest="t0", type=float, default=10)
    ap.add_argument("--to", dest="t1", type=float, default=30)
    ap.add_argument("manifest")
    a = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    if not 0 <= a.t0 < a.t1:
        sys.exit("--from must be at least 0 and under --to")
    adam = os.path.realpath(os.path.join(a.build, "adam"))
    if not os.access(adam, os.X_OK):
        sys.exit("no adam binary at %s (make build first)" % adam)
    with tempfile.TemporaryDirectory() as tmp:
        job = with_epochs(a.manifest, a.epochs, tmp)
        # The log goes to a file: a pipe nobody reads while the samples wait could fill and stall
        # the run being measured.
        log = open(os.path.join(tmp, "run.log"), "w+")
        run = subprocess.Popen([adam, "run", job, "--output", "json", "-q"],
                               stdout=subprocess.PIPE, stderr=log, text=True)
        start = None
        while start is None and run.poll() is None:
            if any(n.startswith("trainer-") for n in roles(adam).values()):
                start = time.time()
            else:
                time.sleep(0.1)
        if start is None:
            log.seek(0)
            sys.exit("adam run ended before a trainer started:\n" + log.read()[-4000:])
        print("thread_cpu: first trainer up; sampling from %.0f s to %.0f s" % (a.t0, a.t1),
              file=sys.stderr, flush=True)
        time.sleep(max(0.0, start + a.t0 - time.time()))
        procs = roles(adam)
        before, t_before = snapshot(procs), time.time()
        time.sleep(max(0.0, start + a.t1 - time.time()))
        after, t_after = snapshot(procs), time.time()
        out, _ = run.communicate()
        if run.returncode != 0:
            log.seek(0)
            sys.exit("adam run failed (exit %d):\n%s" % (run.returncode, log.read()[-4000:]))
        if a.t1 > json.loads(out)["wall_seconds"]:
            print("thread_cpu: warning: the run ended before --to; later samples hold less",
                  file=sys.stderr)
    seconds = t_after - t_before
    report = {"manifest": a.manifest, "seconds": seconds, "processes": {}}
    for pid, name in sorted(procs.items(), key=lambda p: p[1]):
        if pid not in before or pid not in after:
            print("%-14s ended before the second sample" % name)
            continue
        total = (after[pid][0] - before[pid][0]) / TICK / seconds
        by_name = collections.Counter()
        for tid, (tname, t) in after[pid][1].items():
            # A thread started between the samples counts from 0.
            by_name[tname] += (t - before[pid][1].get(tid, (tname, 0))[1]) / TICK / seconds
        # Threads that ended between the samples: the process total holds them, no thread does.
        ended = total - sum(by_name.values())
        if ended > 0.005:
            by_name["(ended)"] += ended
        # Workers start anew each epoch, so the ended threads are taken for workers.
        others = sum(v for k, v in by_name.items() if not k.startswith("worker-") and k != "(ended)")
        entry = {"cpu": total, "threads": dict(by_name)}
        if name.startswith("trainer-") and total > 0:
            entry["not_workers"] = others / total
        report["processes"][name] = entry
        parts = ", ".join("%s %.1f" % (k, 100 * v) for k, v in by_name.most_common() if v >= 0.001)
        line = "%-14s %5.1f%% of a core: %s" % (name, 100 * total, parts)
        if "not_workers" in entry:
            line += "; not the workers': %.1f%% of the process" % (100 * entry["not_workers"])
        print(line)
    os.makedirs(os.path.join(a.build, "bench"), exist_ok=True)
    with open(os.path.join(a.build, "bench", "thread_cpu.json"), "w") as f:
        json.dump(dict(report, machine=machine.describe()), f, indent=1)


if __name__ == "__main__":
    main()
