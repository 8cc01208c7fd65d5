#!/usr/bin/python3
"""Image folders against IDX files: writes Fashion-MNIST's 70,000 images as PNG files in class
folders (DIR/train/CLASS/N.png, DIR/test/CLASS/N.png; OpenCV writes them), then runs
examples/fashion-mnist.yaml with `adam run` on the IDX files and on the folders, alternately, and
reports the data server's load time (reading, decoding, augmenting), images/s and test accuracy.
Prints a table and writes build/bench/image_folder.json.

  bench/image_folder.py [--build build] [--epochs 3] [--pairs 1] [--dir /tmp/fashion-mnist-png]
"""
import argparse, gzip, json, os, re, subprocess, sys, tempfile, time

import machine  # bench/ is the script's folder, first on sys.path

import cv2
import numpy as np

IDX = "/usr/share/datasets/fashion-mnist"
CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "boot"]


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_folders(root):
    """Writes both sets once; a folder already complete is kept."""
    for part, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx("%s/%s-images-idx3-ubyte.gz" % (IDX, prefix))
        labels = read_idx("%s/%s-labels-idx1-ubyte.gz" % (IDX, prefix))
        done = os.path.join(root, part, ".complete")
        if os.path.exists(done):
            continue
        t0 = time.time()
        for c in CLASSES:
            os.makedirs(os.path.join(root, part, c), exist_ok=True)
        for i, (img, label) in enumerate(zip(images, labels)):
            cv2.imwrite(os.path.join(root, part, CLASSES[label], "%05d.png" % i), img)
            if i % 10000 == 9999:
                print("image_folder: %s: %d of %d PNG files" % (part, i + 1, len(labels)),
                      file=sys.stderr, flush=True)
        open(done, "w").close()
        print("image_folder: wrote %d PNG files in %.0f s" % (len(labels), time.time() - t0),
              file=sys.stderr, flush=True)


def manifest(base, folder, epochs, out):
    text = open(base).read()
    text = re.sub(r"epochs: \d+", "epochs: %d" % epochs, text)
    if folder:
        start, end = text.index("    format: idx"), text.index("    augment:")
        text = (text[:start] + "    format: folder\n    train: {folder: %s/train}\n"
                "    test: {folder: %s/test}\n" % (folder, folder) + text[end:])
    with open(out, "w") as f:
        f.write(text)
    return out


def run(adam, job):
    cmd = [adam, "run", job, "-o", "json"]
    print("image_folder: " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit("image_folder: the run failed (exit %d)" % p.returncode)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # The data server's "augmentation cache: ... in S s" counts from its start: reading and
    # decoding included.
    load = re.search(r"augmentation cache: .* in ([0-9.]+) s", p.stderr)
    out["load_seconds"] = float(load.group(1)) if load else None
    print("image_folder:   %.2f%%, %.0f img/s, loaded in %s s" %
          (100 * out["test_accuracy"], out["images_per_second"], out["load_seconds"]),
          file=sys.stderr, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "fashion-mnist-png"))
    args = ap.parse_args()
    print("machine:", machine.line(), flush=True)
    adam = os.path.join(args.build, "adam")
    write_folders(args.dir)
    work = tempfile.mkdtemp(prefix="adam-bench-folder-")
    jobs = {"idx": manifest("examples/fashion-mnist.yaml", None, args.epochs, work + "/idx.yaml"),
            "folder": manifest("examples/fashion-mnist.yaml", args.dir, args.epochs,
                               work + "/folder.yaml")}
    runs = {"idx": [], "folder": []}
    for _ in range(args.pairs):
        for kind in ("idx", "folder"):
            runs[kind].append(run(adam, jobs[kind]))
    print("\n| data | load (s) | images/s | test accuracy after %d epochs |" % args.epochs)
    print("| --- | --- | --- | --- |")
    for kind in ("idx", "folder"):
        rs = runs[kind]
        print("| %s | %s | %s | %s |" % (
            kind, ", ".join("%.2f" % r["load_seconds"] for r in rs),
            ", ".join("{:,.0f}".format(r["images_per_second"]) for r in rs),
            ", ".join("%.2f%%" % (100 * r["test_accuracy"]) for r in rs)))
    os.makedirs(os.path.join(args.build, "bench"), exist_ok=True)
    with open(os.path.join(args.build, "bench", "image_folder.json"), "w") as f:
        json.dump({"machine": machine.describe(), "epochs": args.epochs, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
