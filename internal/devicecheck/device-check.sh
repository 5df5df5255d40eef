#!/bin/bash
# The device check (issue 26): on a lent GPU machine, in one call, what CPU
# runs cannot prove; on any other machine (CI: devicecheck_test.go) the
# same parts, each GPU one skipped saying why.
#
#   internal/devicecheck/device-check.sh [OUTDIR]
#
# OUTDIR (default $OUT, else ./device-check-out) gets results.txt (the
# result lines) and six logs (env, store, python-cpu, python-cuda,
# rescale, gpu-reclaim): the device tool returns at most 8 files. It builds nothing: the Go binaries come from $BIN
# (default bin/, made here by `make device-check-build` and carried over
# with the tree). It starts nothing that needs a network (every store on
# loopback; the local transport). It runs as root where it can (the
# runner and the node agent start Trainers as their owners); parts that
# need root skip otherwise.
#
# One line per result, to stdout and results.txt:
#
#   device check=NAME ok|fail|skip key=value... [reason]
#
# Each part runs under its own time limit (budget, seconds; python-cpu
# and python-cuda run side by side); together they stay under 8 minutes
# (README.md, "The device check", has each). DEVICE_CHECK_BUDGET_SCALE
# multiplies them (CI's two shared cores: the test sets 3). Exit status:
# 1 if any part failed, else 0 (a skip is no failure).
#
# Environment: PYTHON (an interpreter with torch; else the first of
# python3 on PATH, /usr/bin/python3, /opt/torch/.venv/bin/python3 whose
# torch imports), BIN, OUT, DEVICE_CHECK_GIB (GiB the GPU Trainer takes,
# default 8), DEVICE_CHECK_PARTS (a space-separated subset of: env
# torchrun-flags store python-cpu python-cuda rescale gpu-reclaim).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTDIR=${1:-${OUT:-$ROOT/device-check-out}}
BIN=${BIN:-$ROOT/bin}
GIB=${DEVICE_CHECK_GIB:-8}
SCALE=${DEVICE_CHECK_BUDGET_SCALE:-1}
PARTS=${DEVICE_CHECK_PARTS:-env torchrun-flags store python-cpu python-cuda rescale gpu-reclaim}
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
RESULTS=$OUTDIR/results.txt
: >"$RESULTS"
cd "$ROOT" || exit 1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
STATE=$(mktemp -d) || exit 1
trap 'rm -rf "$STATE"' EXIT
failed=0
started=$(date +%s)

# result NAME ok|fail|skip [detail...]: one result line.
result() {
	local name=$1 status=$2
	shift 2
	local line="device check=$name $status${*:+ $*}"
	echo "$line"
	echo "$line" >>"$RESULTS"
	[ "$status" = fail ] && failed=1
	return 0
}

# start NAME LOG BUDGET CMD...: CMD with its output appended to LOG.log,
# killed at BUDGET seconds (times the scale); its status and seconds go
# to the state directory. run is start, then collect.
start() {
	local name=$1 log=$2 budget=$(($3 * SCALE))
	shift 3
	local t0 code
	t0=$(date +%s.%N)
	echo "+ $* (budget ${budget} s)" >>"$OUTDIR/$log.log"
	timeout -k 20 "$budget" "$@" >>"$OUTDIR/$log.log" 2>&1
	code=$?
	[ "$code" -eq 124 ] || [ "$code" -eq 137 ] && sweep
	echo "$code" >"$STATE/$name.rc"
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }' >"$STATE/$name.secs"
}
# sweep: after a part ran over its budget (SIGTERM, then SIGKILL 20 s
# later: the benches cancel their Trainers meanwhile), kill whatever is
# left in the benches' cgroups (bftrainer-bench-* below the cgroup2 mount),
# so that nothing of it runs on into the next part.
sweep() {
	local m k
	m=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
	[ -n "$m" ] || return 0
	for k in "$m"/bftrainer-bench-*/cgroup.kill; do
		[ -w "$k" ] && echo 1 >"$k" 2>/dev/null
	done
	return 0
}
# collect NAME: sets rc (124: over its budget) and secs of a part.
collect() {
	rc=$(cat "$STATE/$1.rc" 2>/dev/null || echo 125)
	secs=$(cat "$STATE/$1.secs" 2>/dev/null || echo 0)
}
run() {
	start "$@"
	collect "$1"
}

want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# unittest_counts LOG: "ran=N skipped=M failures=F errors=E" from
# unittest's closing lines.
unittest_counts() {
	local log=$1
	local ran skipped failures errors
	ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -1)
	skipped=$(grep -E '^(OK|FAILED) \(' "$log" | tail -1 | sed -n 's/.*skipped=\([0-9]*\).*/\1/p')
	failures=$(grep -E '^FAILED \(' "$log" | tail -1 | sed -n 's/.*failures=\([0-9]*\).*/\1/p')
	errors=$(grep -E '^FAILED \(' "$log" | tail -1 | sed -n 's/.*errors=\([0-9]*\).*/\1/p')
	echo "ran=${ran:-0} skipped=${skipped:-0} failures=${failures:-0} errors=${errors:-0}"
}

# --- env: the interpreter with torch, the GPU, the binaries (each probe
# at most 30 s; about 10 s in all)
PY=""
TORCH="" CUDA=False GPUS=0 NCCL=False SERVER=""
probe='import torch, torch.distributed as d
print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count(), d.is_available() and d.is_nccl_available())'
find_python() {
	local c out
	for c in ${PYTHON:-} "$(command -v python3 2>/dev/null)" /usr/bin/python3 /opt/torch/.venv/bin/python3; do
		[ -n "$c" ] && [ -x "$c" ] || continue
		if out=$(timeout 30 "$c" -c "$probe" 2>>"$OUTDIR/env.log"); then
			PY=$c
			read -r TORCH CUDA GPUS NCCL <<<"$out"
			return 0
		fi
		echo "$c: no torch" >>"$OUTDIR/env.log"
	done
	return 1
}
if find_python; then
	SERVER=$(timeout 30 "$PY" -c 'from datetime import timedelta
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
print("libuv" if getattr(s, "libuvBackend", False) else "blocking")' 2>>"$OUTDIR/env.log")
	GPU=none
	if command -v nvidia-smi >/dev/null 2>&1; then
		GPU=$(nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>>"$OUTDIR/env.log" |
			head -1 | sed 's/, /,/g; s/ /_/g')
		GPU=${GPU:-unreadable}
	fi
	if [ -x "$BIN/bftrainer" ] && [ -x "$BIN/bftrainer-bench" ] && "$BIN/bftrainer" --version >>"$OUTDIR/env.log" 2>&1; then
		BINS=ok
	else
		BINS=missing
	fi
	detail="python=$PY torch=$TORCH cuda=$CUDA gpus=$GPUS nccl=$NCCL store_server=${SERVER:-unknown} gpu=$GPU binaries=$BINS uid=$(id -u) cores=$(nproc)"
	if [ "$BINS" = ok ]; then
		result env ok "$detail"
	else
		result env fail "$detail (no runnable $BIN/bftrainer and bftrainer-bench: run make device-check-build where Go is, and carry bin/)"
	fi
else
	BINS=missing
	result env fail "no python with torch (PYTHON, python3 on PATH, /usr/bin/python3, /opt/torch/.venv/bin/python3; see env.log)"
fi
HAVE_GPU=no
if [ "$CUDA" = True ] && [ "${GPUS:-0}" -ge 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
	HAVE_GPU=yes
fi
why_no_gpu() {
	if [ -z "$PY" ]; then echo "no python with torch"
	elif ! command -v nvidia-smi >/dev/null 2>&1; then echo "no GPU here (no nvidia-smi)"
	else echo "torch $TORCH sees no CUDA device (cuda=$CUDA gpus=$GPUS)"; fi
}

# --- torchrun-flags: every flag bftrainer's torchrun launcher passes
# (trainer/torchrun.go TorchrunArgs, underscore spellings) is in this
# torch's torchrun (budget 15 s)
if want torchrun-flags; then
	if [ -z "$PY" ]; then
		result torchrun-flags skip "no python with torch"
	else
		run torchrun-flags env 15 "$PY" -m torch.distributed.run --help
		if [ "$rc" -ne 0 ]; then
			result torchrun-flags fail "torch=$TORCH: torchrun --help exited $rc (env.log)"
		else
			missing=""
			for f in --nnodes --nproc_per_node --rdzv_backend --rdzv_endpoint --rdzv_id --max_restarts \
				--rdzv_conf --monitor_interval -r -t --log_dir --no_python; do
				grep -qE -- "(^|[ ,])$f([ ,=]|\$)" "$OUTDIR/env.log" || missing="$missing $f"
			done
			if [ -z "$missing" ]; then
				result torchrun-flags ok "torch=$TORCH all 12 flags of TorchrunArgs listed"
			else
				result torchrun-flags fail "torch=$TORCH not in torchrun --help:$missing"
			fi
		fi
	fi
fi

# --- store: the elastic store process with a peer stalled mid-request
# (the torch 1.13 fix: a receive timeout; libuv needs none) (budget 25 s)
if want store; then
	if [ -z "$PY" ]; then
		result store skip "no python with torch"
	else
		run store store 25 env CUDA_VISIBLE_DEVICES= "$PY" -m unittest discover -v -s python/tests -p test_elastic.py -k StoreTest
		counts=$(unittest_counts "$OUTDIR/store.log")
		case $SERVER in
		libuv) how="libuv server: a stalled peer keeps its connection, the others are served" ;;
		blocking) how="blocking server: a stalled peer is cut off after the peer timeout" ;;
		*) how="server kind unknown" ;;
		esac
		if [ "$rc" -eq 0 ] && grep -q '^OK' "$OUTDIR/store.log" && ! grep -q 'skipped=' "$OUTDIR/store.log"; then
			result store ok "torch=$TORCH $counts secs=$secs ($how)"
		elif [ "$rc" -eq 0 ]; then
			result store skip "torch=$TORCH $counts (see store.log)"
		else
			result store fail "torch=$TORCH rc=$rc $counts secs=$secs ($how; store.log)"
		fi
	fi
fi

# --- python-cpu and python-cuda, side by side (each sleeps more than it
# computes; budget 150 s both):
#   python-cpu   the elastic runtime's tests, the GPU hidden: gloo on CPU;
#   python-cuda  the elastic tests with the model, its optimizer state and
#                the batches on the GPU (CUDA tensors in the state the
#                runtime broadcasts; gloo: the workers share one GPU).
cpu_pid=""
if want python-cpu && [ -n "$PY" ]; then
	start python-cpu python-cpu 150 env CUDA_VISIBLE_DEVICES= "$PY" -m unittest discover -v -s python/tests &
	cpu_pid=$!
fi
if want python-cuda && [ "$HAVE_GPU" = yes ]; then
	start python-cuda python-cuda 150 env BFT_TEST_DEVICE=cuda "$PY" -m unittest discover -v \
		-s python/tests -p test_elastic.py -k ElasticTest
fi
[ -n "$cpu_pid" ] && wait "$cpu_pid"
for part in python-cpu python-cuda; do
	want $part || continue
	if [ -z "$PY" ]; then
		result $part skip "no python with torch"
		continue
	fi
	if [ $part = python-cuda ] && [ "$HAVE_GPU" != yes ]; then
		result $part skip "$(why_no_gpu)"
		continue
	fi
	collect $part
	counts=$(unittest_counts "$OUTDIR/$part.log")
	if [ "$rc" -eq 0 ]; then
		result $part ok "torch=$TORCH $counts secs=$secs"
	else
		result $part fail "torch=$TORCH rc=$rc $counts secs=$secs ($part.log)"
	fi
done

# --- rescale: bftrainer-bench rescale, one pass per launcher, through the
# real binary (reconciler, runner, local transport, Slurm prolog), CPU
# workers under this torch (budget 60 s elastic, 120 s torchrun); both
# log to rescale.log
rescale() {
	local launcher=$1 budget=$2 name=rescale-$1
	if [ -z "$PY" ] || [ "$BINS" != ok ]; then
		result "$name" skip "needs python with torch and the binaries"
		return
	fi
	if [ "$(id -u)" -ne 0 ]; then
		result "$name" skip "needs root (the runner starts Trainer processes as their owner)"
		return
	fi
	# Nodes of its own (dchk1…): the scenario's node prolog kills every
	# Trainer process naming its node on this machine, and make test runs
	# this beside the other packages' Trainers on n1, n2, …
	run "$name" rescale "$budget" "$BIN/bftrainer-bench" rescale -n 1 -launchers "$launcher" -python-exe "$PY" \
		-bftrainer "$BIN/bftrainer" -node-prefix dchk
	local m
	m=$(awk -v l="$launcher" '$1 == "rescale" && $2 == "launcher=" l {
		split($3, d, "="); split($5, s, "="); printf " %s=%s", d[2], s[2] }' "$OUTDIR/rescale.log")
	if [ "$rc" -eq 0 ] && [ -n "$m" ]; then
		result "$name" ok "torch=$TORCH seconds_lost:$m secs=$secs"
	elif [ "$rc" -eq 0 ]; then
		result "$name" skip "$(grep -m1 'skipped' "$OUTDIR/rescale.log" || echo 'no measurement printed') (rescale.log)"
	else
		result "$name" fail "torch=$TORCH rc=$rc secs=$secs (rescale.log)"
	fi
}
if want rescale; then
	rescale elastic 60
	rescale torchrun 120
fi

# --- gpu-reclaim: an exec Trainer holding a CUDA context and GIB GiB,
# reclaimed by the real node prolog, with cgroup containment and degraded
# (budget 90 s)
if want gpu-reclaim; then
	if [ "$HAVE_GPU" != yes ]; then
		result gpu-reclaim-cgroup skip "$(why_no_gpu)"
		result gpu-reclaim-degraded skip "$(why_no_gpu)"
	elif [ "$BINS" != ok ] || [ "$(id -u)" -ne 0 ]; then
		result gpu-reclaim-cgroup skip "needs root and the binaries"
		result gpu-reclaim-degraded skip "needs root and the binaries"
	else
		run gpu-reclaim gpu-reclaim 90 "$BIN/bftrainer-bench" gpu -gib "$GIB" -idle-wait 20s -python-exe "$PY" -bftrainer "$BIN/bftrainer"
		for mode in cgroup degraded; do
			line=$(grep -m1 "^gpu-reclaim containment=$mode " "$OUTDIR/gpu-reclaim.log")
			case $line in
			"") result "gpu-reclaim-$mode" fail "rc=$rc secs=$secs no measurement (rc 124: over its budget of $((90 * SCALE)) s; gpu-reclaim.log)" ;;
			*skipped=*) result "gpu-reclaim-$mode" skip "${line#gpu-reclaim }" ;;
			*) if grep -q "gpu $mode:" "$OUTDIR/gpu-reclaim.log"; then
				result "gpu-reclaim-$mode" fail "${line#gpu-reclaim } ($(grep -m1 "gpu $mode:" "$OUTDIR/gpu-reclaim.log" | cut -c1-300))"
			else
				result "gpu-reclaim-$mode" ok "${line#gpu-reclaim }"
			fi ;;
			esac
		done
	fi
fi

echo "device-check: $(($(date +%s) - started)) s; results in $RESULTS" >&2
exit $failed
