#!/usr/bin/env bash
# Armory across machines by hand: Ray's head on this machine, workers join it, then
# `armory cluster` places one replica per GPU over all of them (docs/scale-out.md).
# On paper: the machine this was written on has one host.
#
#   on the head:     bash scripts/cluster-multi-node.sh head 10.0.0.1
#   on each worker:  bash scripts/cluster-multi-node.sh worker 10.0.0.1
#   on the head:     bash scripts/cluster-multi-node.sh serve 10.0.0.1 8   # 8 replicas
#
# Ray's token: a head started where ~/.ray/auth_token exists requires it of every node;
# copy the head's file to each worker machine before joining (docs/scale-out.md).
set -euo pipefail
role=${1:?head, worker or serve}
head_ip=${2:?the address of the head on the cluster network}
port=${RAY_PORT:-6379}
venv=${VENV:-$(dirname "$0")/../.venv}
case "$role" in
  head)
    "$venv/bin/ray" start --head --node-ip-address="$head_ip" --port="$port" \
      --include-dashboard=false ;;
  worker)
    "$venv/bin/ray" start --address="$head_ip:$port" ;;
  serve)
    replicas=${3:?number of replicas}
    shift 3
    "$venv/bin/armory" cluster --ray-address "$head_ip:$port" --replicas "$replicas" \
      --gpus-per-replica 1 --host 0.0.0.0 --replica.host 0.0.0.0 "$@" ;;
  *)
    echo "usage: $0 head|worker|serve HEAD_IP [REPLICAS]" >&2; exit 2 ;;
esac
