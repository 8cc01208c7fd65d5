#!/usr/bin/env bash
# Regenerates go.mod's replace lines for Kubernetes' staging modules from k8s.io/kubernetes' own
# go.mod. Upstream points each staging module (k8s.io/api, k8s.io/client-go, ...) at a folder of
# its own tree and requires it at v0.0.0; a module that imports k8s.io/kubernetes must point each
# at the published release instead (v0.X.Y for Kubernetes v1.X.Y). Run it after changing the
# k8s.io/kubernetes version in go.mod, then `go mod tidy`.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"

kube=$(go mod edit -json | python3 -c '
import json, sys
mods = [r["Version"] for r in json.load(sys.stdin).get("Require") or [] if r["Path"] == "k8s.io/kubernetes"]
print(mods[0] if mods else "")')
[[ -n "$kube" ]] || { echo "gen-replace.sh: go.mod requires no k8s.io/kubernetes" >&2; exit 1; }
staging="v0.${kube#v1.}"
upstream_mod=$(go mod download -json "k8s.io/kubernetes@$kube" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')

# Every "k8s.io/NAME => ./staging/src/k8s.io/NAME" of upstream's replace block becomes
# "k8s.io/NAME => k8s.io/NAME vSTAGING"; replace lines of ours for other modules are kept.
# Replace lines of an earlier run go first, in case upstream dropped a staging module since.
mapfile -t stale < <(go mod edit -json | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["Old"]["Path"].startswith("k8s.io/") and r["New"]["Path"] == r["Old"]["Path"]:
        print(r["Old"]["Path"])')
for name in "${stale[@]}"; do go mod edit -dropreplace="$name"; done
mapfile -t names < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/\1$#\1#p' "$upstream_mod")
[[ ${#names[@]} -gt 0 ]] || { echo "gen-replace.sh: no staging replace lines in $upstream_mod" >&2; exit 1; }
for name in "${names[@]}"; do
  go mod edit -replace="$name=$name@$staging"
done
echo "gen-replace.sh: ${#names[@]} staging modules of Kubernetes $kube pinned at $staging"
