#!/usr/bin/env bash
# selftest.sh - end-to-end check of lab.sh on a real Slurm (root, Debian slurm packages).
#
#   internal/lab/slurm/selftest.sh [WORKDIR] [--loops N] [--slurm-user USER] [--quick]
#
# 1. 6 nodes + a hook that logs every call: `sbatch -N 2 --wrap 'srun hostname'` plus 20 jobs of
#    1-4 nodes at once; every job ran 1 PrologSlurmctld, 1 EpilogSlurmctld and one Prolog and
#    Epilog per node; all nodes end exactly idle, none drained.
# 2. stop-node --kill / start-node / restart-node.
# 3. --scavenger: a requeueable scavenger job on all nodes is requeued when a main job needs them.
# 4. errors: a taken -p port and a second start on a running DIR fail clearly.
# 5. N start/jobs/stop loops (default 10) in the same and in alternating DIRs, no leftovers.
# Exit 0 when everything passed. Prints timings.

set -u
set -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
LAB=$HERE/lab.sh
WORK=
LOOPS=10
SUSER=root
QUICK=0
while [ $# -gt 0 ]; do
	case $1 in
	--loops) LOOPS=$2; shift 2 ;;
	--slurm-user) SUSER=$2; shift 2 ;;
	--quick) QUICK=1; LOOPS=2; shift ;;
	*) WORK=$1; shift ;;
	esac
done
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/labtest.XXXXXX)
mkdir -p "$WORK" && chmod 0755 "$WORK"   # SlurmUser must be able to reach it
WORK=$(cd "$WORK" && pwd -P)
FAILS=0
pass() { printf 'PASS %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; FAILS=$((FAILS + 1)); }
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# processes of a lab dir: anything whose command line or environment mentions it (not zombies)
leftovers() {
	local d=$1 p out=
	for p in $(pgrep -f -- "$d" 2>/dev/null) $(grep -lz -- "$d" /proc/[0-9]*/environ 2>/dev/null | awk -F/ '{print $3}'); do
		[ "$p" = $$ ] && continue
		case $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) in Z | '') continue ;; esac
		grep -q . "/proc/$p/cmdline" 2>/dev/null || continue
		# our own shells (this script, command substitutions) mention $d too
		case $(tr '\0' ' ' <"/proc/$p/cmdline") in *selftest.sh* | bash* | *grep* | *pgrep*) continue ;; esac
		out="$out $p"
	done
	echo $out
}
wait_empty_queue() { # timeout
	local t=$(($(date +%s) + $1))
	while [ -n "$(squeue -h 2>/dev/null)" ]; do
		[ "$(date +%s)" -lt "$t" ] || return 1
		sleep 0.2
	done
}

BEFORE=" $(pgrep slurm | tr '\n' ' ') $(pgrep munged | tr '\n' ' ') "   # other clusters on this machine
new_daemons() { local p; for p in $(pgrep slurm) $(pgrep munged); do case $BEFORE in *" $p "*) ;; *) echo "$p" ;; esac; done; }

HOOK=$WORK/hook.sh
HLOG=$WORK/hook.log
cat >"$HOOK" <<EOF
#!/bin/sh
echo "\$SLURM_SCRIPT_CONTEXT \$SLURM_JOB_ID \${SLURM_JOB_NODELIST:-\$SLURM_NODELIST} \${SLURMD_NODENAME}" >>$HLOG
exit 0
EOF
chmod 0755 "$HOOK"
: >"$HLOG"
chmod 0666 "$HLOG"   # PrologSlurmctld/EpilogSlurmctld run as SlurmUser

echo "== 1. 6 nodes, hooks, 21 jobs (SlurmUser=$SUSER)"
C1=$WORK/c1
t=$(now)
out=$("$LAB" start "$C1" -n 6 --hook "$HOOK" --slurm-user "$SUSER") || { echo "start failed"; exit 1; }
echo "start: $(dt "$t") s"
eval "$out"
check "env line is eval-able and DIR/env matches" '[ "$SLURM_CONF" = "$C1/etc/slurm.conf" ] && [ "$(cat "$C1/env")" = "$out" ]'
check "munge key mode 0400" '[ "$(stat -c %a "$C1/etc/munge.key")" = 400 ]'
check "status exit 0" '"$LAB" status "$C1" >/dev/null'
cd "$C1/jobs" || exit 1
declare -A WANT=()
j=$(sbatch --parsable -N 2 --wrap 'srun hostname') && WANT[$j]=2
for i in $(seq 1 20); do
	n=$((RANDOM % 4 + 1))
	j=$(sbatch --parsable -N $n --wrap "srun sleep 0.$((RANDOM % 9))") && WANT[$j]=$n
done
t=$(now)
check "21 jobs submitted" '[ ${#WANT[@]} = 21 ]'
check "all jobs finished (bounded 120 s)" 'wait_empty_queue 120'
echo "21 jobs: $(dt "$t") s"
check "wait-idle: every node exactly idle" '"$LAB" wait-idle "$C1" 30'
check "nothing drained or down" '[ -z "$(sinfo -h -R)" ]'
bad=0
for j in "${!WANT[@]}"; do
	n=${WANT[$j]}
	for ctx in prolog_slurmctld epilog_slurmctld; do
		c=$(awk -v c=$ctx -v j="$j" '$1 == c && $2 == j' "$HLOG" | wc -l)
		[ "$c" = 1 ] || { echo "  job $j: $ctx x$c"; bad=1; }
	done
	for ctx in prolog_slurmd epilog_slurmd; do
		c=$(awk -v c=$ctx -v j="$j" '$1 == c && $2 == j { print $4 }' "$HLOG" | sort -u | wc -l)
		[ "$c" = "$n" ] || { echo "  job $j: $ctx on $c nodes, want $n"; bad=1; }
	done
done
check "every hook fired: 1+1 ctld and N+N node calls per job ($(wc -l <"$HLOG") lines)" '[ $bad = 0 ]'
check "srun hostname output" 'grep -q . "$C1"/jobs/slurm-*.out'

if [ $QUICK = 0 ]; then
	echo "== 2. single nodes"
	sbatch -w n3 -N1 --wrap 'srun sleep 300' >/dev/null
	sleep 2
	check "stop-node n3 --kill --steps" '"$LAB" stop-node "$C1" n3 --kill --steps'
	check "no slurmstepd of n3 left" '[ -z "$(for p in $(pgrep slurmstepd); do grep -lzx BFTRAINER_LAB_NODE=n3 /proc/$p/environ 2>/dev/null; done)" ]'
	check "status shows n3 stopped, exit 0" 'st=$("$LAB" status "$C1") && printf "%s\n" "$st" | grep -q "slurmd:n3 *stopped"'
	scancel -u root 2>/dev/null
	t=$(now)
	check "start-node n3 (registers, idle)" '"$LAB" start-node "$C1" n3 -t 60'
	echo "start-node after a crash with a job: $(dt "$t") s"
	t=$(now)
	check "restart-node n2" '"$LAB" restart-node "$C1" n2'
	echo "restart-node: $(dt "$t") s"
	check "all idle after node ops" '"$LAB" wait-idle "$C1" 60'
	check "start over a running DIR is refused" '! "$LAB" start "$C1" -n 2 -q >/dev/null 2>&1'
	base=$(. "$C1/etc/lab.env"; echo "$LAB_PORTBASE")
	check "a taken -p port is refused" '! "$LAB" start "$WORK/c2" -n 2 -p $((base + 2)) >/dev/null 2>"$WORK/err" && grep -q "in use" "$WORK/err"'
	check "a second cluster beside the first (auto ports)" '"$LAB" start "$WORK/c2" -n 2 -q >/dev/null && "$LAB" stop "$WORK/c2" -q'
fi

t=$(now)
"$LAB" stop "$C1"
echo "stop: $(dt "$t") s"
check "no leftovers after stop" '[ -z "$(leftovers "$C1")" ]'
check "stop twice is fine" '"$LAB" stop "$C1" -q'
check "stop of a never-started DIR is fine" '"$LAB" stop "$WORK/never" -q'
check "status after stop: exit 3" '"$LAB" status "$C1" >/dev/null; [ $? = 3 ]'

if [ $QUICK = 0 ]; then
	echo "== 3. scavenger preemption"
	C3=$WORK/c3
	eval "$("$LAB" start "$C3" -n 4 --scavenger --hook "$HOOK" --slurm-user "$SUSER" -q)"
	cd "$C3/jobs" || exit 1
	s=$(sbatch --parsable -p scavenger -N 4 --requeue --wrap 'srun sleep 300')
	for i in $(seq 1 50); do [ "$(squeue -h -j "$s" -o %T)" = RUNNING ] && break; sleep 0.2; done
	check "scavenger job running on all 4 nodes" '[ "$(squeue -h -j "$s" -o %T)" = RUNNING ]'
	t=$(now)
	m=$(sbatch --parsable -p main -N 2 --wrap 'sleep 3')
	for i in $(seq 1 150); do [ "$(squeue -h -j "$m" -o %T)" = RUNNING ] && break; sleep 0.1; done
	echo "main job running $(dt "$t") s after sbatch"
	check "main job got the nodes" '[ "$(squeue -h -j "$m" -o %T)" = RUNNING ]'
	check "scavenger job requeued (Restarts>=1)" 'scontrol show job "$s" | grep -Eq "Restarts=[1-9]"'
	check "nothing drained" '[ -z "$(sinfo -h -R)" ]'
	"$LAB" stop "$C3" -q
	check "no leftovers after scavenger stop" '[ -z "$(leftovers "$C3")" ]'
fi

echo "== 5. $LOOPS start/jobs/stop loops"
starts=() stops=()
for i in $(seq 1 "$LOOPS"); do
	d=$WORK/loop$((i % 2))
	t=$(now)
	if ! out=$("$LAB" start "$d" -n 6 --hook "$HOOK" --slurm-user "$SUSER" -q); then fail "loop $i: start"; continue; fi
	starts+=("$(dt "$t")")
	eval "$out"
	(cd "$d/jobs" && for k in 1 2 3; do sbatch -N $k --wrap 'srun true' >/dev/null; done
		sbatch -N 1 --wrap 'sleep 600' >/dev/null)   # one still running at stop
	wait_empty_queue 0 2>/dev/null
	sleep 1.5
	t=$(now)
	"$LAB" stop "$d" -q || fail "loop $i: stop"
	stops+=("$(dt "$t")")
	l=$(leftovers "$d")
	[ -z "$l" ] || { fail "loop $i: leftovers $l"; ps -o pid,stat,args -p "$(echo $l | tr ' ' ,)"; }
done
echo "start times: ${starts[*]}"
echo "stop times:  ${stops[*]}"
check "no new slurm/munge processes (not even zombies) after the loops" '[ -z "$(new_daemons)" ]'

echo "== $FAILS failure(s); work dir $WORK"
[ $FAILS = 0 ]
