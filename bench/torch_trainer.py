#!/usr/bin/python3
"""PyTorch (CPU) peer of trainer_bench: Project Adam's MNIST model on the same data.

Modes, as in DistBelief/Adam comparisons:
  hogwild   one process per thread, each torch.set_num_threads(1), sharing the model's memory
            (torch.multiprocessing Hogwild), at a given batch size;
  intraop   one process with N intra-op threads at a given batch size.
Prints one JSON object (last line). Also times training to a test accuracy (--tta), of
Adam's MNIST model or, with --manifest, of any AdamJob's model trained as its manifest says.
"""
import argparse, gzip, json, math, os, struct, sys, time

import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir):
    def pair(kind):
        x = read_idx(os.path.join(data_dir, f"{kind}-images-idx3-ubyte.gz")).astype(np.float32)
        y = read_idx(os.path.join(data_dir, f"{kind}-labels-idx1-ubyte.gz")).astype(np.int64)
        return torch.from_numpy(x / 127.5 - 1.0).unsqueeze(1).contiguous(), torch.from_numpy(y)
    return pair("train"), pair("t10k")


class AdamMnist(nn.Module):
    """conv 10x5x5 tanh, pool 2, conv 20x5x5 tanh, pool 2, dense 400 tanh x2, softmax 10."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 10, 5)
        self.c2 = nn.Conv2d(10, 20, 5)
        self.f1 = nn.Linear(320, 400)
        self.f2 = nn.Linear(400, 400)
        self.out = nn.Linear(400, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.c1(x)), 2)
        x = F.max_pool2d(torch.tanh(self.c2(x)), 2)
        x = torch.tanh(self.f1(x.flatten(1)))
        x = torch.tanh(self.f2(x))
        return self.out(x)


def train_steps(model, opt, x, y, batch, start, stop_at, counter=None):
    """Trains on batches from `start` until time.monotonic() > stop_at; returns images."""
    n, images, pos = x.shape[0], 0, start
    while time.monotonic() < stop_at:
        if pos + batch > n:
            pos = 0
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[pos:pos + batch]), y[pos:pos + batch])
        loss.backward()
        opt.step()
        pos += batch
        images += batch
    return images


def hogwild_worker(rank, model, x, y, batch, warm, seconds, barrier, results):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    start = (x.shape[0] // 64) * rank % x.shape[0]
    barrier.wait()
    t0 = time.monotonic()
    train_steps(model, opt, x, y, batch, start, t0 + warm)
    t1 = time.monotonic()
    images = train_steps(model, opt, x, y, batch, start, t1 + seconds)
    results.put((images, time.monotonic() - t1))


def hogwild(x, y, procs, batch, seconds):
    model = AdamMnist()
    model.share_memory()
    x.share_memory_()
    y.share_memory_()
    # spawn, not fork: a parent that has run autograd cannot fork workers that use it.
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=hogwild_worker,
                      args=(r, model, x, y, batch, min(1.0, seconds / 3), seconds, barrier, results))
          for r in range(procs)]
    for p in ps:
        p.start()
    out = [results.get() for _ in ps]
    for p in ps:
        p.join()
    return sum(i for i, _ in out) / max(t for _, t in out)


def intraop(x, y, threads, batch, seconds):
    torch.set_num_threads(threads)
    model = AdamMnist()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    t0 = time.monotonic()
    train_steps(model, opt, x, y, batch, 0, t0 + min(1.0, seconds / 3))
    t1 = time.monotonic()
    images = train_steps(model, opt, x, y, batch, 0, t1 + seconds)
    return images / (time.monotonic() - t1)


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def augmented_variants(x, shift, hflip, variants, generator):
    """`variants` copies of the images x (N x C x H x W) stacked as V x N x C x H x W: copy 0 is
    x, the others translated by up to `shift` pixels each way (zero fill) and, with `hflip`,
    mirrored at random: the data server's augmentation (workers/libs/data/augment.h)."""
    n, _, h, w = x.shape
    # Images are scaled to [-1, 1]; the fill is a black (0) pixel.
    padded = F.pad(x, (shift, shift, shift, shift), value=-1.0)
    out = [x]
    for _ in range(1, variants):
        dx = torch.randint(-shift, shift + 1, (n,), generator=generator)
        dy = torch.randint(-shift, shift + 1, (n,), generator=generator)
        v = torch.empty_like(x)
        for a in range(-shift, shift + 1):
            for b in range(-shift, shift + 1):
                idx = ((dx == a) & (dy == b)).nonzero().squeeze(1)
                if len(idx):
                    v[idx] = padded[idx, :, shift - b:shift - b + h, shift - a:shift - a + w]
        if hflip:
            flip = (torch.rand(n, generator=generator) < 0.5).nonzero().squeeze(1)
            v[flip] = v[flip].flip(3)
        out.append(v)
    return torch.stack(out)


class ManifestModel(nn.Module):
    """spec.model of an AdamJob: conv (maps, kernel, stride, padding, activation), maxpool and
    avgpool (size), dense (units, activation), dropout (rate), softmax (classes; the softmax itself
    is in the loss), with the defaults of docs/reference/adamjob.md."""

    ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid,
                   "leakyRelu": lambda: nn.LeakyReLU(0.01), "none": nn.Identity}

    def __init__(self, model):
        super().__init__()
        shape = (model["input"]["channels"], model["input"]["height"], model["input"]["width"])
        layers = []
        for i, l in enumerate(model["layers"]):
            t = l["type"]
            if t == "conv":
                c, h, w = shape
                k, st, pad = l["kernel"], l.get("stride", 1), l.get("padding", 0)
                layers += [nn.Conv2d(c, l["maps"], k, st, pad),
                           self.ACTIVATIONS[l.get("activation", "tanh")]()]
                shape = (l["maps"], (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1)
            elif t in ("maxpool", "avgpool"):
                pool = nn.MaxPool2d if t == "maxpool" else nn.AvgPool2d
                layers.append(pool(l["size"]))
                shape = (shape[0], shape[1] // l["size"], shape[2] // l["size"])
            elif t == "dropout":
                layers.append(nn.Dropout(l.get("rate", 0.5)))
            elif t in ("dense", "softmax"):
                units = l["units"] if t == "dense" else l["classes"]
                inputs = shape[0] * shape[1] * shape[2]
                layers += [nn.Flatten(), nn.Linear(inputs, units)]
                if t == "dense":
                    layers.append(self.ACTIVATIONS[l.get("activation", "tanh")]())
                shape = (units, 1, 1)
            else:
                raise ValueError(f"spec.model.layers[{i}].type: {t} has no PyTorch peer here")
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def per_step(training):
    """Whether the manifest's schedule moves with every step (learningRateSchedule.per: step)."""
    return (training.get("learningRateSchedule") or {}).get("per", "epoch") == "step"


def learning_rate_at(training, epoch, fraction=0.0):
    """spec::LearningRateAt (workers/libs/spec/adamjob_model.cc): the schedule, then the warmup
    ramp, at `epoch`, or at epoch + `fraction` trained when the schedule is per step."""
    at = epoch + (min(max(fraction, 0.0), 1.0) if per_step(training) else 0.0)
    lr = training.get("learningRate", 0.02)
    schedule = training.get("learningRateSchedule")
    if schedule is None:
        lr *= training.get("learningRateDecay", 1.0) ** at
    elif schedule["type"] == "step":
        lr *= schedule.get("factor", 0.1) ** math.floor(at / schedule["everyEpochs"])
    else:
        final = schedule.get("final", 0.0)
        lr *= final + (1 - final) * 0.5 * (1 + math.cos(math.pi * at / training.get("epochs", 10)))
    warmup = training.get("warmupEpochs", 0)
    if at < warmup:
        lr *= (at + 1) / (warmup + 1)
    return lr


def time_to_accuracy(train, test, threads, batch, lr, momentum, target, max_epochs, max_seconds,
                     augment=(0, 0, 1), decay=1.0, manifest=None, weight_decay=0.0):
    """Trains until `target` test accuracy, `max_epochs` or `max_seconds`. With an AdamJob
    `manifest` (a dict), its model, epochs, batch size, learning rate and schedule, momentum,
    weight decay and augmentation replace the arguments: the same training, step for step."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    lr_at = lambda e, fraction=0.0: lr * decay ** e
    stepwise = False  # the rate set at every step, not once per epoch
    smoothing = 0.0
    if manifest:
        spec = manifest["spec"]
        training = spec.get("training", {})
        model = ManifestModel(spec["model"])
        lr_at = lambda e, fraction=0.0: learning_rate_at(training, e, fraction)
        stepwise = per_step(training)
        lr = training.get("learningRate", 0.02)
        batch = training.get("batchSize", 1)
        max_epochs = training.get("epochs", 10)
        momentum = training.get("momentum", 0.0)
        weight_decay = training.get("weightDecay", 0.0)
        smoothing = training.get("labelSmoothing", 0.0)
        a = spec["dataset"].get("augment", {})
        augment = (a.get("shift", 0), int(a.get("hflip", False)), a.get("variants", 2))
        # Ours does not decay biases.
        decayed = [p for n, p in model.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
        groups = [{"params": decayed, "weight_decay": weight_decay},
                  {"params": rest, "weight_decay": 0.0}]
    else:
        model = AdamMnist()
        groups = [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    opt = torch.optim.SGD(groups, lr=lr_at(0), momentum=momentum)
    x, y = train
    t0, acc, epoch = time.monotonic(), 0.0, 0
    g = torch.Generator().manual_seed(1)
    shift, hflip, variants = augment
    xs = augmented_variants(x, shift, hflip, variants, g)  # inside the timed span, as ours
    rows = torch.arange(x.shape[0])
    curve = []
    while epoch < max_epochs and acc < target and time.monotonic() - t0 < max_seconds:
        for group in opt.param_groups:
            group["lr"] = lr_at(epoch)
        model.train()
        # Each epoch draws one variant per image, as the data server does.
        xe = xs[torch.randint(0, variants, (x.shape[0],), generator=g), rows] if variants > 1 else x
        perm = torch.randperm(x.shape[0])
        for i in range(0, x.shape[0], batch):
            if stepwise:
                for group in opt.param_groups:
                    group["lr"] = lr_at(epoch, i / x.shape[0])
            idx = perm[i:i + batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xe[idx]), y[idx], label_smoothing=smoothing).backward()
            opt.step()
        model.eval()
        acc = accuracy(model, *test)
        epoch += 1
        elapsed = time.monotonic() - t0
        curve.append({"epoch": epoch, "accuracy": acc, "seconds": elapsed})
        print(f"torch tta: epoch {epoch} test accuracy {acc:.4f} {elapsed:.1f} s",
              file=sys.stderr, flush=True)
    best = max(curve, key=lambda c: c["accuracy"]) if curve else {"accuracy": 0.0}
    return {"target": target, "reached": acc >= target, "accuracy": acc, "epochs": epoch,
            "best_accuracy": best["accuracy"], "curve": curve,
            "seconds": time.monotonic() - t0, "threads": threads, "batch": batch, "lr": lr,
            "momentum": momentum, "weight_decay": weight_decay, "label_smoothing": smoothing,
            "decay": decay, "augment_variants": variants, "manifest": bool(manifest)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--tta", type=float, default=0)
    ap.add_argument("--tta-batch", type=int, default=32)
    ap.add_argument("--tta-lr", type=float, default=0.01)
    ap.add_argument("--tta-momentum", type=float, default=0.9)
    ap.add_argument("--tta-decay", type=float, default=0.85, help="learning-rate factor per epoch")
    ap.add_argument("--tta-epochs", type=int, default=30)
    ap.add_argument("--tta-seconds", type=float, default=240, help="give up after this long")
    ap.add_argument("--tta-augment", default="0,0,1",
                    help="SHIFT,HFLIP,VARIANTS: the manifest's augmentation (trainer_bench prints it)")
    ap.add_argument("--throughput", type=int, default=1, help="0: time to accuracy only")
    ap.add_argument("--manifest", help="an AdamJob: time to accuracy with its model, epochs, "
                    "batch size, learning rate and schedule, momentum, weight decay and "
                    "augmentation (instead of the --tta-* settings)")
    a = ap.parse_args()
    train, test = load(a.data_dir)
    x, y = train
    runs = []
    for t in [int(v) for v in a.threads.split(",")] if a.throughput else []:
        for b in (1, 32):
            ips = hogwild(x, y, t, b, a.seconds)
            runs.append({"mode": "hogwild", "threads": t, "batch": b, "images_per_second": ips})
            print(f"torch hogwild  threads {t:3d} batch {b:4d} {ips:10.0f} img/s", file=sys.stderr, flush=True)
        for b in (32, 256):
            ips = intraop(x, y, t, b, a.seconds)
            runs.append({"mode": "intraop", "threads": t, "batch": b, "images_per_second": ips})
            print(f"torch intraop  threads {t:3d} batch {b:4d} {ips:10.0f} img/s", file=sys.stderr, flush=True)
    out = {"torch_version": torch.__version__, "runs": runs}
    if a.tta > 0:
        threads = max(int(v) for v in a.threads.split(","))
        manifest = None
        if a.manifest:
            import yaml  # Debian's python3-yaml
            with open(a.manifest) as f:
                manifest = yaml.safe_load(f)
        out["tta"] = time_to_accuracy(train, test, threads, a.tta_batch, a.tta_lr, a.tta_momentum,
                                      a.tta, a.tta_epochs, a.tta_seconds,
                                      tuple(int(v) for v in a.tta_augment.split(",")), a.tta_decay,
                                      manifest)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
