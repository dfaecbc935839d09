#!/usr/bin/env bash
# The sampler thread against the in-thread samplers on a GPU machine, run after run until a deadline (issue 16):
# bench_sampler_signal.py (the mechanism: walk-only thread, ITIMER_REAL signal, the C clock, its pending calls with and
# without a walk, the plugin's samplers) and bench_real_models.py --modes $MODES (through the plugin), in turn. Each
# run's table goes to stdout, which the device tool brings back whole (it brings back 8 files of $OUT at most: session
# 47 lost 6 runs of 9 writing two a run), and its log under $OUT (default ./sampler-pairs-logs). One call:
#
#   COMMIT=abc1234 DEADLINE_S=540 bash benchmarks/sampler_pairs.sh
#
# DEADLINE_S: seconds from the start after which no run begins (runs take ~20 s, `generate`'s ~50 s);
# MODELS: bench_real_models' models in turn (default "vit_b16 vit_b16 gpt2_generate"); REPS (8); CALLS (30);
# MODES: bench_real_models' modes (default thread,pending,signal); MECHANISM: bench_sampler_signal's modes (default
# thread,clock,plugin,plugin-signal,pending,pending-nop,plugin-pending);
# SMOKE=1: both scripts with --cpu-smoke (tiny models on the CPU: checks this script, measures nothing).
set -u
cd "$(dirname "$0")/.." || exit 2
LOGS="${OUT:-$PWD/sampler-pairs-logs}"
mkdir -p "$LOGS"
T0=$(date +%s)
DEADLINE_S="${DEADLINE_S:-540}"
if ls .whl/*.whl >/dev/null 2>&1; then  # cupti-python, as tests/gpu/run_on_gpu.sh installs it
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$LOGS/install.log" 2>&1 &&
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -z "${SMOKE:-}" ]]; then  # a GPU machine must build the native extensions
    INFERSCOPE_FORCE_NATIVE_BUILD=1 python3 -m pip install -q --no-build-isolation --no-deps -e . >>"$LOGS/install.log" 2>&1 ||
        { echo "install failed: $LOGS/install.log"; exit 1; }
fi
echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
read -r -a models <<<"${MODELS:-vit_b16 vit_b16 gpt2_generate}"
k=0
while :; do
    left=$((DEADLINE_S - ($(date +%s) - T0)))
    ((left < 60)) && break
    if ((k % (${#models[@]} + 1) == 0)); then
        echo "### $k mechanism, vit_b16 ($(date -u +%H:%M:%S))"
        timeout "$left" python3 benchmarks/bench_sampler_signal.py --model vit_b16 --reps 8 --calls 30 ${SMOKE:+--cpu-smoke} \
            --modes "${MECHANISM:-thread,clock,plugin,plugin-signal,pending,pending-nop,plugin-pending}" \
            >"$LOGS/run$k.log" 2>&1
        grep -E "^ *[a-z-]+: median call|^plain" "$LOGS/run$k.log"
    else
        m=${models[$((k % (${#models[@]} + 1) - 1))]}
        calls=${CALLS:-30}
        [[ $m == gpt2_generate ]] && calls=10
        echo "### $k $m, 1 + $calls calls ($(date -u +%H:%M:%S))"
        timeout "$left" python3 benchmarks/bench_real_models.py --models "$m" --calls "$calls" --reps "${REPS:-8}" \
            --modes "${MODES:-thread,pending,signal}" --json "$LOGS/run$k.json" ${SMOKE:+--cpu-smoke} >"$LOGS/run$k.log" 2>&1
        grep -E "^## |^\| [a-z_]+ \| [-+]" "$LOGS/run$k.log" | sed -E 's/ \(target.*//'
    fi
    k=$((k + 1))
done
