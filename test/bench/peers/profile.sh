#!/usr/bin/env bash
# profile.sh profiles each path of the peers benchmark and writes the pprof
# tops beside it, in test/bench/peers/profiles/ (make bench-profiles):
#
#   echo-*   the WebSocket echo path (-parts nginx, 100 then 1,000 connections)
#   state-*  the page-state path (-parts redis, stickyd's cells 1 KB and 10 MB)
#   idle-*   what idle WebSockets hold (-parts idle, the front's heap in use)
#
# For each path: front-cpu (the agent process: front, supervisor, raft),
# front-alloc (what it allocated, by bytes), worker-cpu and worker-alloc
# (one of the two go-plugin workers running the counter app). The peers
# (nginx, Redis, the Go servers) run too and are not profiled here.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=test/bench/peers/profiles
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/peers" ./test/bench/peers
mkdir -p "$out"

top() { # top NAME PROFILE [pprof flags...]
	local name=$1 prof=$2
	shift 2
	{
		echo "# $name: go tool pprof -top $* (test/bench/peers/profile.sh, $(date -u +%Y-%m-%d), $(nproc) CPUs, $(go env GOVERSION))"
		go tool pprof -top -nodecount=30 "$@" "$prof" 2>/dev/null
		echo
		echo "# the same, by cumulative share (-cum)"
		go tool pprof -top -cum -nodecount=40 "$@" "$prof" 2>/dev/null | sed -n '/flat%/,$p'
	} >"$out/$name.txt"
}

# run PATH SECONDS ARGS...: SECONDS bounds the workers' profile (it must end
# before they are stopped; the CPU profile counts busy time only).
run() {
	local path=$1 secs=$2
	shift 2
	echo "profiling the $path path ..." >&2
	rm -f "$tmp"/p.*
	STICKYD_PEERS_CPUPROFILE="$tmp/p" \
		STICKYD_BENCH_WORKER_CPUPROFILE="$tmp/p.worker" \
		STICKYD_BENCH_WORKER_CPUPROFILE_SECONDS="$secs" \
		"$tmp/peers" -out "" "$@" >"$tmp/$path.table"
	local front worker
	front=$(ls "$tmp"/p.stickyd.* | grep -v '\.heap$' | head -1)
	worker=$(ls "$tmp"/p.worker.* | grep -v '\.heap$' | head -1)
	top "$path-front-cpu" "$front"
	top "$path-front-alloc" "$front.heap" -sample_index=alloc_space
	top "$path-worker-cpu" "$worker"
	top "$path-worker-alloc" "$worker.heap" -sample_index=alloc_space
}

run echo 55 -parts nginx -conns 100,1000 -duration 10s
run state 80 -parts redis -sizes 1KB,10MB -codecs json -duration 10s

echo "profiling the idle path ..." >&2
rm -f "$tmp"/p.*
STICKYD_PEERS_HEAPPROFILE="$tmp/p" "$tmp/peers" -out "" -parts idle -idle 10000 >"$tmp/idle.table"
# The third reading is the one with the WebSockets open.
top idle-front-heap "$(ls "$tmp"/p.stickyd.*.3)" -sample_index=inuse_space
echo "wrote $out/" >&2
