#!/usr/bin/python3
"""The docs test: what the documentation names must exist.

Checks README.md, CONTRIBUTING.md and every page under docs/:
  - every relative link resolves to a file, and its #anchor to a heading of that file;
  - every page under docs/ is reachable by links from README.md (no page a reader cannot find);
  - every repository path in backquotes (`workers/...`, `tests/...`, `docs/...`, ...) exists;
  - every `make TARGET` names a target of the Makefile;
  - every `adam COMMAND --flag` names a command and a flag `adam COMMAND --help` lists;
  - every YAML block holding an AdamJob passes `adam validate`;
  - every recorded benchmark with a "readme" line (docs/bench/*.json) is quoted word for word in
    README.md, so the README's figures are the latest recorded ones;
  - every value in the chart's values.schema.json has a row in docs/reference/chart-values.md;
  - no page outside docs/notes/ speaks of CI "stop N" (history belongs in the notes).
Also every docs page that source files name in their comments exists.

  tests/docs/check_docs.py --root REPO --adam build/adam
Prints every problem as FILE:LINE: what, and exits 1 if there is any.
"""
import argparse, glob, json, os, re, subprocess, sys, tempfile

TOP = ("workers/", "operator/", "crds/", "charts/", "docker/", "proto/", "tests/", "docs/",
       "examples/", "bench/", "scripts/", ".ci/")
TOP_FILES = {"Makefile", "CMakeLists.txt", "README.md", "CONTRIBUTING.md", ".clang-format",
             ".clang-tidy"}
SOURCE_EXT = (".cc", ".h", ".go", ".py", ".sh", ".yaml", ".txt", ".tpl", ".json", ".proto")

problems = []


def problem(path, line, what):
    problems.append("%s:%d: %s" % (path, line, what))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, fence = set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    fence = not fence
                elif not fence and line.startswith("#"):
                    base, n = slug(line.lstrip("#")), 0
                    name = base
                    while name in found:
                        n += 1
                        name = "%s-%d" % (base, n)
                    found.add(name)
        cache[path] = found
    return cache[path]


def blocks(text):
    """(line number, is code, text) for each line, with fenced blocks marked as code, and the
    fenced blocks themselves as (first line, language, body)."""
    lines, fenced, fence, lang, start, body = [], [], False, "", 0, []
    for i, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            if fence:
                fenced.append((start, lang, "\n".join(body)))
            else:
                lang, start, body = line[3:].strip(), i + 1, []
            fence = not fence
            continue
        lines.append((i, fence, line))
        if fence:
            body.append(line)
    return lines, fenced


def placeholder(path):
    return bool(re.search(r"[*<>{}]|\.\.\.|\bDIR\b|\bCLASS\b|\bNAME\b|\bJOB\b|\bROLE\b|\bN\b|"
                          r"\bID\b|\bI\b|\bK\b|XXX|\$", path)) or re.search(r"/[A-Z][A-Z_]+(/|\.|$)", path)


def check_path(root, md, n, token):
    token = token.strip().rstrip(".,:;)")
    token = re.sub(r":\d+(-\d+)?$", "", token)          # file:line
    token = token.split("#")[0]
    if " " in token or placeholder(token):
        return
    if not (token.startswith(TOP) or token in TOP_FILES):
        return
    if not os.path.lexists(os.path.join(root, token)):
        problem(md, n, "names `%s`, which does not exist" % token)


def makefile_targets(root):
    targets = set()
    with open(os.path.join(root, "Makefile")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+):", line)
            if m:
                targets.add(m.group(1))
    return targets


class Cli:
    def __init__(self, adam):
        self.adam, self.help = adam, {}
        top = self.run([])
        self.commands = set(re.findall(r"^\s{2}([a-z][a-z-]*)\s", top.split("Subcommands:")[-1], re.M))

    def run(self, args):
        out = subprocess.run([self.adam] + args + ["--help"], capture_output=True, text=True,
                             timeout=60)
        return out.stdout + out.stderr

    def flags(self, command):
        if command not in self.help:
            self.help[command] = set(re.findall(r"(--[a-z][a-z0-9-]*)", self.run([command])))
        return self.help[command]


def check_adam_line(cli, md, n, text):
    # `adam` where a command starts: a line, a pipe or `&&`, or a code span.
    for m in re.finditer(r"(?:^\s*(?:\$ )?|[(|;&]\s*)(?:\./build/|build/|\$\(BUILD\)/|\./\$\(BUILD\)/)?adam "
                         r"([a-z][a-z-]*)((?: +[^\s`#|;)]+)*)", text):
        command, rest = m.group(1), m.group(2)
        if command not in cli.commands:
            problem(md, n, "`adam %s`: no such command (adam --help)" % command)
            continue
        known = cli.flags(command)
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
            if flag not in known and flag != "--help":
                problem(md, n, "`adam %s %s`: no such flag (adam %s --help)" % (command, flag, command))


def validate_yaml(adam, md, start, body):
    if not re.search(r"^kind: AdamJob\s*$", body, re.M) or re.search(r"(:\s*\.\.\.|^\s*\.\.\.)", body, re.M):
        return  # not a job, or a fragment ("spec: ...") that says so
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(body + "\n")
        name = f.name
    try:
        out = subprocess.run([adam, "validate", name], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            problem(md, start, "this AdamJob does not validate: " +
                    (out.stdout + out.stderr).replace(name, "block").strip())
    finally:
        os.unlink(name)


def check_page(root, md, cli, targets):
    rel = os.path.relpath(md, root)
    with open(md, encoding="utf-8") as f:
        text = f.read()
    lines, fenced = blocks(text)
    links = []
    for n, code, line in lines:
        if code:
            for m in re.finditer(r"\bmake ([a-z][a-z0-9-]*)", line):
                if m.group(1) not in targets:
                    problem(rel, n, "`make %s`: no such target" % m.group(1))
            if cli and not line.lstrip().startswith("#"):
                check_adam_line(cli, rel, n, line.split(" #")[0])
            continue
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", line):
            links.append((n, m.group(1)))
        for m in re.finditer(r"`([^`]+)`", line):
            span = m.group(1)
            check_path(root, rel, n, span)
            for t in re.findall(r"\bmake ([a-z][a-z0-9-]*)", span):
                if t not in targets:
                    problem(rel, n, "`make %s`: no such target" % t)
            if cli:
                check_adam_line(cli, rel, n, span)
        for m in re.finditer(r"(?<![\w/.`])(docs/[\w./-]+\.md)", line):
            check_path(root, rel, n, m.group(1))
        if not rel.startswith("docs/notes/") and re.search(r"\b[Ss]top \d+\b", line):
            problem(rel, n, "CI history (\"stop N\") outside docs/notes/")
    for start, lang, body in fenced:
        if cli and lang in ("yaml", "yml"):
            validate_yaml(cli.adam, rel, start, body)
    out = []
    for n, target in links:
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(dest):
            problem(rel, n, "link to %s: no such file" % target)
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            problem(rel, n, "link to %s: no heading #%s in %s" % (target, anchor,
                                                                 os.path.relpath(dest, root)))
        out.append(dest)
    return out


def check_sources(root):
    """Comments in the code and the scripts name docs pages: they must exist."""
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("build", ".git")) and d != "corpus"
                       and "node_modules" not in d]
        for name in files:
            if not (name.endswith(SOURCE_EXT) or name in ("Makefile", "Dockerfile", "run")):
                continue
            path = os.path.join(dirpath, name)
            if os.path.relpath(path, root).startswith(os.path.join("tests", "docs")):
                continue  # this check and its test name pages that do not exist on purpose
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            rel = os.path.relpath(path, root)
            for n, line in enumerate(text.split("\n"), 1):
                for m in re.finditer(r"(?<![\w/.])(docs/[\w./-]+\.md)", line):
                    if not os.path.exists(os.path.join(root, m.group(1))):
                        problem(rel, n, "names %s, which does not exist" % m.group(1))


def check_figures(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for path in sorted(glob.glob(os.path.join(root, "docs", "bench", "*.json"))):
        with open(path) as f:
            record = json.load(f)
        line = record.get("readme")
        if line and line not in readme:
            problem("README.md", 1, "does not quote %s's figures: %s" %
                    (os.path.relpath(path, root), line))


def check_chart_values(root):
    with open(os.path.join(root, "charts", "adam", "values.schema.json")) as f:
        schema = json.load(f)
    page = os.path.join(root, "docs", "reference", "chart-values.md")
    with open(page, encoding="utf-8") as f:
        text = f.read()

    def walk(prefix, node):
        for key, value in node.get("properties", {}).items():
            name = prefix + key
            if value.get("type") == "object" and "properties" in value and key not in (
                    "resources",):
                walk(name + ".", value)
            elif "`%s`" % name not in text:
                problem("docs/reference/chart-values.md", 1, "no row for the chart value `%s`" % name)
    walk("", schema)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--adam", default="", help="the adam binary, to check commands and manifests")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    cli = Cli(a.adam) if a.adam else None
    targets = makefile_targets(root)
    pages = [os.path.join(root, "README.md"), os.path.join(root, "CONTRIBUTING.md")]
    pages += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    linked = {}
    for md in pages:
        linked[md] = check_page(root, md, cli, targets)
    # Every page is reachable from the README.
    seen, todo = set(), [os.path.join(root, "README.md")]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        todo += [p for p in linked.get(page, []) if p.endswith(".md")]
    for md in pages:
        if md not in seen:
            problem(os.path.relpath(md, root), 1, "no link leads here from README.md")
    check_sources(root)
    check_figures(root)
    check_chart_values(root)
    for p in problems:
        print(p)
    print("docs: %d pages, %d problems" % (len(pages), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
