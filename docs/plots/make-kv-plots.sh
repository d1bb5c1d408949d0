#!/bin/sh
# docs/plots/make-kv-plots.sh — regenerate docs/kv.md's evaluation: data, tables and plots.
#
#   docs/plots/make-kv-plots.sh            JSON in docs/plots/data/kv-* -> PNGs + docs/plots/kv-tables.md
#   docs/plots/make-kv-plots.sh --run      first run twkv-ycsb (tcp and shm) to refresh the JSON
#
# Environment: BUILD (build dir with examples/kv/twkv-ycsb; default build), PROVIDERS (default
# "tcp shm shm-fast"; shm-fast is shm with TW_FAB_SHM_FAST=on, docs/fabric.md), RECORDS (default 100000), DURATION (seconds per measured run; default 5),
# CLIENTS (the comparison's closed-loop requests in flight; default 128, as twkv-ycsb's), RATES (offered loads for the
# latency and CPU curves), YCSB_ARGS (extra options for every run). Needs jq and gnuplot
# (gnuplot-nox). Numbers from a shared 2-vCPU VM are noisy: compare ratios, not absolute values,
# and keep the load average each run records.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
providers=${PROVIDERS:-tcp shm shm-fast}
records=${RECORDS:-100000}
duration=${DURATION:-5}
clients=${CLIENTS:-128}
rates=${RATES:-10000,25000,50000,100000,150000,200000,300000,400000}
data=$here/data
mkdir -p "$data"

run() { # name provider args...
	name=$1 prov=$2 fast=off
	shift 2
	if [ "$prov" = shm-fast ]; then
		fast=on
	fi
	echo "make-kv-plots: $name ($prov): twkv-ycsb $* (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	# shellcheck disable=SC2086
	TW_FAB_SHM_FAST=$fast "$build/examples/kv/twkv-ycsb" --provider "${prov%-fast}" \
		--records "$records" --duration "$duration" --json ${YCSB_ARGS:-} "$@" \
		> "$data/kv-$name-$prov.json.tmp"
	mv "$data/kv-$name-$prov.json.tmp" "$data/kv-$name-$prov.json"
}

if [ "${1:-}" = --run ]; then
	for p in $providers; do
		run compare "$p" --runs 3 --clients "$clients"
		run clients "$p" --clients 4,16,64,256
		run load "$p" --mix w,a --rate "$rates"
	done
fi

# ---------------------------------------------------------------- JSON -> data files
for p in $providers; do
	for m in onesided rpc; do
		f=$data/kv-clients-$p.json
		[ -f "$f" ] && for x in c b a w; do
			jq -r ".runs[] | select(.mode == \"$m\" and .mix == \"$x\") |
				\"\(.clients) \(.ops_per_s)\"" "$f" > "$data/kv-clients-$p-$x-$m.dat"
		done
		f=$data/kv-load-$p.json
		[ -f "$f" ] && for x in w a; do
			jq -r ".runs[] | select(.mode == \"$m\" and .mix == \"$x\") |
				\"\(.offered_rate) \(.ops_per_s) \(.put_us.p50) \(.put_us.p99) \(.cores.serve) \(.cores.replicate) \(.cores.backup) \(.cores.process)\"" \
				"$f" > "$data/kv-load-$p-$x-$m.dat"
		done
	done
	f=$data/kv-compare-$p.json
	# Run 1 of the comparison, per mix and mode: CPU microseconds per operation of each role.
	[ -f "$f" ] && jq -r '.runs[] | select(.run == 1) | (1e6 / .ops_per_s) as $k |
		"\(.mix)-\(.mode) \(.cores.serve * $k) \(.cores.replicate * $k) \(.cores.backup * $k) \(.cores.other * $k)"' \
		"$f" > "$data/kv-cpu-$p.dat"
done

# ---------------------------------------------------------------- plots
for p in $providers; do
	d=$data/kv-clients-$p
	[ -f "$d-a-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 1000,720 font ",10"
set output "$here/kv-throughput-$p.png"
set multiplot layout 2,2 title "twkv throughput vs closed-loop clients ($p, 3 servers, r = 2, 30 B keys, 100 B values)"
set logscale x 2
set xlabel "clients (requests in flight)"
set ylabel "ops/s (all servers)"
set key top left
set grid
set title "YCSB-C (100 % GET)"
plot "$d-c-onesided.dat" using 1:2 with linespoints lw 2 title "onesided", "$d-c-rpc.dat" using 1:2 with linespoints lw 2 title "rpc"
set title "YCSB-B (95 % GET)"
plot "$d-b-onesided.dat" using 1:2 with linespoints lw 2 title "onesided", "$d-b-rpc.dat" using 1:2 with linespoints lw 2 title "rpc"
set title "YCSB-A (50 % GET)"
plot "$d-a-onesided.dat" using 1:2 with linespoints lw 2 title "onesided", "$d-a-rpc.dat" using 1:2 with linespoints lw 2 title "rpc"
set title "write-only (100 % PUT)"
plot "$d-w-onesided.dat" using 1:2 with linespoints lw 2 title "onesided", "$d-w-rpc.dat" using 1:2 with linespoints lw 2 title "rpc"
unset multiplot
GP
	d=$data/kv-load-$p
	[ -f "$d-w-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/kv-latency-$p.png"
set title "PUT latency vs offered load, write-only, open loop ($p; from each request's scheduled time)"
set logscale y
set xlabel "offered ops/s"
set ylabel "PUT latency (us)"
set key top left
set grid
plot "$d-w-onesided.dat" using 1:3 with linespoints lw 2 title "onesided p50", \
     "$d-w-onesided.dat" using 1:4 with linespoints lw 2 dt 2 title "onesided p99", \
     "$d-w-rpc.dat" using 1:3 with linespoints lw 2 title "rpc p50", \
     "$d-w-rpc.dat" using 1:4 with linespoints lw 2 dt 2 title "rpc p99"
GP
	[ -f "$d-w-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/kv-cpu-load-$p.png"
set title "Server CPU vs throughput, write-only, open loop ($p, 3 servers; cores summed over them)"
set xlabel "achieved ops/s"
set ylabel "cores"
set key top left
set grid
plot "$d-w-onesided.dat" using 2:5 with linespoints lw 2 title "onesided: serving", \
     "$d-w-onesided.dat" using 2:7 with linespoints lw 2 title "onesided: backup", \
     "$d-w-rpc.dat" using 2:5 with linespoints lw 2 dt 2 title "rpc: serving", \
     "$d-w-rpc.dat" using 2:7 with linespoints lw 2 dt 2 title "rpc: backup", \
     "$d-w-onesided.dat" using 2:6 with lines lw 1 title "onesided: primary's replication", \
     "$d-w-rpc.dat" using 2:6 with lines lw 1 dt 2 title "rpc: primary's replication"
GP
	[ -f "$data/kv-cpu-$p.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,520 font ",11"
set output "$here/kv-cpu-mix-$p.png"
set title "Server CPU per operation, by role and mix ($p, 3 servers, closed loop, $clients clients)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set ylabel "CPU us per operation (all servers)"
set yrange [0:*]
set xtics rotate by -30
set grid ytics
set key top left
plot "$data/kv-cpu-$p.dat" using 2:xtic(1) title "serving", '' using 3 title "primary's replication", '' using 4 title "backup", '' using 5 title "other"
GP
done

# ---------------------------------------------------------------- tables
{
	echo "<!-- generated by docs/plots/make-kv-plots.sh from docs/plots/data/kv-*.json; do not edit -->"
	for p in $providers; do
		for n in compare clients load; do
			f=$data/kv-$n-$p.json
			[ -f "$f" ] || continue
			echo
			echo "### $n, $p"
			echo
			echo "| mix | mode | run | clients | offered | load avg | ops/s | get p50 / p99 (us) | put p50 / p99 (us) | cores serve / repl / backup / process | backup CPU us per PUT | control RPCs per PUT |"
			echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
			jq -r '.runs[] | "| \(.mix) | \(.mode) | \(.run) | \(.clients) | \(.offered_rate|floor) | \(.load_avg) | \(.ops_per_s|floor) | \(.get_us.p50) / \(.get_us.p99) | \(.put_us.p50) / \(.put_us.p99) | \(.cores.serve*100|round/100) / \(.cores.replicate*100|round/100) / \(.cores.backup*100|round/100) / \(.cores.process*100|round/100) | \(.backup_cpu_us_per_put*100|round/100) | \(.rpcs_per_put) |"' "$f"
			echo
			echo "| mix | clients | offered | run | onesided/rpc ops/s | put p50 | put p99 | get p50 | backup CPU per PUT | server CPU per op |"
			echo "|---|---|---|---|---|---|---|---|---|---|"
			jq -r '.comparisons[] | def f: (.*100|round/100|tostring);
				"| \(.mix) | \(.clients) | \(.offered_rate|floor) | \(.run) | \(.ops_onesided_over_rpc|f) | \(.put_p50_onesided_over_rpc|f) | \(.put_p99_onesided_over_rpc|f) | \(.get_p50_onesided_over_rpc|f) | \(.backup_cpu_per_put_onesided_over_rpc|f) | \(.cpu_per_op_onesided_over_rpc|f) |"' "$f"
		done
	done
} > "$here/kv-tables.md"
echo "make-kv-plots: wrote $here/kv-*.png and $here/kv-tables.md" >&2
