#!/usr/bin/env bash
# lab.sh - a real multi-node Slurm cluster on one machine, for tests and benchmarks.
#
# One munged, one slurmctld and N stock `slurmd -D -N n<i>` processes, every node on
# 127.0.0.1 with its own port, everything (config, munge key, state, logs, spool, pids)
# inside one private directory. Nothing in /etc is read or written.
# See README.md beside this file; `lab.sh help` prints the interface.
#
# Needs: bash >= 4.2, root, Debian's slurmctld slurmd slurm-client munge (22.05 tested),
# coreutils, util-linux (setsid, flock, runuser), procps (ps).

set -u
set -o pipefail

PROG=lab.sh
PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
LC_ALL=C
export LC_ALL

# A caller's Slurm environment (SLURM_CONF of another cluster, SQUEUE_FORMAT, running inside
# a job, ...) must leak neither into the daemons nor into our own client calls.
while IFS= read -r _v; do unset "$_v"; done < <(compgen -e | grep -E '^(SLURM_|SQUEUE_|SINFO_|SBATCH_|SRUN_|SALLOC_|SCANCEL_|SCONTROL_|BFTRAINER_LAB_)' || true)
unset _v

TOKEN_VAR=BFTRAINER_LAB_TOKEN       # marks every process this harness starts (and their slurmstepds)
PORTS_VAR=BFTRAINER_LAB_PORTS       # "BASE-LAST": lets a new cluster avoid a running one's ports
NODE_VAR=BFTRAINER_LAB_NODE         # node name, on each slurmd
PORT_LO=20000                       # automatic port bases: [PORT_LO, PORT_HI), below the
PORT_HI=32700                       # kernel's ephemeral range (32768-60999 by default)
GLOBAL_LOCK=${LAB_PORT_LOCK:-}       # "": slurmctld's own binary (see start)

QUIET=${LAB_QUIET:-0}
say()  { [ "$QUIET" = 1 ] || printf '%s: %s\n' "$PROG" "$*" >&2; }
debug() { [ "${LAB_DEBUG:-0}" = 1 ] && printf '%s: [%s] %s\n' "$PROG" "${EPOCHREALTIME}" "$*" >&2; return 0; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die()  { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage_die() { printf '%s: %s\n(run "%s help" for the interface)\n' "$PROG" "$*" "$PROG" >&2; exit 2; }

usage() {
	cat <<'EOF'
lab.sh - a real multi-node Slurm cluster on one machine (one munged, one slurmctld, N slurmd).

  lab.sh start DIR [-n NODES] [--prefix P] [-p PORTBASE] [--hook PATH | --no-hooks] [--scavenger]
                   [--accounting] [--slurm-user USER] [--extra 'slurm.conf line']... [-t TIMEOUT]
                   [--replace] [-q]
        Create DIR/{etc,run,log,state,spool,jobs,munge}, a fresh munge key and slurm.conf, start
        the daemons and wait (bounded, -t, default 30 s) until munge works, slurmctld answers and
        every node n1..nN is exactly `idle`. Prints `export SLURM_CONF=DIR/etc/slurm.conf` on
        stdout (eval it) and writes the same line to DIR/env.
          -n NODES          number of nodes (default 4)
          --prefix P        node names P1..PN (default n); letters, - and _ only. Labs that run
                            at the same time as other tests on this machine should use their
                            own prefix: bftrainer's node prolog kills every Trainer process
                            whose run token names the node, whoever started it
          -p PORTBASE       slurmctld port; node i listens on PORTBASE+i. Default: a free range
                            picked automatically (20000-32699), avoiding other running labs.
                            An explicit range that is in use is an error.
          --hook PATH       Prolog, Epilog, PrologSlurmctld and EpilogSlurmctld = PATH
                            (absolute; Slurm gives hooks no PATH and no arguments)
          --no-hooks        no hooks (the default)
          --scavenger       Slurm-native preemption: partition `main` (PriorityTier=10) and
                            `scavenger` (PriorityTier=1, PreemptMode=REQUEUE, GraceTime=0)
          --accounting      real accounting, as sites run it: a private MariaDB (DIR/acct,
                            its socket only, no TCP) and slurmdbd on PORTBASE+NODES+1, so that
                            sacct answers (adds about 10 s, and 60 s to the start's timeout)
          --slurm-user U    SlurmUser (default root); state/log/run are chowned to U
          --extra LINE      append LINE to slurm.conf (repeatable; later lines win)
          -t SECONDS        readiness timeout (default 30)
          --replace         stop a cluster still running in DIR first (default: refuse)
          -q                quiet (only errors on stderr)
  lab.sh stop DIR [-t SECONDS] [--no-reap]
        Cancel all jobs (bounded by -t, default 10 s), then TERM and finally KILL every process
        this lab started (daemons, slurmstepds, job tasks, hook children), then wait up to 3 s
        for the dead ones to be reaped by PID 1 (--no-reap: do not wait). Idempotent.
  lab.sh status DIR          daemons and node states; exit 0 all alive, 1 some died, 3 not running
  lab.sh wait-idle DIR [TIMEOUT]   wait until every node is exactly idle (default 30 s)
  lab.sh stop-node DIR NODE [--kill] [--steps]
        stop that node's slurmd (TERM, or KILL with --kill, i.e. a crash); --steps also kills the
        node's slurmstepds and the job tasks under them
  lab.sh start-node DIR NODE [-t TIMEOUT] [--no-wait]
        start that node's slurmd again and wait until it registered and is exactly idle
  lab.sh restart-node DIR NODE [--kill] [--steps] [-t TIMEOUT] [--no-wait]
  lab.sh restart-ctld DIR [-t TIMEOUT]   stop slurmctld (TERM) and start it again on its saved state
  lab.sh env DIR             print the export line again
  lab.sh logs DIR [LINES]    tails of all logs
  lab.sh install-deps        apt-get install the Slurm/munge packages without starting system
                             daemons (no-op when they are present; never purges anything)
Environment: LAB_QUIET=1 as -q; LAB_DEBUG=1 prints start-up phases; LAB_PORT_LOCK: a lock
file for port selection (default: a read-only flock on slurmctld's binary, which every lab
on the machine runs, so that nothing is written outside DIR).
EOF
}

# ---------------------------------------------------------------------------------------------
# small helpers

now_us() { local t=${EPOCHREALTIME/./}; printf '%s' "$t"; }
elapsed() { # $1 = start in us -> seconds with 2 decimals
	local d=$(( $(now_us) - $1 ))
	printf '%d.%02d' $((d / 1000000)) $(((d % 1000000) / 10000))
}
nap() { sleep "${1:-0.1}"; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (slurmd and munged need it)"; }

need_bins() {
	local b missing=()
	for b in "$@"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	die "missing programs: ${missing[*]} (Debian: apt-get install slurmctld slurmd slurm-client munge; or: $0 install-deps)"
}

# alive PID: process exists and is not a zombie (an orphan may stay a zombie for a long time
# when PID 1 does not reap, so kill -0 alone would make waits hang).
alive() {
	local s
	{ read -r s <"/proc/$1/stat"; } 2>/dev/null || return 1
	s=${s##*) }
	s=${s%% *}
	case $s in Z | X | x | '') return 1 ;; esac
	return 0
}
# starttime PID: field 22 of /proc/PID/stat (clock ticks since boot); identifies a process
starttime() {
	local s
	{ read -r s <"/proc/$1/stat"; } 2>/dev/null || return 1
	s=${s##*) }
	# shellcheck disable=SC2086
	set -- $s
	printf '%s' "${20}"
}
# same_proc PID START: the process we recorded, still alive
same_proc() {
	[ "$1" != - ] || return 1
	alive "$1" || return 1
	[ "$(starttime "$1")" = "$2" ]
}

# absolute, physical path of DIR (which need not exist yet)
abspath() {
	local d=$1 parent base
	case $d in /*) ;; *) d=$PWD/$d ;; esac
	while [ "${d%/}" != "$d" ] && [ "$d" != / ]; do d=${d%/}; done
	if [ -d "$d" ]; then (cd "$d" && pwd -P); return; fi
	parent=$(dirname "$d")
	base=$(basename "$d")
	if [ -d "$parent" ]; then parent=$(cd "$parent" && pwd -P); fi
	printf '%s/%s' "${parent%/}" "$base"
}

check_dir_name() { # DIR NODES
	local tail max
	case $1 in
	*[!A-Za-z0-9._/+@:,=-]*)
		die "DIR '$1' contains characters slurm.conf cannot carry safely (allowed: A-Z a-z 0-9 . _ / + @ : , = -)" ;;
	esac
	# unix socket paths must fit sun_path (107 bytes + NUL): munged's DIR/munge/munge.sock and
	# each slurmstepd's DIR/spool/nI/nI_JOBID.STEPID (job ids up to 8 digits, step ids 10)
	tail="/spool/$LAB_PREFIX$2/$LAB_PREFIX${2}_12345678.4294967291"
	[ ${#tail} -ge 17 ] || tail=/munge/munge.sock
	max=$((107 - ${#tail}))
	[ ${#1} -le $max ] || die "DIR '$1' is too long (${#1} chars, max $max with $2 nodes): Slurm's unix sockets under it would not fit 108 bytes; use a shorter DIR, e.g. \$(mktemp -d /tmp/lab.XXXXXX)"
}

# ---------------------------------------------------------------------------------------------
# processes

# pids whose environment carries this lab's token: the daemons, and the slurmstepds they fork
token_pids() {
	[ -n "${1:-}" ] || return 0
	grep -lzx -- "$TOKEN_VAR=$1" /proc/[0-9]*/environ 2>/dev/null | awk -F/ '{ print $3 }'
}
# pids that run inside a job of this cluster (SLURM_JOB_ID and our SLURM_CONF in their
# environment): job processes that left the slurmstepd's process tree (setsid, double fork)
job_pids() {
	local p
	for p in $(grep -lzx -- "SLURM_CONF=$1" /proc/[0-9]*/environ 2>/dev/null | awk -F/ '{ print $3 }'); do
		grep -qz -- '^SLURM_JOB_ID=' "/proc/$p/environ" 2>/dev/null && echo "$p"
	done
}
node_pids() { # token node -> pids carrying both (slurmd of NODE and its slurmstepds)
	local p
	for p in $(token_pids "$1"); do
		grep -qzx -- "$NODE_VAR=$2" "/proc/$p/environ" 2>/dev/null && echo "$p"
	done
}

# closure PID...: the given processes, all their descendants, and every member of a process
# group or session whose leader is in the set; repeated to a fixed point. Never includes this
# script, its ancestors, its process group or session, or PID 1. Zombies are left out.
closure() {
	[ $# -gt 0 ] || return 0
	ps -e -o pid=,ppid=,pgid=,sid=,stat= 2>/dev/null | awk -v seeds="$*" -v self="$$" '
	{ pid[NR] = $1; ppid[$1] = $2; pg[$1] = $3; sid[$1] = $4; st[$1] = $5; n = NR }
	END {
		# protect ourselves and our ancestors, and our group and session
		p = self
		while (p != "" && p > 0 && !(p in prot)) { prot[p] = 1; p = ppid[p] }
		prot[1] = 1; prot[0] = 1
		protpg = pg[self]; protsid = sid[self]
		k = split(seeds, s, " ")
		for (i = 1; i <= k; i++) if ((s[i] in ppid) && !(s[i] in prot)) in_set[s[i]] = 1
		do {
			changed = 0
			for (i = 1; i <= n; i++) {
				q = pid[i]
				if ((q in in_set) || (q in prot)) continue
				if (pg[q] == protpg || sid[q] == protsid) continue
				if ((ppid[q] in in_set) || (pg[q] in in_set) || (sid[q] in in_set)) { in_set[q] = 1; changed = 1 }
			}
		} while (changed)
		for (q in in_set) if (st[q] !~ /^Z/) print q
	}'
}

# ---------------------------------------------------------------------------------------------
# ports

# busy_ports: every local TCP port with a socket in any state but TIME_WAIT (ipv4 and ipv6)
declare -A BUSY=()
scan_busy_ports() {
	local hex
	BUSY=()
	while read -r hex; do
		BUSY[$((16#$hex))]=1
	done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$1 ~ /^[0-9]+:$/ && $4 != "06" { n = split($2, a, ":"); print a[n] }')
}
# claimed_ranges: "BASE-LAST" of every running lab (from its processes' environment)
claimed_ranges() {
	grep -ahoz -- "$PORTS_VAR=[0-9]*-[0-9]*" /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sed "s/^$PORTS_VAR=//" | sort -u
}
range_free() { # base last -> 0 if no port of [base,last] is busy or claimed
	local b=$1 l=$2 p r cb cl
	for ((p = b; p <= l; p++)); do [ -z "${BUSY[$p]:-}" ] || return 1; done
	for r in $CLAIMED; do
		cb=${r%-*}; cl=${r#*-}
		[ "$l" -lt "$cb" ] || [ "$b" -gt "$cl" ] || return 1
	done
	return 0
}
who_has_port() {
	command -v ss >/dev/null 2>&1 || return 0
	ss -Htanp "( sport = :$1 )" 2>/dev/null | head -3 | sed 's/^/    /' >&2
}

# ---------------------------------------------------------------------------------------------
# the lab directory

# load DIR: absolute path, config of a started lab, SLURM_CONF for our client calls
load() {
	[ -n "${1:-}" ] || usage_die "missing DIR"
	D=$(abspath "$1") || die "bad DIR '$1'"
	CONF=$D/etc/slurm.conf
	LAB_NODES=0 LAB_PORTBASE=0 LAB_SLURM_USER=root LAB_HOOK= LAB_SCAVENGER=0 LAB_PREFIX=n LAB_ACCT=0
	if [ -r "$D/etc/lab.env" ]; then
		# shellcheck disable=SC1091
		. "$D/etc/lab.env"
	fi
	TOKEN=
	[ -r "$D/run/token" ] && read -r TOKEN <"$D/run/token"
	export SLURM_CONF=$CONF
}

# pids file: "PID STARTTIME ROLE" per line; a node stopped by stop-node is "- - slurmd:nX"
pids_file() { printf '%s' "$D/run/pids"; }
record_pid() { # role pid
	local st
	st=$(starttime "$2") || st=0
	printf '%s %s %s\n' "$2" "$st" "$1" >>"$(pids_file)"
}
replace_pid_line() { # role newline
	local f tmp
	f=$(pids_file)
	tmp=$f.tmp.$$
	{ [ -f "$f" ] && awk -v r="$1" '$3 != r' "$f"; printf '%s\n' "$2"; } >"$tmp" && mv -f "$tmp" "$f"
}
# live recorded pids (verified by start time)
recorded_live() {
	local pid st role
	[ -f "$(pids_file)" ] || return 0
	while read -r pid st role; do
		same_proc "$pid" "$st" && echo "$pid"
	done <"$(pids_file)"
}
role_pid() { # role -> "pid start" of its line, or nothing
	[ -f "$(pids_file)" ] || return 0
	awk -v r="$1" '$3 == r { print $1, $2 }' "$(pids_file)" | tail -1
}

lock_dir() { # serialise lab.sh commands that change DIR
	mkdir -p "$D" || die "cannot create $D"
	exec 9>>"$D/.lab.lock"
	flock -w 120 9 || die "another lab.sh is busy with $D (lock $D/.lab.lock)"
}

log_tails() { # lines: per daemon its log file, or its stdout/stderr when it has no log (yet)
	local f o n=${1:-25}
	for o in "$D"/log/*.out; do
		[ -e "$o" ] || continue
		f=${o%.out}.log
		[ -s "$f" ] || f=$o
		[ -s "$f" ] || continue
		printf '==> %s (last %s lines) <==\n' "$f" "$n" >&2
		tail -n "$n" "$f" >&2
	done
}

# node_states: "node state" once per node (sinfo -N prints a node once per partition)
node_states() {
	timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | awk '!seen[$1]++'
}
# all_idle N: every node n1..nN is listed with state exactly "idle" (not idle*, comp, drain, ...)
all_idle() {
	local out
	out=$(node_states) || return 1
	printf '%s\n' "$out" | awk -v n="$1" -v p="$LAB_PREFIX" '
		$2 == "idle" { ok[$1] = 1 }
		END { for (i = 1; i <= n; i++) if (!((p i) in ok)) exit 1; exit 0 }'
}
not_idle_summary() {
	node_states | awk '$2 != "idle"' | tr '\n' ' '
}

daemons_died() { # prints roles of recorded daemons that died since they were recorded
	local pid st role
	[ -f "$(pids_file)" ] || return 0
	while read -r pid st role; do
		[ "$pid" = - ] && continue
		same_proc "$pid" "$st" || echo "$role"
	done <"$(pids_file)"
}

# launch ROLE NODE CMD...: start CMD in its own session, in the background, marked with the
# lab's token; stdout/stderr to log/ROLE.out; records the pid. The lock fds are not inherited.
launch() {
	local role=$1 node=$2 pid
	shift 2
	env "$TOKEN_VAR=$TOKEN" "$PORTS_VAR=$LAB_PORTBASE-$(last_port)" ${node:+"$NODE_VAR=$node"} \
		"SLURM_CONF=$CONF" setsid "$@" </dev/null >>"$D/log/${role//:/-}.out" 2>&1 8>&- 9>&- &
	pid=$!
	record_pid "$role" "$pid"
	# setsid does not fork (a background child of a script is no group leader), so $! is the
	# daemon itself once env and setsid have exec'd; the start time recorded now stays valid.
	LAST_PID=$pid
}

# last_port: the lab's ports are PORTBASE (slurmctld), +1..+NODES (slurmds), and with
# --accounting +NODES+1 (slurmdbd)
last_port() { echo $((LAB_PORTBASE + LAB_NODES + LAB_ACCT)); }
dbd_port() { echo $((LAB_PORTBASE + LAB_NODES + 1)); }

munge_ok() {
	munge -n -S "$D/munge/munge.sock" 2>/dev/null | unmunge -S "$D/munge/munge.sock" >/dev/null 2>&1
}
ctld_up() {
	timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'
}
ports_listening() { # base last
	local hex p
	declare -A L=()
	while read -r hex; do L[$((16#$hex))]=1; done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$1 ~ /^[0-9]+:$/ && $4 == "0A" { n = split($2, a, ":"); print a[n] }')
	for ((p = $1; p <= $2; p++)); do [ -n "${L[$p]:-}" ] || return 1; done
	return 0
}

# ---------------------------------------------------------------------------------------------
# stop

# do_stop CANCEL_TIMEOUT: everything this lab started goes away; 0 if nothing is left
do_stop() {
	local cancel_to=${1:-10} reap_to=${2:-3} t0 seeds set left ids ctld deadline sig p all=()
	t0=$(now_us)
	seeds=$( { recorded_live; token_pids "$TOKEN"; job_pids "$CONF"; } | sort -u)
	if [ -z "$seeds" ]; then
		[ -f "$(pids_file)" ] && mv -f "$(pids_file)" "$(pids_file).stopped"
		say "nothing running in $D"
		return 0
	fi
	# 1. cancel jobs (bounded), so that epilogs run and nodes are released in order
	ctld=$(role_pid slurmctld)
	# (no waiting when a slurmd is down: its jobs would stay COMPLETING; they are killed anyway)
	if [ -n "$(awk '$1 == "-"' "$(pids_file)" 2>/dev/null)$(daemons_died)" ]; then cancel_to=0; fi
	if [ -n "$ctld" ] && same_proc $ctld; then
		ids=$(timeout 5 squeue -h -o %A 2>/dev/null | tr '\n' ' ')
		if [ -n "${ids// /}" ]; then
			# shellcheck disable=SC2086
			timeout 5 scancel $ids >/dev/null 2>&1
			deadline=$(($(now_us) + cancel_to * 1000000))
			while [ "$cancel_to" != 0 ] && [ "$(now_us)" -lt "$deadline" ]; do
				ids=$(timeout 5 squeue -h -o %A 2>/dev/null) || break
				[ -z "$ids" ] && break
				nap 0.1
			done
			[ -n "$ids" ] && [ "$cancel_to" != 0 ] && warn "jobs still listed after ${cancel_to}s: $(echo $ids)"
		fi
	fi
	debug "jobs cancelled"
	# 2. TERM the whole set, re-scanning for children that appear meanwhile; KILL after 5 s
	sig=TERM
	deadline=$(($(now_us) + 5000000))
	while :; do
		set=$(closure $seeds $(token_pids "$TOKEN") $(job_pids "$CONF"))
		[ -z "$set" ] && break
		# shellcheck disable=SC2086
		kill -s $sig $set 2>/dev/null
		seeds=$set
		all+=($set)
		nap 0.05
		if [ "$(now_us)" -ge "$deadline" ]; then
			[ $sig = KILL ] && break
			debug "still alive after SIGTERM: $(ps -o pid=,stat=,args= -p "$(echo $set | tr ' ' ,)" 2>/dev/null | tr '\n' ';')"
			sig=KILL
			deadline=$(($(now_us) + 3000000))
		fi
	done
	# A process started just before the last KILL (a sinfo a dying
	# reconciler had forked) may still be there: KILL what is left, and
	# look again, for at most a second, before calling it a survivor.
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		left=$(for p in $(closure $seeds $(token_pids "$TOKEN") $(job_pids "$CONF")); do alive "$p" && echo "$p"; done)
		[ -z "$left" ] && break
		# shellcheck disable=SC2086
		kill -s KILL $left 2>/dev/null
		seeds="$seeds $left"
		all+=($left)
		nap 0.1
	done
	[ -f "$(pids_file)" ] && mv -f "$(pids_file)" "$(pids_file).stopped"
	if [ -n "$left" ]; then
		warn "processes survived SIGKILL: $(echo $left)"
		ps -o pid,stat,args -p "$(echo $left | tr ' ' ,)" >&2 2>/dev/null
		return 1
	fi
	debug "all dead"
	# 3. dead processes stay zombies until their parent reaps them; ours are orphans of PID 1,
	# which may reap only every second or two (this VM's init does). Wait for that (bounded), so
	# that `pgrep slurm` right after a stop is empty.
	if [ "$reap_to" != 0 ] && [ ${#all[@]} -gt 0 ]; then
		deadline=$(($(now_us) + reap_to * 1000000))
		while :; do
			left=
			for p in "${all[@]}"; do [ -e "/proc/$p" ] && { left=$p; break; }; done
			[ -z "$left" ] && break
			if [ "$(now_us)" -ge "$deadline" ]; then
				say "some exited processes are still zombies (not reaped by their parent yet; harmless)"
				break
			fi
			nap 0.1
		done
	fi
	say "stopped $D in $(elapsed "$t0") s"
	return 0
}

cmd_stop() {
	local dir= cto=10 rto=3
	while [ $# -gt 0 ]; do
		case $1 in
		-t | --timeout) cto=${2:?}; shift 2 ;;
		--no-reap) rto=0; shift ;;
		-q) QUIET=1; shift ;;
		-*) usage_die "stop: unknown option $1" ;;
		*) [ -z "$dir" ] || usage_die "stop: extra argument $1"; dir=$1; shift ;;
		esac
	done
	[ -n "$dir" ] || usage_die "stop: missing DIR"
	need_root
	[ -d "$dir" ] || { say "nothing to stop: $dir does not exist"; return 0; }
	load "$dir"
	lock_dir
	do_stop "$cto" "$rto"
}

# ---------------------------------------------------------------------------------------------
# start

write_conf() {
	local host=$1 i nodes
	if [ "$LAB_NODES" -eq 1 ]; then nodes=${LAB_PREFIX}1; else nodes="$LAB_PREFIX[1-$LAB_NODES]"; fi
	{
		printf '# Generated by internal/lab/slurm/lab.sh for %s - do not edit, it is rewritten on start.\n' "$D"
		cat <<EOF
ClusterName=lab
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$LAB_PORTBASE
SlurmUser=$LAB_SLURM_USER
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/linear
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
PrologFlags=Alloc
PrologEpilogTimeout=120
EOF
		if [ "$LAB_ACCT" = 1 ]; then
			# AccountingStoragePass: the munge socket of slurmdbd connections (AuthInfo
			# does not cover them: sacct would look for /run/munge's)
			printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=%d\nAccountingStoragePass=%s\n' \
				"$(dbd_port)" "$D/munge/munge.sock"
		else
			printf 'AccountingStorageType=accounting_storage/none\n'
		fi
		if [ -n "$LAB_HOOK" ]; then
			printf 'Prolog=%s\nEpilog=%s\nPrologSlurmctld=%s\nEpilogSlurmctld=%s\n' "$LAB_HOOK" "$LAB_HOOK" "$LAB_HOOK" "$LAB_HOOK"
		fi
		if [ "$LAB_SCAVENGER" = 1 ]; then
			printf 'PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\nJobRequeue=1\n'
		fi
		for ((i = 1; i <= LAB_NODES; i++)); do
			printf 'NodeName=%s%d NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=1 RealMemory=1000 State=UNKNOWN\n' "$LAB_PREFIX" "$i" "$host" $((LAB_PORTBASE + i))
		done
		if [ "$LAB_SCAVENGER" = 1 ]; then
			printf 'PartitionName=main Nodes=%s Default=YES MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF\n' "$nodes"
			printf 'PartitionName=scavenger Nodes=%s MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=0\n' "$nodes"
		else
			printf 'PartitionName=main Nodes=%s Default=YES MaxTime=INFINITE State=UP\n' "$nodes"
		fi
		if [ ${#EXTRA[@]} -gt 0 ]; then
			printf '# --extra\n'
			printf '%s\n' "${EXTRA[@]}"
		fi
	} >"$CONF.tmp" && mv -f "$CONF.tmp" "$CONF"
}

pick_ports() { # sets LAB_PORTBASE (explicit: checked; else first free slot from a hash of DIR)
	local want=$1 last stride slots start k b
	scan_busy_ports
	CLAIMED=$(claimed_ranges)
	if [ -n "$want" ]; then
		last=$((want + LAB_NODES + LAB_ACCT))
		[ "$want" -ge 1024 ] && [ "$last" -le 65535 ] || die "port range $want-$last out of 1024-65535"
		for ((b = want; b <= last; b++)); do
			if [ -n "${BUSY[$b]:-}" ]; then
				printf '%s: error: port %d (of %d-%d, -p %d) is in use:\n' "$PROG" "$b" "$want" "$last" "$want" >&2
				who_has_port "$b"
				exit 1
			fi
		done
		range_free "$want" "$last" || die "ports $want-$last overlap a running lab's range ($(echo $CLAIMED)); stop it or pick another -p"
		LAB_PORTBASE=$want
		return 0
	fi
	stride=$(((LAB_NODES + LAB_ACCT + 1 + 99) / 100 * 100))
	slots=$(((PORT_HI - PORT_LO) / stride))
	[ "$slots" -ge 1 ] || die "too many nodes for the automatic port range; give -p"
	start=$(($(printf '%s' "$D" | cksum | cut -d' ' -f1) % slots))
	for ((k = 0; k < slots; k++)); do
		b=$((PORT_LO + ((start + k) % slots) * stride))
		if range_free "$b" $((b + LAB_NODES + LAB_ACCT)); then
			LAB_PORTBASE=$b
			return 0
		fi
	done
	die "no free port range of $((LAB_NODES + LAB_ACCT + 1)) ports in $PORT_LO-$PORT_HI"
}

# start_accounting: a private MariaDB in DIR/acct (its unix socket only: no TCP port to
# collide with), the database user slurmdbd logs in as (a fresh random password), slurmdbd
# on dbd_port, and the cluster registered in it. slurmdbd finds the socket through
# MYSQL_UNIX_PORT (StorageHost=localhost means the socket to MariaDB's client library).
start_accounting() {
	local a=$D/acct pass
	mkdir -p "$a" && chmod 0700 "$a" || start_fail "cannot create $a"
	mariadb-install-db --no-defaults --datadir="$a/db" --user=root --auth-root-authentication-method=socket \
		--skip-test-db >"$D/log/mariadb-install.out" 2>&1 || start_fail "mariadb-install-db failed (log/mariadb-install.out)"
	launch mariadb "" mariadbd --no-defaults --datadir="$a/db" --socket="$a/mysqld.sock" --pid-file="$a/mysqld.pid" \
		--skip-networking --user=root --innodb-buffer-pool-size=32M --log-error="$D/log/mariadb.log"
	until mariadb --no-defaults --socket="$a/mysqld.sock" -uroot -e 'select 1' >/dev/null 2>&1; do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "mariadbd exited during start-up (log/mariadb.log)"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "MariaDB not answering after ${timeout}s"
		nap 0.1
	done
	pass=$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')
	mariadb --no-defaults --socket="$a/mysqld.sock" -uroot \
		-e "CREATE USER 'slurm'@'localhost' IDENTIFIED BY '$pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" ||
		start_fail "cannot create MariaDB's slurm user"
	(
		umask 077
		printf '%s\n' "AuthType=auth/munge" "AuthInfo=socket=$D/munge/munge.sock" "DbdHost=localhost" \
			"DbdAddr=127.0.0.1" "DbdPort=$(dbd_port)" "SlurmUser=$LAB_SLURM_USER" "LogFile=$D/log/slurmdbd.log" \
			"PidFile=$D/run/slurmdbd.pid" "StorageType=accounting_storage/mysql" "StorageHost=localhost" \
			"StorageUser=slurm" "StoragePass=$pass" "StorageLoc=slurm_acct_db" >"$D/etc/slurmdbd.conf"
	)
	chown "$LAB_SLURM_USER:" "$D/etc/slurmdbd.conf" || start_fail "cannot chown slurmdbd.conf"
	launch slurmdbd "" env "MYSQL_UNIX_PORT=$a/mysqld.sock" slurmdbd -D
	until ports_listening "$(dbd_port)" "$(dbd_port)"; do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "slurmdbd exited during start-up (its log follows)"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "slurmdbd not listening on $(dbd_port) after ${timeout}s"
		nap 0.1
	done
	until timeout 10 sacctmgr -nP list cluster format=cluster 2>/dev/null | grep -qx lab; do
		timeout 10 sacctmgr -i add cluster lab >>"$D/log/sacctmgr.out" 2>&1
		[ "$(now_us)" -lt "$deadline" ] || start_fail "cannot register cluster lab with slurmdbd after ${timeout}s"
		nap 0.2
	done
	debug "accounting up (slurmdbd on $(dbd_port))"
}

START_CLEANUP=0
start_fail() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	log_tails 25
	QUIET=1 do_stop 2 || true
	exit 1
}
on_signal() {
	trap - INT TERM HUP
	if [ "$START_CLEANUP" = 1 ]; then
		warn "interrupted; stopping what was started"
		QUIET=1 do_stop 2 || true
	fi
	exit 130
}

cmd_start() {
	local dir= want_port= timeout=30 replace=0 t0 host u deadline i died
	LAB_NODES=4 LAB_SLURM_USER=root LAB_HOOK= LAB_SCAVENGER=0 LAB_PREFIX=n LAB_ACCT=0
	EXTRA=()
	while [ $# -gt 0 ]; do
		case $1 in
		-n | --nodes) LAB_NODES=${2:?}; shift 2 ;;
		--prefix) LAB_PREFIX=${2?}; shift 2 ;;
		-p | --port | --portbase) want_port=${2:?}; shift 2 ;;
		--hook) LAB_HOOK=${2:?}; shift 2 ;;
		--no-hooks) LAB_HOOK=; shift ;;
		--scavenger) LAB_SCAVENGER=1; shift ;;
		--accounting) LAB_ACCT=1; shift ;;
		--slurm-user) LAB_SLURM_USER=${2:?}; shift 2 ;;
		--extra) EXTRA+=("${2?}"); shift 2 ;;
		-t | --timeout) timeout=${2:?}; shift 2 ;;
		--replace) replace=1; shift ;;
		-q | --quiet) QUIET=1; shift ;;
		-*) usage_die "start: unknown option $1" ;;
		*) [ -z "$dir" ] || usage_die "start: extra argument $1"; dir=$1; shift ;;
		esac
	done
	[ -n "$dir" ] || usage_die "start: missing DIR"
	case $LAB_NODES in '' | *[!0-9]* | 0*) usage_die "start: -n wants a positive number" ;; esac
	case $timeout in '' | *[!0-9]*) usage_die "start: -t wants whole seconds" ;; esac
	case $want_port in *[!0-9]*) usage_die "start: -p wants a number" ;; esac
	# node names PREFIX1..PREFIXN: a letter first, then letters (Slurm hostlists would read
	# digits at the end of the prefix as part of the index)
	case $LAB_PREFIX in [A-Za-z] | [A-Za-z]*[A-Za-z_-]) ;; *) usage_die "start: --prefix wants letters (and - _), starting and ending with a letter or - _" ;; esac
	case $LAB_PREFIX in *[!A-Za-z_-]*) usage_die "start: --prefix wants letters and - _ only" ;; esac
	need_root
	need_bins munged munge unmunge slurmctld slurmd scontrol sinfo squeue scancel setsid flock timeout ps runuser cksum
	if [ "$LAB_ACCT" = 1 ]; then
		need_bins mariadbd mariadb-install-db mariadb slurmdbd sacct sacctmgr
		timeout=$((timeout + 60))
	fi
	t0=$(now_us)

	D=$(abspath "$dir") || die "bad DIR '$dir'"
	check_dir_name "$D" "$LAB_NODES"
	CONF=$D/etc/slurm.conf
	export SLURM_CONF=$CONF
	id -u "$LAB_SLURM_USER" >/dev/null 2>&1 || die "--slurm-user: no such user '$LAB_SLURM_USER'"
	if [ -n "$LAB_HOOK" ]; then
		case $LAB_HOOK in /*) ;; *) die "--hook must be an absolute path (Slurm runs hooks with no PATH): $LAB_HOOK" ;; esac
		case $LAB_HOOK in *[[:space:]]*) die "--hook path must not contain blanks" ;; esac
		[ -f "$LAB_HOOK" ] && [ -x "$LAB_HOOK" ] || die "--hook $LAB_HOOK is not an executable file"
		if [ "$LAB_SLURM_USER" != root ]; then
			runuser -u "$LAB_SLURM_USER" -- test -x "$LAB_HOOK" ||
				die "--hook $LAB_HOOK is not executable by SlurmUser $LAB_SLURM_USER (PrologSlurmctld/EpilogSlurmctld run as it)"
		fi
	fi

	lock_dir
	# refuse to start over a running cluster (or its leftovers) in the same DIR
	local old_nodes=$LAB_NODES old_user=$LAB_SLURM_USER old_hook=$LAB_HOOK old_scav=$LAB_SCAVENGER old_prefix=$LAB_PREFIX old_acct=$LAB_ACCT
	local running
	TOKEN=
	[ -r "$D/run/token" ] && read -r TOKEN <"$D/run/token"
	running=$( { recorded_live; token_pids "$TOKEN"; } | sort -u | tr '\n' ' ')
	if [ -n "${running// /}" ]; then
		if [ $replace = 1 ]; then
			say "stopping the cluster still running in $D (--replace)"
			do_stop 5 || die "could not stop the old cluster in $D"
		else
			die "a cluster is still running in $D (pids $running); run: $0 stop $D   (or start --replace)"
		fi
	fi
	LAB_NODES=$old_nodes LAB_SLURM_USER=$old_user LAB_HOOK=$old_hook LAB_SCAVENGER=$old_scav LAB_PREFIX=$old_prefix LAB_ACCT=$old_acct

	# fresh directories; jobs/ (job output of the tests) is kept
	rm -rf "$D/etc" "$D/run" "$D/log" "$D/state" "$D/spool" "$D/munge" "$D/acct" "$D/env" || die "cannot clean $D"
	mkdir -p "$D/etc" "$D/run" "$D/log" "$D/state" "$D/spool" "$D/munge" "$D/jobs" || die "cannot create dirs in $D"
	for ((i = 1; i <= LAB_NODES; i++)); do mkdir -p "$D/spool/$LAB_PREFIX$i"; done
	chmod 0755 "$D" "$D/etc" "$D/run" "$D/log" "$D/state" "$D/spool"
	chmod 0755 "$D/munge" && chown root:root "$D/munge"   # munged insists on a root-owned dir
	chmod 1777 "$D/jobs"
	TOKEN=$(od -An -tx8 -N8 /dev/urandom | tr -d ' \n')
	printf '%s\n' "$TOKEN" >"$D/run/token"
	: >"$D/run/pids"
	dd if=/dev/urandom of="$D/etc/munge.key" bs=1024 count=1 2>/dev/null || die "cannot write munge key"
	chmod 0400 "$D/etc/munge.key"

	host=$(hostname -s 2>/dev/null) || host=
	[ -n "$host" ] || host=$(uname -n)
	host=${host%%.*}

	# ports: chosen and bound under a machine-wide lock, so that two concurrent starts cannot
	# pick the same range; the lock is released once every daemon listens.
	# The default lock is taken on slurmctld's binary, opened read-only: every lab on this
	# machine runs that same file, and flock(2) needs no write access, so the lock writes
	# nothing anywhere (no fixed file in /tmp).
	if [ -n "$GLOBAL_LOCK" ]; then
		exec 8>>"$GLOBAL_LOCK" || die "cannot open $GLOBAL_LOCK"
	else
		GLOBAL_LOCK=$(command -v slurmctld) || die "slurmctld not found"
		exec 8<"$GLOBAL_LOCK" || die "cannot open $GLOBAL_LOCK"
	fi
	flock -w 120 8 || die "timed out waiting for the port lock $GLOBAL_LOCK"
	pick_ports "$want_port"

	{
		printf 'LAB_NODES=%s\nLAB_PORTBASE=%s\nLAB_SLURM_USER=%s\nLAB_HOOK=%s\nLAB_SCAVENGER=%s\nLAB_PREFIX=%s\nLAB_ACCT=%s\n' \
			"$LAB_NODES" "$LAB_PORTBASE" "$LAB_SLURM_USER" "$LAB_HOOK" "$LAB_SCAVENGER" "$LAB_PREFIX" "$LAB_ACCT"
	} >"$D/etc/lab.env"
	write_conf "$host"
	if [ "$LAB_SLURM_USER" != root ]; then
		u=$LAB_SLURM_USER
		touch "$D/log/slurmctld.log"
		chown -R "$u:" "$D/state" "$D/log" "$D/run" || die "chown to $u failed"
		runuser -u "$u" -- test -w "$D/state" -a -w "$D/log" -a -r "$CONF" ||
			die "user $u cannot reach $D (a parent directory is not searchable by it? mktemp -d makes 0700 dirs: chmod 0755 them or choose another DIR)"
	fi

	START_CLEANUP=1
	trap on_signal INT TERM HUP
	deadline=$((t0 + timeout * 1000000))

	# 1. munged
	launch munged "" munged -F --socket="$D/munge/munge.sock" --key-file="$D/etc/munge.key" \
		--pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed"
	until munge_ok; do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "munged exited during start-up"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "munge not working after ${timeout}s"
		nap 0.05
	done

	debug "munge OK"
	# 1b. accounting: slurmctld refuses to start on a slurmdbd it cannot reach
	if [ "$LAB_ACCT" = 1 ]; then start_accounting; fi
	# 2. slurmctld
	launch slurmctld "" slurmctld -D -i -f "$CONF"
	until ctld_up; do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "$(echo $died) exited during start-up (its log follows)"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "slurmctld not UP after ${timeout}s"
		nap 0.1
	done

	debug "slurmctld UP"
	# 3. the nodes
	for ((i = 1; i <= LAB_NODES; i++)); do
		launch "slurmd:$LAB_PREFIX$i" "$LAB_PREFIX$i" slurmd -D -f "$CONF" -N "$LAB_PREFIX$i"
	done
	until ports_listening "$LAB_PORTBASE" $((LAB_PORTBASE + LAB_NODES)); do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "$(echo $died) exited during start-up (its log follows)"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "daemons not listening on $LAB_PORTBASE-$((LAB_PORTBASE + LAB_NODES)) after ${timeout}s"
		nap 0.05
	done
	flock -u 8
	exec 8>&-
	debug "all ports listening"

	until all_idle "$LAB_NODES"; do
		died=$(daemons_died)
		[ -z "$died" ] || start_fail "$(echo $died) exited during start-up (its log follows)"
		[ "$(now_us)" -lt "$deadline" ] || start_fail "nodes not all idle after ${timeout}s: $(not_idle_summary)"
		nap 0.1
	done
	trap - INT TERM HUP
	START_CLEANUP=0

	printf 'export SLURM_CONF=%s\n' "$CONF" >"$D/env"
	local scav=
	[ "$LAB_SCAVENGER" = 1 ] && scav=", scavenger"
	say "$LAB_NODES nodes idle in $(elapsed "$t0") s (ports $LAB_PORTBASE-$((LAB_PORTBASE + LAB_NODES)), SlurmUser=$LAB_SLURM_USER${LAB_HOOK:+, hook $LAB_HOOK}$scav)"
	printf 'export SLURM_CONF=%s\n' "$CONF"
}

# ---------------------------------------------------------------------------------------------
# status, wait-idle, env, logs

cmd_status() {
	local pid st role rc=0 n_alive=0 out
	load "${1:-}"
	if [ ! -s "$(pids_file)" ]; then
		echo "not running ($D)"
		return 3
	fi
	while read -r pid st role; do
		if [ "$pid" = - ]; then
			printf '%-12s stopped (stop-node)\n' "$role"
		elif same_proc "$pid" "$st"; then
			printf '%-12s pid %-7s alive\n' "$role" "$pid"
			n_alive=$((n_alive + 1))
		else
			printf '%-12s pid %-7s DEAD\n' "$role" "$pid"
			rc=1
		fi
	done <"$(pids_file)"
	if out=$(node_states) && [ -n "$out" ]; then
		echo "nodes:"
		printf '%s\n' "$out" | sed 's/^/  /'
		timeout 10 sinfo -h -R -o '  reason: %N %E' 2>/dev/null
		echo "jobs: $(timeout 10 squeue -h -o %A 2>/dev/null | wc -l)"
	else
		echo "nodes: (slurmctld not answering)"
	fi
	return $rc
}

cmd_wait_idle() {
	local t0 to=${2:-30} deadline
	load "${1:-}"
	case $to in '' | *[!0-9]*) usage_die "wait-idle: TIMEOUT wants whole seconds" ;; esac
	[ "$LAB_NODES" -gt 0 ] || die "no lab in $D (missing $D/etc/lab.env)"
	t0=$(now_us)
	deadline=$((t0 + to * 1000000))
	until all_idle "$LAB_NODES"; do
		if [ "$(now_us)" -ge "$deadline" ]; then
			printf '%s: error: nodes not all idle after %ss: %s\n' "$PROG" "$to" "$(not_idle_summary)" >&2
			return 1
		fi
		nap 0.1
	done
	say "all $LAB_NODES nodes idle after $(elapsed "$t0") s"
}

cmd_env() {
	load "${1:-}"
	[ -f "$CONF" ] || die "no lab in $D"
	printf 'export SLURM_CONF=%s\n' "$CONF"
}

cmd_logs() {
	load "${1:-}"
	QUIET=0 log_tails "${2:-25}"
}

# ---------------------------------------------------------------------------------------------
# single nodes

node_args() { # DIR NODE -> D, NODE, NODE_I
	load "${1:-}"
	NODE=${2:-}
	[ -n "$NODE" ] || usage_die "missing NODE"
	NODE_I=${NODE#"$LAB_PREFIX"}
	case $NODE_I in '' | *[!0-9]* | 0*) die "bad node name '$NODE' (${LAB_PREFIX}1..$LAB_PREFIX$LAB_NODES)" ;; esac
	[ "$NODE_I" -le "$LAB_NODES" ] || die "no node $NODE (${LAB_PREFIX}1..$LAB_PREFIX$LAB_NODES)"
	[ -s "$(pids_file)" ] || die "no cluster running in $D"
}

do_stop_node() { # sig steps
	local sig=$1 steps=$2 line pid st set deadline extra=
	line=$(role_pid "slurmd:$NODE")
	pid=${line% *}
	st=${line#* }
	if [ $steps = 1 ]; then extra=$(node_pids "$TOKEN" "$NODE"); fi
	if [ -n "$line" ] && same_proc "$pid" "$st"; then extra="$extra $pid"; fi
	if [ -z "${extra// /}" ]; then
		say "slurmd of $NODE is not running"
	else
		if [ $steps = 1 ]; then
			# shellcheck disable=SC2086
			set=$(closure $extra)
		else
			set=$pid
		fi
		# shellcheck disable=SC2086
		kill -s "$sig" $set 2>/dev/null
		deadline=$(($(now_us) + 5000000))
		while :; do
			local any=
			for p in $set; do alive "$p" && any="$any $p"; done
			[ -z "$any" ] && break
			if [ "$(now_us)" -ge "$deadline" ]; then
				# shellcheck disable=SC2086
				kill -s KILL $any 2>/dev/null
				[ "$sig" = KILL ] && { warn "still alive after SIGKILL:$any"; break; }
				sig=KILL
				deadline=$(($(now_us) + 3000000))
			fi
			nap 0.05
		done
		local how="SIG$1"
		[ $steps = 1 ] && how="$how, with its steps"
		say "stopped slurmd of $NODE ($how)"
	fi
	replace_pid_line "slurmd:$NODE" "- - slurmd:$NODE"
}

do_start_node() { # timeout wait
	local to=$1 wait=$2 line pid st t0 t0s deadline port started info old
	line=$(role_pid "slurmd:$NODE")
	pid=${line% *}
	st=${line#* }
	if [ -n "$line" ] && same_proc "$pid" "$st"; then
		say "slurmd of $NODE already runs (pid $pid)"
		return 0
	fi
	port=$((LAB_PORTBASE + NODE_I))
	scan_busy_ports
	if [ -n "${BUSY[$port]:-}" ]; then
		printf '%s: error: port %d of %s is in use:\n' "$PROG" "$port" "$NODE" >&2
		who_has_port "$port"
		return 1
	fi
	# SlurmdStartTime has 1 s resolution: make sure the new slurmd's differs from the old one's
	old=$(timeout 10 scontrol -o show node "$NODE" 2>/dev/null | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p')
	old=$(date -d "${old:-None}" +%s 2>/dev/null || echo 0)
	while [ $(($(now_us) / 1000000)) -le "$old" ]; do nap 0.05; done
	t0=$(now_us)
	t0s=$((t0 / 1000000))
	# the pids line is rewritten by launch (appends) after removing the old one
	[ -f "$(pids_file)" ] && awk -v r="slurmd:$NODE" '$3 != r' "$(pids_file)" >"$(pids_file).tmp.$$" && mv -f "$(pids_file).tmp.$$" "$(pids_file)"
	launch "slurmd:$NODE" "$NODE" slurmd -D -f "$CONF" -N "$NODE"
	pid=$LAST_PID
	[ "$wait" = 1 ] || { say "started slurmd of $NODE (pid $pid)"; return 0; }
	deadline=$((t0 + to * 1000000))
	while :; do
		alive "$pid" || { printf '%s: error: slurmd of %s exited\n' "$PROG" "$NODE" >&2; tail -n 20 "$D/log/slurmd-$NODE.log" "$D/log/slurmd-$NODE.out" >&2 2>/dev/null; return 1; }
		# registered since we started it (SlurmdStartTime), and exactly idle
		info=$(timeout 10 scontrol -o show node "$NODE" 2>/dev/null)
		started=$(printf '%s\n' "$info" | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p')
		if [ -n "$started" ] && [ "$started" != None ] && [ "$(date -d "$started" +%s 2>/dev/null || echo 0)" -ge "$t0s" ] &&
			[ "$(node_states | awk -v n="$NODE" '$1 == n { print $2 }')" = idle ]; then
			break
		fi
		if [ "$(now_us)" -ge "$deadline" ]; then
			printf '%s: error: %s not registered and idle after %ss (%s)\n' "$PROG" "$NODE" "$to" \
				"$(node_states | awk -v n="$NODE" '$1 == n')" >&2
			return 1
		fi
		nap 0.1
	done
	say "$NODE registered and idle after $(elapsed "$t0") s (pid $pid)"
}

cmd_node() { # stop|start|restart DIR NODE [opts]
	local what=$1 dir=${2:-} node=${3:-} sig=TERM steps=0 to=30 wait=1
	shift 3 2>/dev/null || usage_die "$what-node: usage: $PROG $what-node DIR NODE"
	while [ $# -gt 0 ]; do
		case $1 in
		--kill) sig=KILL; shift ;;
		--steps) steps=1; shift ;;
		-t | --timeout) to=${2:?}; shift 2 ;;
		--no-wait) wait=0; shift ;;
		-q) QUIET=1; shift ;;
		*) usage_die "$what-node: unknown argument $1" ;;
		esac
	done
	need_root
	node_args "$dir" "$node"
	lock_dir
	case $what in
	stop) do_stop_node $sig $steps ;;
	start) do_start_node "$to" $wait ;;
	restart) do_stop_node $sig $steps && do_start_node "$to" $wait ;;
	esac
}

cmd_restart_ctld() { # DIR [-t S]: slurmctld stopped with TERM (KILL after 10 s) and started again on its state
	local dir=${1:-} to=30 line pid st deadline t0
	shift 2>/dev/null || usage_die "restart-ctld: usage: $PROG restart-ctld DIR [-t S]"
	while [ $# -gt 0 ]; do
		case $1 in
		-t | --timeout) to=${2:?}; shift 2 ;;
		-q) QUIET=1; shift ;;
		*) usage_die "restart-ctld: unknown argument $1" ;;
		esac
	done
	need_root
	load "$dir"
	[ -s "$(pids_file)" ] || die "no cluster running in $D"
	lock_dir
	t0=$(now_us)
	line=$(role_pid slurmctld)
	pid=${line% *}
	st=${line#* }
	if [ -n "$line" ] && same_proc "$pid" "$st"; then
		kill -s TERM "$pid" 2>/dev/null
		deadline=$(($(now_us) + 10000000))
		while alive "$pid"; do
			if [ "$(now_us)" -ge "$deadline" ]; then
				kill -s KILL "$pid" 2>/dev/null
				deadline=$(($(now_us) + 5000000))
			fi
			nap 0.05
		done
	fi
	awk '$3 != "slurmctld"' "$(pids_file)" >"$(pids_file).tmp.$$" && mv -f "$(pids_file).tmp.$$" "$(pids_file)"
	# the state in StateSaveLocation is read back: jobs pending, running and ended survive
	launch slurmctld "" slurmctld -D -i -f "$CONF"
	pid=$LAST_PID
	deadline=$(($(now_us) + to * 1000000))
	until ctld_up; do
		alive "$pid" || { printf '%s: error: slurmctld exited\n' "$PROG" >&2; tail -n 20 "$D/log/slurmctld.log" >&2; return 1; }
		[ "$(now_us)" -lt "$deadline" ] || { printf '%s: error: slurmctld not UP after %ss\n' "$PROG" "$to" >&2; return 1; }
		nap 0.1
	done
	say "slurmctld restarted in $(elapsed "$t0") s (pid $pid)"
}

# ---------------------------------------------------------------------------------------------

cmd_install_deps() {
	local b missing=0 policy=/usr/sbin/policy-rc.d made_policy=0 rc
	for b in munged munge slurmctld slurmd sinfo; do command -v "$b" >/dev/null 2>&1 || missing=1; done
	[ $missing = 1 ] || { say "slurmctld, slurmd, slurm-client and munge are installed"; return 0; }
	need_root
	# keep the packages' maintainer scripts from starting system daemons
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge ||
		{ apt-get update && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge; }
	rc=$?
	[ $made_policy = 1 ] && rm -f "$policy"
	return $rc
}

main() {
	local cmd=${1:-help}
	shift 2>/dev/null || true
	case $cmd in
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	status) cmd_status "$@" ;;
	wait-idle) cmd_wait_idle "$@" ;;
	stop-node) cmd_node stop "$@" ;;
	start-node) cmd_node start "$@" ;;
	restart-node) cmd_node restart "$@" ;;
	restart-ctld) cmd_restart_ctld "$@" ;;
	env) cmd_env "$@" ;;
	logs) cmd_logs "$@" ;;
	install-deps) cmd_install_deps ;;
	help | -h | --help) usage ;;
	*) usage_die "unknown command '$cmd'" ;;
	esac
}

main "$@"
