#!/bin/sh
# docs/plots/make-plots.sh — regenerate docs/benchmarks.md's data, tables and plots.
#
#   docs/plots/make-plots.sh            JSON in docs/plots/data -> PNGs + docs/plots/tables.md
#   docs/plots/make-plots.sh --run      first run twbench (tcp and shm) to refresh the JSON
#
# Environment: BUILD (build dir with tools/twbench; default build), PROVIDERS (default
# "tcp shm"), COUNT (objects per closed-loop run; default 1000000), TWBENCH_ARGS (extra options
# for every run). Needs jq and gnuplot (gnuplot-nox). Numbers from a shared 2-vCPU VM are
# noisy: run when the load average is low, and compare ratios, not absolute values.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
providers=${PROVIDERS:-tcp shm}
count=${COUNT:-1000000}
data=$here/data
mkdir -p "$data"

run() { # name provider args...
	name=$1 prov=$2
	shift 2
	echo "make-plots: $name ($prov): twbench $*" >&2
	# shellcheck disable=SC2086
	"$build/tools/twbench" --provider "$prov" --json --no-progress ${TWBENCH_ARGS:-} "$@" \
		> "$data/$name-$prov.json.tmp"
	mv "$data/$name-$prov.json.tmp" "$data/$name-$prov.json"
}

if [ "${1:-}" = --run ]; then
	for p in $providers; do
		uptime >&2
		run compare "$p" --mode onesided,rpc,raw --count "$count"
		run sizes "$p" --mode onesided,rpc,raw --sizes 16,64,256,1024,4096,16384,65536 \
			--count "$count" --max-bytes 256M --latency-count 2000
		run load "$p" --mode onesided,rpc,raw \
			--rate 50000,100000,200000,400000,600000,800000,1000000,1400000 \
			--count 300000 --latency-count 0
		run batch "$p" --mode onesided,rpc --batch 1,4,16,64,256 --count 200000 \
			--latency-count 2000
		run replicas "$p" --mode onesided,rpc,raw -r 1,2,3 --inflight 2,8,32 \
			--count 500000 --latency-count 2000
	done
fi

# ---------------------------------------------------------------- JSON -> data files
# A report is one JSON object with .runs (several runs) or one run object (a single run).
runs='if has("runs") then .runs[] else . end'
for p in $providers; do
	for m in onesided rpc raw; do
		f=$data/sizes-$p.json
		[ -f "$f" ] && jq -r "$runs | select(.mode == \"$m\") |
			\"\(.size) \(.mb_per_s) \(.objects_per_s) \(.backup_cpu_s_per_gb // 0) \(.sync_latency_us.p50) \(.sync_latency_us.p99)\"" \
			"$f" > "$data/sizes-$p-$m.dat"
		f=$data/load-$p.json
		[ -f "$f" ] && jq -r "$runs | select(.mode == \"$m\") |
			\"\(.offered_rate) \(.objects_per_s) \(.async_ack_latency_us.p50) \(.async_ack_latency_us.p99)\"" \
			"$f" > "$data/load-$p-$m.dat"
		f=$data/batch-$p.json
		[ -f "$f" ] && jq -r "$runs | select(.mode == \"$m\") |
			\"\(.batch) \(.objects_per_s) \(.backup_cpu_s_per_mobj // 0) \(.entries_per_write)\"" \
			"$f" > "$data/batch-$p-$m.dat"
	done
	f=$data/compare-$p.json
	[ -f "$f" ] && jq -r "$runs | \"\(.mode) \(.backup_cpu_s_per_gb // 0) \(.backup_cpu_s_per_mobj // 0)\"" \
		"$f" > "$data/cpu-$p.dat"
done

# ---------------------------------------------------------------- plots
for p in $providers; do
	[ -f "$data/sizes-$p-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/throughput-vs-size-$p.png"
set title "Payload throughput vs object size ($p, r = 3, async, batch <= 256, 8 in flight)"
set logscale x 2
set logscale y
set xlabel "object size (bytes)"
set ylabel "MB/s of payload"
set key top left
set grid
plot "$data/sizes-$p-onesided.dat" using 1:2 with linespoints lw 2 title "onesided (Tailwind)", \
     "$data/sizes-$p-rpc.dat" using 1:2 with linespoints lw 2 title "rpc (RAMCloud-style)", \
     "$data/sizes-$p-raw.dat" using 1:2 with linespoints lw 2 dt 2 title "raw one-sided writes"
GP
	[ -f "$data/sizes-$p-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/backup-cpu-vs-size-$p.png"
set title "Backup CPU per GB replicated ($p, all 3 backups together)"
set logscale x 2
set logscale y
set xlabel "object size (bytes)"
set ylabel "backup CPU seconds per GB of objects"
set key top right
set grid
plot "$data/sizes-$p-onesided.dat" using 1:4 with linespoints lw 2 title "onesided", \
     "$data/sizes-$p-rpc.dat" using 1:4 with linespoints lw 2 title "rpc", \
     "$data/sizes-$p-raw.dat" using 1:4 with linespoints lw 2 dt 2 title "raw"
GP
	[ -f "$data/load-$p-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/latency-vs-load-$p.png"
set title "Latency vs offered load, open loop ($p, 100 B, r = 3; a run that cannot keep up queues)"
set logscale y
set logscale x
set xlabel "offered objects/s (--rate)"
set ylabel "submit -> ack latency (us)"
set key top left
set grid
plot "$data/load-$p-onesided.dat" using 1:3 with linespoints lw 2 title "onesided p50", \
     "$data/load-$p-onesided.dat" using 1:4 with linespoints lw 2 dt 2 title "onesided p99", \
     "$data/load-$p-rpc.dat" using 1:3 with linespoints lw 2 title "rpc p50", \
     "$data/load-$p-rpc.dat" using 1:4 with linespoints lw 2 dt 2 title "rpc p99", \
     "$data/load-$p-raw.dat" using 1:3 with linespoints lw 1 title "raw p50"
GP
	[ -f "$data/batch-$p-onesided.dat" ] && gnuplot <<GP
set terminal pngcairo size 900,560 font ",11"
set output "$here/batch-$p.png"
set title "Throughput and backup CPU vs batch limit ($p, 100 B, r = 3)"
set logscale x 2
set logscale y
set logscale y2
set xlabel "max entries per write (--batch)"
set ylabel "objects/s"
set y2label "backup CPU s per million objects"
set ytics nomirror
set y2tics
set key top left
set grid
plot "$data/batch-$p-onesided.dat" using 1:2 with linespoints lw 2 title "onesided objects/s", \
     "$data/batch-$p-rpc.dat" using 1:2 with linespoints lw 2 title "rpc objects/s", \
     "$data/batch-$p-onesided.dat" using 1:3 axes x1y2 with linespoints lw 2 dt 2 title "onesided backup CPU", \
     "$data/batch-$p-rpc.dat" using 1:3 axes x1y2 with linespoints lw 2 dt 2 title "rpc backup CPU"
GP
done
cpufiles=""
for p in $providers; do [ -f "$data/cpu-$p.dat" ] && cpufiles="$cpufiles $p"; done
if [ -n "$cpufiles" ]; then
	plot=""
	for p in $cpufiles; do
		plot="$plot${plot:+, }\"$data/cpu-$p.dat\" using 3:xtic(1) title \"$p\""
	done
	gnuplot <<GP
set terminal pngcairo size 900,520 font ",11"
set output "$here/backup-cpu.png"
set title "Backup CPU per million objects replicated (100 B, r = 3, all 3 backups)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "CPU seconds per million objects"
set yrange [0:*]
set grid ytics
plot $plot
GP
fi

# ---------------------------------------------------------------- tables
{
	echo "<!-- generated by docs/plots/make-plots.sh from docs/plots/data/*.json; do not edit -->"
	for p in $providers; do
		for n in compare sizes load batch replicas; do
			f=$data/$n-$p.json
			[ -f "$f" ] || continue
			echo
			echo "### $n, $p"
			echo
			echo "| size | r | batch | in flight | offered | mode | objects/s | MB/s | sync p50 / p99 (us) | ack p50 / p99 (us) | backup CPU s (all) | CPU s/GB | CPU s/M obj | entries/write |"
			echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
			jq -r "$runs | \"| \(.size) | \(.replicas) | \(.batch) | \(.inflight) | \(if .offered_rate > 0 then (.offered_rate|floor) else \"closed\" end) | \(.mode) | \(.objects_per_s|floor) | \(.mb_per_s*100|floor/100) | \(.sync_latency_us.p50) / \(.sync_latency_us.p99) | \(.async_ack_latency_us.p50 // \"-\") / \(.async_ack_latency_us.p99 // \"-\") | \(.backup_cpu_total_s // \"-\") | \(.backup_cpu_s_per_gb // 0 |.*100|floor/100) | \(.backup_cpu_s_per_mobj // 0 |.*100|floor/100) | \(.entries_per_write*10|floor/10) |\"" "$f"
			if jq -e 'has("comparisons") and (.comparisons | length > 0)' "$f" > /dev/null; then
				echo
				echo "| size | r | batch | in flight | offered | onesided/rpc objects/s | sync p50 | sync p99 | ack p50 | ack p99 | backup CPU | backup progress thread CPU | onesided/raw bytes/s | rpc/raw bytes/s |"
				echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
				jq -r '.comparisons[] | def f: if . == null then "-" else (.*100|round/100|tostring) end;
					"| \(.size) | \(.replicas) | \(.batch) | \(.inflight) | \(if .offered_rate > 0 then (.offered_rate|floor) else "closed" end) | \(.throughput_onesided_over_rpc|f) | \(.sync_p50_onesided_over_rpc|f) | \(.sync_p99_onesided_over_rpc|f) | \(.ack_p50_onesided_over_rpc|f) | \(.ack_p99_onesided_over_rpc|f) | \(.backup_cpu_onesided_over_rpc|f) | \(.backup_progress_cpu_onesided_over_rpc|f) | \(.bytes_onesided_over_raw|f) | \(.bytes_rpc_over_raw|f) |"' "$f"
			fi
		done
	done
} > "$here/tables.md"
echo "make-plots: wrote $here/*.png and $here/tables.md" >&2
