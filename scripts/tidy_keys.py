#!/usr/bin/env python3
"""Prints "KEY FILE" for each source file given on stdin: the SHA-256 of what clang-tidy's verdict
on it depends on -- clang-tidy's version, .clang-tidy, the file's compile flags and its
preprocessed text (every header it includes, expanded), with the checkout's own path taken out so
that two clones of one commit agree. scripts/tidy.sh skips a file whose key it has seen clean.

usage: scripts/tidy_keys.py BUILD_DIR < files
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def main():
    build = sys.argv[1]
    root = os.getcwd()
    commands = {os.path.realpath(e["file"]): e for e in json.load(open(os.path.join(build, "compile_commands.json")))}
    version = subprocess.run(["clang-tidy-14", "--version"], capture_output=True, text=True, check=True).stdout
    config = open(".clang-tidy", "rb").read()

    def key(path):
        entry = commands.get(os.path.realpath(path))
        if entry is None:
            return None
        argv = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
        # The compiler and its flags, without the object file and the -c: then -E -P instead.
        flags, skip = [], False
        for a in argv[1:]:
            if skip:
                skip = False
                continue
            if a in ("-o", "-c"):
                skip = True
                continue
            flags.append(a)
        text = subprocess.run([argv[0], *flags, "-E", "-P", entry["file"]], cwd=entry["directory"],
                              capture_output=True, check=True).stdout
        h = hashlib.sha256()
        for part in (version.encode(), config, " ".join(flags).replace(root, "@ROOT@").encode(),
                     text.replace(root.encode(), b"@ROOT@")):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return h.hexdigest()

    files = [line.strip() for line in sys.stdin if line.strip()]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for path, k in zip(files, pool.map(key, files)):
            print(f"{k or 'none'} {path}")


if __name__ == "__main__":
    main()
