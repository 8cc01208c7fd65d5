#!/usr/bin/python3
"""Runs an ONNX file Adam wrote through ONNX's own checker and OpenCV's ONNX runtime (Debian's
python3-onnx and python3-opencv), for tests/libs/model/onnx_test.cc and tests/e2e/adam_run_test.cc.

  onnx_runtime.py run MODEL INPUT OUTPUT N C H W
      INPUT: N*C*H*W float32 pixel values (0..255); writes the N x classes probabilities to OUTPUT.
  onnx_runtime.py accuracy MODEL IMAGES LABELS
      IDX files (raw or gzip); prints {"images": N, "correct": K} as JSON.
  onnx_runtime.py metadata MODEL
      Prints the model's metadata_props as a JSON object, once OpenCV has loaded the model.
Exits 1 (with the checker's message) when the model is not valid ONNX.
"""
import gzip
import json
import sys

import cv2
import numpy as np
import onnx


def idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw[4 + 4 * ndim:], np.uint8).reshape(dims)


def forward(net, x):
    out = []
    for i in range(0, len(x), 500):
        net.setInput(np.ascontiguousarray(x[i:i + 500]))
        out.append(net.forward())
    return np.concatenate(out)


def main():
    mode, path = sys.argv[1], sys.argv[2]
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    except onnx.checker.ValidationError as e:
        print(f"onnx checker: {e}", file=sys.stderr)
        sys.exit(1)
    net = cv2.dnn.readNetFromONNX(path)
    if mode == "run":
        n, c, h, w = (int(v) for v in sys.argv[5:9])
        x = np.fromfile(sys.argv[3], np.float32).reshape(n, c, h, w)
        forward(net, x).astype(np.float32).tofile(sys.argv[4])
    elif mode == "metadata":
        print(json.dumps({p.key: p.value for p in onnx.load(path).metadata_props}))
    elif mode == "accuracy":
        images, labels = idx(sys.argv[3]), idx(sys.argv[4])
        x = images.astype(np.float32)
        if x.ndim == 3:
            x = x[:, None]
        predicted = forward(net, x).argmax(1)
        print(json.dumps({"images": int(len(labels)), "correct": int((predicted == labels).sum())}))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
