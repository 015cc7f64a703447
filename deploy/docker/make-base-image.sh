#!/usr/bin/env bash
# Makes the public base image the Dockerfiles start FROM (python:3.11-slim-bookworm) on this
# machine, from Debian's packages, for tests and CI where no image registry is reachable.
# A user with a registry never runs this: `docker build` pulls the real image.
#
#   deploy/docker/make-base-image.sh [IMAGE]      (default python:3.11-slim-bookworm)
#
# debootstrap --variant=minbase bookworm, plus Python 3.11 (python3, python3-venv, pip) and
# ca-certificates, then `docker import`. Idempotent: an existing IMAGE is kept (seconds).
# Needs root (debootstrap), debootstrap and a Debian mirror ($DEBIAN_MIRROR).
set -euo pipefail

image=${1:-python:3.11-slim-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image exists: kept"
    exit 0
fi
root=$(mktemp -d /tmp/det-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# `python` as in the public image; no package lists or caches in the image.
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$image" >/dev/null
echo "$image made from Debian bookworm packages"
