#!/usr/bin/env bash
# A learned policy end to end on SO-101 pick-and-place, from one command:
#   1. record demonstrations: `armory eval env:so101-pick policy:expert --record.dir`
#      (state and environment state, no camera), a LeRobot v3 dataset;
#   2. train a small ACT on them with LeRobot's own `lerobot-train` (CPU);
#   3. serve the checkpoint (`policy:lerobot --policy.path`) and evaluate it with
#      `armory eval` on held-out scene and variation seeds.
# Prints the evaluation's table (success with its 95% Wilson interval) at the end.
#
# Usage: scripts/learned-policy-demo.sh [options] [-- extra lerobot-train arguments]
#   --out DIR               everything goes here (default learned-policy-demo); must not exist
#   --dataset DIR           train on demonstrations recorded before (skips step 1)
#   --episodes N            demonstrations to record (default 40)
#   --robots N              robots at once, recording and evaluating (default 2)
#   --episode-time-s T      simulated seconds per demonstration (default 15)
#   --time-scale S          robots tick at S x their rate while recording (default 2)
#   --steps N               training steps (default 1000)
#   --batch-size N          training batch size (default 32)
#   --eval-episodes N       evaluation episodes (default 20)
#   --eval-time-s T         simulated seconds per evaluation episode (default 20)
#   --train-seed S          scene seed of the demonstrations and of its variation (default 0)
#   --eval-seed S           scene seed of the evaluation and of its variation (default 1000)
# Environment: ARMORY_LEROBOT_PYTHON (LeRobot's interpreter; default: what
# scripts/lerobot-env.sh prints), ARMORY (the armory command; default `armory`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "learned-policy-demo: $*" >&2; exit 2; }
log() { echo "learned-policy-demo: $*" >&2; }

out=learned-policy-demo
dataset=
episodes=40
robots=2
episode_time_s=15
time_scale=2
steps=1000
batch_size=32
eval_episodes=20
eval_time_s=20
train_seed=0
eval_seed=1000
while [[ $# -gt 0 ]]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --dataset) dataset=$2; shift 2 ;;
        --episodes) episodes=$2; shift 2 ;;
        --robots) robots=$2; shift 2 ;;
        --episode-time-s) episode_time_s=$2; shift 2 ;;
        --time-scale) time_scale=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --batch-size) batch_size=$2; shift 2 ;;
        --eval-episodes) eval_episodes=$2; shift 2 ;;
        --eval-time-s) eval_time_s=$2; shift 2 ;;
        --train-seed) train_seed=$2; shift 2 ;;
        --eval-seed) eval_seed=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
for name in episodes robots steps batch_size eval_episodes train_seed eval_seed; do
    [[ ${!name} =~ ^[0-9]+$ ]] || die "--${name//_/-} must be a whole number, got '${!name}'"
done
[[ $train_seed != "$eval_seed" ]] || die "--train-seed and --eval-seed must differ (held-out scenes)"
[[ -e $out ]] && die "--out $out already exists"
[[ -z $dataset || -f $dataset/meta/info.json ]] || die "--dataset $dataset is not a LeRobot dataset"

python=${ARMORY_LEROBOT_PYTHON:-}
if [[ -z $python ]]; then
    python=$(bash "$root/scripts/lerobot-env.sh") || die "could not build LeRobot's environment"
fi
[[ -x $python ]] || die "ARMORY_LEROBOT_PYTHON=$python is not an interpreter"
"$python" -c 'import accelerate' 2>/dev/null ||
    die "lerobot-train needs accelerate in $python (envs/lerobot/requirements.txt; rebuild with scripts/lerobot-env.sh)"
read -r -a armory <<<"${ARMORY:-armory}"
export ARMORY_LEROBOT_PYTHON=$python HF_HUB_OFFLINE=1
export HF_HOME=${HF_HOME:-$out/hf-home}  # nothing is downloaded; keeps caches out of ~
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ -n $dataset ]] && dataset=$(cd "$dataset" && pwd)
train=$out/train
checkpoint=$train/checkpoints/last/pretrained_model
started=$SECONDS

if [[ -z $dataset ]]; then
    dataset=$out/dataset
    log "[1/3] recording $episodes expert demonstrations (scene seed $train_seed)"
    "${armory[@]}" eval env:so101-pick policy:expert --robots "$robots" --episodes "$episodes" \
        --episode-time-s "$episode_time_s" --time-scale "$time_scale" --seed "$train_seed" \
        --variation --variation.seed "$train_seed" --record.dir "$dataset" \
        --out "$out/demonstrations" --no-progress
else
    log "[1/3] training on the demonstrations in $dataset (recorded with --train-seed's scenes)"
fi
recorded=$SECONDS

log "[2/3] training ACT for $steps steps (batch $batch_size) with lerobot-train"
"$(dirname "$python")/lerobot-train" \
    --dataset.repo_id=armory/eval --dataset.root="$dataset" \
    --policy.type=act --policy.device=cpu --policy.push_to_hub=false \
    --policy.dim_model=128 --policy.dim_feedforward=512 --policy.n_heads=4 \
    --policy.n_encoder_layers=2 --policy.n_decoder_layers=1 \
    --policy.chunk_size=10 --policy.n_action_steps=10 --policy.use_vae=false \
    --policy.optimizer_lr=0.001 --policy.optimizer_weight_decay=0.0001 \
    --steps="$steps" --batch_size="$batch_size" --num_workers=0 --seed="$train_seed" \
    --save_freq="$steps" --log_freq="$(( steps < 50 ? 1 : steps / 20 ))" \
    --wandb.enable=false --output_dir="$train" "$@" >"$out/train.log" 2>&1 ||
    { tail -n 20 "$out/train.log" >&2; die "lerobot-train failed (log: $out/train.log)"; }
grep -o 'step:[0-9]* .*loss:[0-9.]*' "$out/train.log" | tail -n 1 >&2 || true
[[ -f $checkpoint/config.json ]] || die "no checkpoint at $checkpoint (log: $out/train.log)"
trained=$SECONDS

log "[3/3] evaluating the served checkpoint on $eval_episodes held-out scenes (seed $eval_seed)"
"${armory[@]}" eval env:so101-pick policy:lerobot --policy.path "$checkpoint" \
    --robots "$robots" --episodes "$eval_episodes" --episode-time-s "$eval_time_s" \
    --seed "$eval_seed" --variation --variation.seed "$eval_seed" \
    --out "$out/evaluation" --no-progress
log "done in $((SECONDS - started)) s (recording $((recorded - started)) s, training" \
    "$((trained - recorded)) s, evaluation $((SECONDS - trained)) s); results:" \
    "$out/evaluation/results.json"
