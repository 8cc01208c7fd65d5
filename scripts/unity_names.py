#!/usr/bin/env python3
"""Names a unity build would see twice: the sanitizer trees (scripts/configure-asan.sh) compile a
target's sources eight to a batch, in the order its CMakeLists.txt lists them, as one translation
unit. A helper defined in two files of one batch -- in an anonymous namespace, or static --
is then defined twice, or overloaded ambiguously, though the Release tree (one file at a time)
builds. Reads every CMakeLists.txt's adam_library, adam_test, add_library and add_executable
calls; prints each name defined at file scope in two files of one batch, and exits 1 if any."""
import pathlib
import re
import sys

BATCH = 8  # CMake's UNITY_BUILD_BATCH_SIZE default
ROOT = pathlib.Path(__file__).resolve().parent.parent
CALL = re.compile(r"\b(adam_library|adam_test|add_library|add_executable)\s*\(([^)]*)\)", re.S)
KEYWORDS = {"SOURCES", "DEPS", "STATIC", "SHARED", "OBJECT", "SERIAL", "INTERFACE"}
# File-scope definitions: a function (its name before the parenthesis), a type, a constant.
FUNCTION = re.compile(r"^(?:static\s+|inline\s+|constexpr\s+)*[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]"
                      r"([A-Za-z_]\w*)\s*\([^;]*$")
TYPE = re.compile(r"^(?:struct|class|enum class|enum|union)\s+([A-Za-z_]\w*)\b[^;]*$")
CONSTANT = re.compile(r"^(?:static\s+)?(?:inline\s+)?(?:constexpr|const)\b.*?\b([A-Za-z_]\w*)"
                      r"(?:\[\])?\s*(?:=|\{)")
ALIAS = re.compile(r"^using\s+([A-Za-z_]\w*)\s*=")
NOT_NAMES = {"TEST", "TEST_F", "TEST_P", "TYPED_TEST", "INSTANTIATE_TEST_SUITE_P", "if", "for",
             "while", "switch", "return", "operator"}


def file_scope_names(path):
    """Names defined at column 0 in an anonymous namespace, or static, in `path`, each with the
    namespaces around it ("adam::op::{anonymous}::Name")."""
    names = set()
    stack = []
    for line in path.read_text(errors="replace").splitlines():
        opened = re.match(r"^namespace\s*([\w:]*)\s*\{", line)
        if opened:
            stack.append(opened.group(1) or "{anonymous}")
            continue
        if line.startswith("}  // namespace") and stack:
            stack.pop()
            continue
        if not line or line[0] in " \t#/}":
            continue
        if "{anonymous}" not in stack and not line.startswith("static "):
            continue
        for pattern in (TYPE, ALIAS, CONSTANT, FUNCTION):
            m = pattern.match(line)
            if m and m.group(1) not in NOT_NAMES:
                names.add("::".join(stack + [m.group(1)]))
                break
    return names


def targets():
    """(CMakeLists.txt, target, sources in order) for every target, skipped files left out."""
    for cmake in sorted(ROOT.rglob("CMakeLists.txt")):
        if any(p.startswith("build") or p.startswith(".") for p in cmake.relative_to(ROOT).parts):
            continue
        text = re.sub(r"#[^\n]*", "", cmake.read_text())
        skipped = set()
        for m in re.finditer(r"set_source_files_properties\(([^)]*?)PROPERTIES\s+"
                             r"SKIP_UNITY_BUILD_INCLUSION\s+ON", text):
            skipped.update(m.group(1).split())
        off = set(re.findall(r"set_target_properties\((\w+)\s+PROPERTIES\s+UNITY_BUILD\s+OFF",
                             text))
        for m in CALL.finditer(text):
            words = m.group(2).split()
            if not words or words[0] in off:
                continue
            name, rest = words[0], words[1:]
            sources, taking = [], m.group(1) in ("add_library", "add_executable")
            for w in rest:
                if w in KEYWORDS:
                    taking = w == "SOURCES"
                elif taking and w.endswith((".cc", ".cpp")) and "$" not in w and w not in skipped:
                    sources.append(cmake.parent / w)
            yield cmake, name, sources


def main():
    found = 0
    for cmake, name, sources in targets():
        for start in range(0, len(sources), BATCH):
            seen = {}
            for src in sources[start:start + BATCH]:
                if not src.exists():
                    continue
                for n in file_scope_names(src):
                    seen.setdefault(n, []).append(src.relative_to(ROOT))
            for n, files in sorted(seen.items()):
                if len(files) > 1:
                    found += 1
                    print(f"  {name}: {n} defined in " + " and ".join(map(str, files)))
    if found:
        print(f"unity: {found} name(s) defined twice in one unity batch: rename one, or move the "
              "helper to a header both include")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
