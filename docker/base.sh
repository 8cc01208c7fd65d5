#!/usr/bin/env bash
# Makes the Debian base image docker/Dockerfile builds on, from Debian's packages, for a Docker
# Engine that can pull nothing (no registry): mmdebstrap writes a bookworm root file system with
# apt (the mirrors are this machine's own apt sources), without man pages, docs or locales as
# Debian's -slim images leave them out, and `docker import` makes it an image.
#
#   docker/base.sh [IMAGE]     # default adam-debian:bookworm; prints the image name
#
# An image of that name already present is kept (remove it to make a fresh one). Where a
# registry is reachable the Dockerfile's default bases (debian:bookworm, debian:bookworm-slim)
# serve instead.
set -euo pipefail
image=${1:-adam-debian:bookworm}
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi
command -v mmdebstrap >/dev/null || {
  echo "docker/base.sh: mmdebstrap is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
}
sources=$(ls /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)
[[ -n "$sources" ]] || { echo "docker/base.sh: no apt sources on this machine" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "docker/base.sh: mmdebstrap bookworm from $sources into $image" >&2
start=$SECONDS
mmdebstrap --variant=apt --mode=auto --format=tar --include=ca-certificates \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$tmp/rootfs.tar" "$sources" >"$tmp/mmdebstrap.log" 2>&1 || {
  tail -20 "$tmp/mmdebstrap.log" >&2
  exit 1
}
docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' "$tmp/rootfs.tar" "$image" >/dev/null
echo "docker/base.sh: $image made in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))" >&2
echo "$image"
