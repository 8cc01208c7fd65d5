#!/usr/bin/python3
"""The docs check finds what is broken: a small tree with one fault of every kind the check
knows must give exactly those problems, and the same tree mended must give none.

  tests/docs/check_docs_test.py --adam build/adam
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

GOOD_JOB = """apiVersion: adam.dev/v1alpha1
kind: AdamJob
metadata: {name: tiny}
spec:
  dataset:
    format: idx
    train: {images: /d/train-images, labels: /d/train-labels}
    test: {images: /d/test-images, labels: /d/test-labels}
  model:
    input: {channels: 1, height: 8, width: 8}
    layers:
      - {type: dense, units: 4, activation: tanh}
      - {type: softmax, classes: 2}
"""


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def tree(root, broken):
    write(root, "Makefile", "demo: build\n\t./build/adam run job.yaml\nbuild:\n\ttrue\n")
    write(root, "workers/real.cc", "// see docs/reference/page.md\n" +
          ("// and docs/gone.md\n" if broken else ""))
    write(root, "charts/adam/values.schema.json", json.dumps(
        {"properties": {"replicaCount": {"type": "integer"},
                        "image": {"type": "object", "properties": {"tag": {"type": "string"}}}}}))
    rows = "| `replicaCount` | 2 | operators |\n" + ("" if broken else "| `image.tag` | x | tag |\n")
    write(root, "docs/reference/chart-values.md", "# Chart values\n\n" + rows)
    write(root, "docs/bench/demo.json", json.dumps({"readme": "It trained to 90.00%."}))
    job = GOOD_JOB.replace("units: 4", "units: 0") if broken else GOOD_JOB
    write(root, "docs/reference/page.md",
          "# A page\n\n## Its section\n\nSee `workers/real.cc`%s and [the index](../README.md).\n\n"
          "```yaml\n%s```\n\n```sh\nmake demo\n./build/adam run job.yaml --quiet%s\n```\n%s" % (
              " and `workers/missing.cc`" if broken else "", job,
              " --no-such-flag" if broken else "",
              "\nAs CI found in stop 12.\n" if broken else ""))
    write(root, "docs/README.md", "# Docs\n\n[page](reference/page.md#%s), [values](reference/chart-values.md)%s\n" % (
        "no-section" if broken else "its-section", ", [gone](reference/gone.md)" if broken else ""))
    if broken:
        write(root, "docs/orphan.md", "# Nobody links here\n")
    write(root, "README.md", "# Tiny\n\n%s `make %s`; `adam %s`. [Docs](docs/README.md), [Contributing](CONTRIBUTING.md)\n" % (
        "It trained to 91.00%." if broken else "It trained to 90.00%.",
        "nosuch" if broken else "demo", "frobnicate" if broken else "validate"))
    write(root, "CONTRIBUTING.md", "# Contributing\n\n[Docs](docs/README.md)\n")


def run(root, adam):
    out = subprocess.run([sys.executable, os.path.join(HERE, "check_docs.py"), "--root", root,
                          "--adam", adam], capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adam", required=True)
    adam = os.path.abspath(ap.parse_args().adam)
    expected = [
        "workers/real.cc:2: names docs/gone.md, which does not exist",
        "docs/reference/page.md:5: names `workers/missing.cc`, which does not exist",
        "this AdamJob does not validate",
        "`adam run --no-such-flag`: no such flag",
        "CI history (\"stop N\") outside docs/notes/",
        "link to reference/page.md#no-section: no heading #no-section",
        "link to reference/gone.md: no such file",
        "docs/orphan.md:1: no link leads here from README.md",
        "`make nosuch`: no such target",
        "`adam frobnicate`: no such command",
        "does not quote docs/bench/demo.json's figures",
        "no row for the chart value `image.tag`",
    ]
    failures = []
    with tempfile.TemporaryDirectory() as root:
        tree(root, broken=True)
        rc, out = run(root, adam)
        if rc != 1:
            failures.append("the broken tree exited %d, not 1" % rc)
        for e in expected:
            if e not in out:
                failures.append("not found: %s" % e)
        if "docs: 6 pages, %d problems" % len(expected) not in out:
            failures.append("expected exactly %d problems" % len(expected))
    with tempfile.TemporaryDirectory() as root:
        tree(root, broken=False)
        rc, good = run(root, adam)
        if rc != 0:
            failures.append("the mended tree exited %d:\n%s" % (rc, good))
    if failures:
        print(out)
        print("\n".join(failures))
        return 1
    print("the check found all %d faults, and none in the mended tree" % len(expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
