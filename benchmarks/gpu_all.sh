#!/usr/bin/env bash
# The GPU benchmarks in one device call: the presets' acceptance (their VRAM promises under a hard
# cap, lowest first), then the training speed, each stopped in time so the whole ends within DEADLINE_S.
#
#   benchmarks/gpu_all.sh OUT_DIR [DEADLINE_S]        # on the GPU machine (default deadline 520 s)
#   DRY_RUN=1 benchmarks/gpu_all.sh OUT_DIR 150       # anywhere: tiny models on the CPU, the script only
#
# OUT_DIR ends with at most 8 files: env.txt (GPU, driver, versions), log.txt (both scripts'
# output), gpu_acceptance.json/.md and results.json/table.md. Each script rewrites its table
# after every run, so a cut-short call still returns what finished. ACCEPT_SHARE (default 65)
# is the percentage of the time the acceptance gets (0: the speed benchmark alone); PYTHON the
# interpreter (default python3); ACCEPT_ARGS, when set, replaces the acceptance's arguments below
# (e.g. ACCEPT_ARGS="--cap --only flux2-klein-9b-lora-8gb"); SPEED_ARGS adds arguments to the speed
# benchmark (e.g. SPEED_ARGS="--only flux2-klein zimage").
#
# The acceptance proves the low-VRAM promises: by default `--cap` (each run's allocator capped at its
# promise less the CUDA context) with six presets, run lowest promise first as their models are ready:
# flux2-klein-4b-lora-6gb, sd15-lora-6gb, sdxl-lora-6gb (6 GB), flux2-klein-4b-lora-8gb, zimage-lora-8gb
# (8 GB), and flux2-klein-4b-lora-24gb, the 24 GB preset the [klein] 4B low-VRAM runs' phases are held
# against (its model is written already). Their four models are written one at a time ([klein] 4B,
# 15 GB, 40-70 s; SD1.5 and SDXL 10-30 s each; Z-Image, 19 GB, 50-90 s: 110-200 s in all, the runs of
# the models written going on meanwhile, up to three side by side, each at most 120 s): in 65 % of 520 s
# (338 s, no run started after 208 s) the 6 and 8 GB presets start, and the 24 GB one if a run ends
# in time. Left for calls of their own: flux2-klein-9b-lora-8gb (a 32 GB model, 90-150 s to write,
# that the 64 GB disk holds only beside little else) and zimage-lora-24gb (its model is written last).
#
# Time per speed case on an H200 (estimates until a run is made; a case past 120 s is stopped):
# writing a full-size random-weight pipeline once per family (SD1.5/SDXL/SD3 10-30 s, [klein] 4B
# about 16 GB 40-70 s, Z-Image about 20 GB 50-90 s; before the case's own timeout starts, under a
# limit of 120 s of its own), a bare case 10-25 s, a studio case 20-40 s after the write (loading,
# caching, 16 steps: 1-2 s each for [klein] and Z-Image at batch 4), a compiled case 60-120 s cold
# (blocks), a CUDA-graphs case 90-180 s cold (the whole denoiser). The default share (65 % of 520 s)
# leaves about 170 s: the batch-4 eager cases of the first family or two; ACCEPT_SHARE=0 with 540 s
# measures the batch-4 eager cases of all five families and some compiled ones.
set -u
out=${1:?usage: benchmarks/gpu_all.sh OUT_DIR [DEADLINE_S]}
deadline=${2:-520}
py=${PYTHON:-python3}
share=${ACCEPT_SHARE:-65}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
dry=()
run_timeout=120
case_timeout=120
write_timeout=120
if [ -n "${DRY_RUN:-}" ]; then
    dry=(--dry-run)
    run_timeout=60
    case_timeout=60
    write_timeout=60
fi
# The acceptance's arguments (the header says why these); ACCEPT_ARGS, when set, replaces them.
accept_default="--cap --only flux2-klein-4b-lora-6gb sd15-lora-6gb sdxl-lora-6gb flux2-klein-4b-lora-8gb"
accept_default+=" zimage-lora-8gb flux2-klein-4b-lora-24gb"
accept_args=${ACCEPT_ARGS-$accept_default}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    "$py" -c "import importlib.metadata as m, platform; print('python', platform.python_version()); \
print(*(f'{p} {m.version(p)}' for p in ('torch', 'diffusers', 'transformers', 'peft', 'accelerate')), sep='\n')" \
        2>&1
} > "$out/env.txt"

# Acceptance: no run starts after its budget; a run lasts at most run_timeout; then the rest is speed's.
accept=$(( deadline * share / 100 ))
if [ "$accept" -gt 0 ]; then
    budget=$(( accept - run_timeout - 10 ))
    [ "$budget" -lt 10 ] && budget=10
    echo "[$(elapsed) s] acceptance: ${accept} s, no run started after ${budget} s" >> "$out/log.txt"
    # shellcheck disable=SC2086  # the arguments are words
    timeout -k 10 "$accept" "$py" "$here/gpu_acceptance.py" "${dry[@]}" $accept_args --out "$out" \
        --budget-s "$budget" --run-timeout "$run_timeout" >> "$out/log.txt" 2>&1
    code=$?
    echo "[$(elapsed) s] acceptance exit $code" >> "$out/log.txt"
else
    echo "[$(elapsed) s] acceptance: not run (ACCEPT_SHARE=0)" >> "$out/log.txt"
fi

left=$(( deadline - $(elapsed) - 15 ))
if [ "$left" -gt 30 ]; then
    budget=$(( left - case_timeout - 10 ))
    [ "$budget" -lt 5 ] && budget=5
    echo "[$(elapsed) s] speed: ${left} s, no case started after ${budget} s" >> "$out/log.txt"
    # shellcheck disable=SC2086
    timeout -k 10 "$left" "$py" "$here/gpu_train_speed.py" "${dry[@]}" ${SPEED_ARGS:-} --out "$out" --budget-s "$budget" \
        --case-timeout-s "$case_timeout" --write-timeout-s "$write_timeout" >> "$out/log.txt" 2>&1
    code=$?
    echo "[$(elapsed) s] speed exit $code" >> "$out/log.txt"
else
    echo "[$(elapsed) s] speed: not run, ${left} s left" >> "$out/log.txt"
fi
cat "$out/gpu_acceptance.md" "$out/table.md" 2>/dev/null
echo "done in $(elapsed) s of ${deadline} s; files in $out: $(ls "$out" | wc -l)"
