#!/bin/bash
# A lent GPU slot's one command (issue 63), its budget written down. A slot is 15 minutes of device time in
# all, the machine's start included; one command runs at most 600 s. This one plans 560 s:
#   1. gpu_check.py's default steps (probe, gpu_tests, decode_compiled): 325 s planned, stopped by 380 s;
#   2. the default screen on this one GPU (screen.py --gpus=0, runs per GPU from its memory and cores) for
#      the time left. Every run checkpoints: `bash gpu/screen_slot.sh screen` on the same warm machine goes on
#      where it stopped, and a finished screen writes its report again at no cost.
# Everything it writes is under $OUT: machine.txt, gpu_check.json and .log, screen_plan.txt (the dry run),
# screen.log, and the screen's report, figures and every run's metrics.jsonl and config.json.
# Usage: bash gpu/screen_slot.sh [all|screen]     TINY=1: the same commands as a CPU rehearsal (minutes).
set -u
MODE=${1:-all}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
ROOT=${SCREEN_ROOT:-/tmp/screen-gpu}
cd "$(dirname "$0")/.."
PY=${PY:-python3}
START=$SECONDS
left() { echo $(( ${BUDGET:-560} - (SECONDS - START) )); }

if [ "${TINY:-0}" != 1 ]; then  # GPT-2-sized checks on a CPU would spend the slot on nothing: stop at once
  if ! command -v nvidia-smi >/dev/null; then why="nvidia-smi is not installed"
  elif ! nvidia-smi -L >/dev/null 2>&1; then why="nvidia-smi -L lists no GPU"
  elif ! $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then why="torch sees no CUDA GPU"
  else why=""; fi
  if [ -n "$why" ]; then
    echo "screen_slot.sh: no GPU here ($why): run it on the lent GPU machine, or TINY=1 to rehearse it on a CPU" >&2
    exit 1
  fi
fi
{ nvidia-smi; $PY -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())"; nproc; } > "$OUT/machine.txt" 2>&1

if [ "${TINY:-0}" = 1 ]; then  # the rehearsal: a tiny preset and a two-setting screen of a few steps, on the CPU
  CHECK="--preset=tiny --device=cpu --only=probe --budget_s=60"
  TINY_SCREEN=$(mktemp --suffix=.json)
  cat > "$TINY_SCREEN" <<'JSON'
{"settings": [{"name": "mq", "task": "mqar", "settings": {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 2},
  "max_iters": 16, "num_train": 64, "num_test": 32}], "grid": "1e-3,3e-2"}
JSON
  SCREEN=(--screen="$TINY_SCREEN" --seeds=2,3 --max_extra_seeds=0 --n_layer=1 --n_embd=16 --n_head=2 --device=cpu)
else
  CHECK="--budget_s=330"
  SCREEN=()
fi

if [ "$MODE" = all ]; then
  timeout -k 15 -s TERM 380 $PY gpu_check.py $CHECK --out="$OUT/gpu_check.json" > "$OUT/gpu_check.log" 2>&1
  echo "gpu_check rc=$? at $((SECONDS-START)) s"
fi

$PY screen.py config/synth_*.py "${SCREEN[@]}" --gpus=0 --out_root="$ROOT" --dry_run > "$OUT/screen_plan.txt" 2>&1
grep -E "at a time|GPU plan" "$OUT/screen_plan.txt"
if [ "$(left)" -gt 60 ]; then
  timeout -k 15 -s INT $(( $(left) - 20 )) $PY screen.py config/synth_*.py "${SCREEN[@]}" --gpus=0 \
    --out_root="$ROOT" --progress_every=30 >> "$OUT/screen.log" 2>&1
  echo "screen rc=$? at $((SECONDS-START)) s (130 or 124: stopped by the budget; run again to go on)"
fi
# What the screen made so far, small files only (checkpoints stay on the machine).
(cd "$ROOT" 2>/dev/null && find . -maxdepth 1 -name 'screen*' -o -maxdepth 1 -name '*.png' -o -maxdepth 3 \
  \( -name metrics.jsonl -o -name config.json \) | tar -cf - -T - 2>/dev/null) | tar -xf - -C "$OUT" 2>/dev/null
echo "done at $((SECONDS-START)) s"
