#!/usr/bin/python3
"""What a benchmark ran on: CPU model, cores, the widest vector ISA, kernel, commit and date.
Every bench/*.py puts describe() into its JSON as "machine" and prints line() first, so a figure
never travels without its machine (docs/reference/performance.md).

  bench/machine.py [--json FILE]    prints the line; with --json also writes the record
"""
import argparse, datetime, json, os, platform, subprocess


def _cpuinfo():
    model, flags = "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown CPU":
                    model = " ".join(value.split())
                elif key == "flags" and not flags:
                    flags = value
    except OSError:
        pass
    return model, set(flags.split())


def _commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def describe():
    model, flags = _cpuinfo()
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else
           "AVX" if "avx" in flags else "SSE")
    hypervisor = "hypervisor" in flags
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "isa": isa,
        "virtual": hypervisor,
        "kernel": platform.release(),
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
    }


def line(m=None):
    m = m or describe()
    return "%s, %d cores, %s%s; Linux %s; commit %s; %s" % (
        m["cpu"], m["cores"], m["isa"], ", virtual machine" if m["virtual"] else "",
        m["kernel"], m["commit"], m["date"])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    m = describe()
    print("machine:", line(m), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(m, f, indent=1)
