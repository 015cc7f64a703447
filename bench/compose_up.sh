#!/usr/bin/env bash
# `det deploy local cluster-up --docker`, cold (a new data folder: new volumes, the images
# already built by `det deploy local build-images`) and warm (up again after cluster-down,
# the volumes kept), and the images' sizes. Removes its cluster and volumes at the end.
#
#   bash bench/compose_up.sh
set -euo pipefail
cd "$(dirname "$0")/.."
folder=$(mktemp -d /tmp/det-compose-bench.XXXXXX)
data="$folder/data"
export DET_CONFIG_DIR="$folder/cli"
ports=(--master-port 18480 --nats-port 18422 --postgres-port 18433)
up() { det deploy local cluster-up --docker --no-gpu --data-dir "$data" "${ports[@]}" >/dev/null; }
seconds() { python3 -c "import sys, time; print(f'{time.monotonic() - float(sys.argv[1]):.1f}')" "$1"; }
now() { python3 -c 'import time; print(time.monotonic())'; }

start=$(now); up; echo "cluster-up --docker cold: $(seconds "$start") s"
det deploy local cluster-down --docker --data-dir "$data" >/dev/null
start=$(now); up; echo "cluster-up --docker warm: $(seconds "$start") s"
python3 -c "import sys; from pathlib import Path; from deploy.compose import cluster
cluster.compose(Path(sys.argv[1]), 'down', '--volumes', '--remove-orphans')" "$data"
rm -rf "$folder"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' 'determined-es/*'
