#!/usr/bin/python3
"""Runs the trainer benchmark and its PyTorch peer in one go; prints the comparison table and
writes build/bench/trainer.json (trainer-avx2.json with --isa avx2; and, with --plot, a PNG of
images/s against threads).

  bench/trainer.py [--threads 1,2] [--seconds 3] [--tta 0.91] [--plot docs/trainer-scaling.png]
                   [--isa avx2]

--isa avx2 measures an AVX2 CPU on an AVX-512 one: both sides are capped at AVX2 (oneDNN by
ONEDNN_MAX_CPU_ISA, which also picks our own loops' copy; PyTorch's kernels by
ATEN_CPU_CAPABILITY and its oneDNN by the same variable), and the peak is an AVX2 core's.
"""
import argparse, json, os, re, subprocess, sys

import machine  # bench/ is the script's folder, first on sys.path


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit("no JSON in output:\n" + text[-2000:])


# What --isa sets for both peers' processes.
ISA_ENV = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
                    "ATEN_CPU_CAPABILITY": "avx2"}}


def peak_gflops(cores, isa=""):
    """Single-precision peak estimate: cores x GHz x FLOPs/cycle (2 FMA units); `isa` "avx2"
    counts an AVX2 core's FLOPs whatever the CPU has."""
    flags, mhz = "", 0.0
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") and not flags:
                flags = line
            m = re.match(r"cpu MHz\s*:\s*([\d.]+)", line)
            if m:
                mhz = max(mhz, float(m.group(1)))
    per_cycle = 64 if " avx512f" in flags else 32 if " fma" in flags else 16
    if isa == "avx2":
        per_cycle = min(per_cycle, 32)
    return cores * mhz / 1000 * per_cycle, per_cycle, mhz


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", default="")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--tta", type=float, default=0)
    ap.add_argument("--plot", default="")
    ap.add_argument("--tta-seconds", type=float, default=900, help="PyTorch's time-to-accuracy cap")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--job", default="examples/fashion-mnist.yaml", help="manifest for trainer_bench")
    ap.add_argument("--replot", default="", help="only draw --plot from a saved trainer.json")
    ap.add_argument("--isa", default="", choices=["", "avx2"],
                    help="cap both peers at this instruction set (see the module's docstring)")
    ap.add_argument("--apply-every", type=int, default=8,
                    help="also measure batch 1 with workers writing the shared weights every N steps")
    ap.add_argument("--private", type=int, default=1,
                    help="also measure batch 1 with a private weight copy per thread (threadWeights)")
    a = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    env = dict(os.environ, **ISA_ENV.get(a.isa, {}))
    if a.isa:
        print(f"both peers capped at {a.isa}: " +
              " ".join(f"{k}={v}" for k, v in ISA_ENV[a.isa].items()), flush=True)
    if a.replot:
        with open(a.replot) as f:
            plot(json.load(f)["rows"], a.plot)
        return
    cores = os.cpu_count()
    threads = a.threads or ",".join(str(t) for t in sorted({1, 2, 4, 8, 16, cores}) if t <= cores)
    here = os.path.dirname(os.path.abspath(__file__))

    cmd = [os.path.join(a.build, "bench", "trainer_bench"), "--threads", threads,
           "--batches", "1,32", "--seconds", str(a.seconds), "--job", a.job]
    if a.tta:
        cmd += ["--tta", str(a.tta)]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    # stdout carries the JSON; stderr (progress) streams through so a cut-off run still shows it.
    ours = last_json(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout)
    held = None
    if a.apply_every > 1:
        hcmd = cmd[:cmd.index("--batches")] + ["--batches", "1", "--seconds", str(a.seconds), "--job", a.job,
                                               "--apply-every", str(a.apply_every)]
        print("running:", " ".join(hcmd), file=sys.stderr, flush=True)
        held = last_json(subprocess.run(hcmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout)
    private = None
    if a.private:
        pcmd = cmd[:cmd.index("--batches")] + ["--batches", "1", "--seconds", str(a.seconds), "--job", a.job,
                                               "--private-weights", "true"]
        print("running:", " ".join(pcmd), file=sys.stderr, flush=True)
        private = last_json(subprocess.run(pcmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout)
    os.makedirs(os.path.join(a.build, "bench"), exist_ok=True)
    suffix = f"-{a.isa}" if a.isa else ""  # a capped run keeps the uncapped run's files
    with open(os.path.join(a.build, "bench", f"trainer_ours{suffix}.json"), "w") as f:
        json.dump({"ours": ours, "held": held, "private": private}, f)
    tcmd = [sys.executable, os.path.join(here, "torch_trainer.py"), "--threads", threads,
            "--seconds", str(a.seconds), "--data-dir", a.data_dir]
    if a.tta:
        # The same augmented data as ours (the manifest's augmentation, trainer_bench reports it).
        tcmd += ["--tta", str(a.tta), "--tta-seconds", str(a.tta_seconds),
                 "--tta-augment", ",".join(str(v) for v in ours["augment"])]
    print("running:", " ".join(tcmd), file=sys.stderr, flush=True)
    torch = last_json(subprocess.run(tcmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout)

    def o(t, b):
        return next(r["images_per_second"] for r in ours["runs"] if r["threads"] == t and r["batch"] == b)

    def oh(t):  # batch 1 with held updates (applyEvery), or None
        if not held:
            return None
        return next(r["images_per_second"] for r in held["runs"] if r["threads"] == t)

    def op(t):  # batch 1 with private weights, or None
        if not private:
            return None
        return next(r["images_per_second"] for r in private["runs"] if r["threads"] == t)

    def per_image(t):  # the faster per-image SGD (every step applied at once): shared or private
        return max((o(t, 1), "shared"), (op(t) or 0, "private"))

    def tq(t, mode=None, b=None):
        rs = [r for r in torch["runs"] if r["threads"] == t and (mode is None or r["mode"] == mode)
              and (b is None or r["batch"] == b)]
        best = max(rs, key=lambda r: r["images_per_second"])
        return best["images_per_second"], f'{best["mode"]} b{best["batch"]}'

    ts = [int(t) for t in threads.split(",")]
    flops = ours["train_flops_per_image"]
    peak, per_cycle, mhz = peak_gflops(max(ts), a.isa)
    rows = []
    print("ours b1: per-image SGD, the faster of shared and private weights (both listed below)")
    print(f'{"threads":>7} | {"ours b1":>9} {"torch hogwild b1":>16} {"ratio":>6} | '
          f'{"ours b32":>9} {"torch best":>10} {"(config)":>16} {"ratio":>6} | {"scaling b1":>10} {"b32":>6}')
    for t in ts:
        (ob1, weights), ob32 = per_image(t), o(t, 32)
        tb1, _ = tq(t, "hogwild", 1)
        tbest, cfg = tq(t)
        row = {"threads": t, "ours_b1": ob1, "ours_b1_weights": weights, "ours_b1_shared": o(t, 1),
               "ours_b1_private": op(t), "ours_b1_held": oh(t), "apply_every": a.apply_every,
               "torch_hogwild_b1": tb1, "ours_b32": ob32,
               "torch_best": tbest, "torch_best_config": cfg,
               "scaling_b1": ob1 / per_image(ts[0])[0] / (t / ts[0]),
               "scaling_b32": ob32 / o(ts[0], 32) / (t / ts[0])}
        rows.append(row)
        print(f'{t:>7} | {ob1:>9.0f} {tb1:>16.0f} {ob1 / tb1:>5.1f}x | {ob32:>9.0f} {tbest:>10.0f} '
              f'{cfg:>16} {max(ob1, ob32) / tbest:>5.1f}x | {row["scaling_b1"]:>9.2f}  {row["scaling_b32"]:>5.2f}')
        print(f'{"":>7} | b1 shared weights {o(t, 1):.0f} img/s, private weights '
              f'{op(t) or 0:.0f} img/s')
        if oh(t):
            print(f'{"":>7} | b1, applyEvery {a.apply_every}: {oh(t):.0f} img/s = {oh(t) / tb1:.1f}x torch hogwild b1')
    top = max(ts)
    ours_best = max(per_image(top)[0], o(top, 32), oh(top) or 0)
    result = {
        "threads": top, "ours_b1": per_image(top)[0], "ours_b1_weights": per_image(top)[1],
        "ours_b1_shared": o(top, 1), "ours_b1_private": op(top),
        "torch_b1": tq(top, "hogwild", 1)[0], "ours_b1_held": oh(top), "apply_every": a.apply_every,
        "ours_best": ours_best, "torch_best": tq(top)[0], "torch_best_config": tq(top)[1],
        "ours_best_gflops": ours_best * flops / 1e9, "peak_gflops_estimate": peak,
        "peak_basis": f"{top} cores x {mhz:.0f} MHz x {per_cycle} FLOP/cycle",
        "train_flops_per_image": flops, "rows": rows, "torch_version": torch.get("torch_version"),
        "isa_cap": a.isa or None, "kernel_isa": ours.get("kernel_isa"),
        "ours_tta": ours.get("tta"), "torch_tta": torch.get("tta"),
    }
    print(f'\nall {top} threads: ours b1 ({result["ours_b1_weights"]} weights) {result["ours_b1"]:.0f} vs torch hogwild b1 '
          f'{result["torch_b1"]:.0f} = {result["ours_b1"] / result["torch_b1"]:.1f}x; ours best '
          f'{ours_best:.0f} vs torch best {result["torch_best"]:.0f} ({result["torch_best_config"]}) = '
          f'{ours_best / result["torch_best"]:.1f}x')
    print(f'ours best {result["ours_best_gflops"]:.1f} GFLOP/s ({ours.get("kernel_isa")} kernels) of an estimated peak {peak:.0f} '
          f'({result["peak_basis"]}): {100 * result["ours_best_gflops"] / peak:.1f}%')
    for name in ("ours_tta", "torch_tta"):
        if result[name]:
            r = result[name]
            print(f'{name}: {r["accuracy"]:.4f} after {r["epochs"]} epochs in {r["seconds"]:.1f} s '
                  f'(target {r["target"]}, reached {r["reached"]})')
    os.makedirs(os.path.join(a.build, "bench"), exist_ok=True)
    with open(os.path.join(a.build, "bench", f"trainer{suffix}.json"), "w") as f:
        json.dump(dict(result, machine=machine.describe()), f, indent=1)
    if a.plot:
        plot(rows, a.plot)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ts = [r["threads"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    weights = {r.get("ours_b1_weights", "shared") for r in rows}
    ax.plot(ts, [r["ours_b1"] for r in rows], "o-",
            label=f'Adam, batch 1, {weights.pop()} weights' if len(weights) == 1
            else "Adam, batch 1 (the faster of private and shared weights)")
    if all(r.get("ours_b1_held") for r in rows):
        ax.plot(ts, [r["ours_b1_held"] for r in rows], "^-",
                label=f'Adam, batch 1, applyEvery {rows[0]["apply_every"]}')
    if all(r.get("ours_b1_private") for r in rows):
        ax.plot(ts, [r["ours_b1_shared"] for r in rows], "v-", label="Adam, batch 1, shared weights")
    ax.plot(ts, [r["ours_b32"] for r in rows], "s-", label="Adam, batch 32")
    ax.plot(ts, [rows[0]["ours_b32"] * t / ts[0] for t in ts], ":", color="gray",
            label="linear from 1 thread (batch 32)")
    ax.plot(ts, [r["torch_hogwild_b1"] for r in rows], "o--", label="PyTorch Hogwild, batch 1")
    ax.plot(ts, [r["torch_best"] for r in rows], "s--", label="PyTorch, best config")
    ax.set_xlabel("threads (cores)")
    ax.set_ylabel("training images / s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ts)
    ax.set_xticklabels([str(t) for t in ts])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Project Adam's MNIST model on Fashion-MNIST, CPU training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)

if __name__ == "__main__":
    main()
