#!/usr/bin/env bash
# BotBox benchmark: BotBox vs nginx vs a plain Go httputil.ReverseProxy
# ("floor", bench/floor) vs direct-to-origin, on loopback, in one run.
#
#   bench/run.sh              # full run: 3 repeats, about 6 minutes
#   QUICK=1 bench/run.sh      # 1 repeat, 3 s cells, about 2 minutes
#
# Run it as root on a machine with at least 2 CPUs, from anywhere. It
# installs nginx, wrk and curl with apt-get when missing, builds botbox, the
# HTTPS origin (bench/origin), the floor, the load client (bench/loadclient)
# and the runner (bench/runner), raises `ulimit -n`, and runs every scenario
# interleaved and repeated: proxies pinned to CPU 0, wrk/load client/origin to
# CPU 1, loopback only (the origin also listens on 127.0.0.1:443 and [::1]:443
# for the interception scenarios). It prints the table and writes
# bench/results/<UTC timestamp>.txt. docs/performance.md explains what is
# measured and how to read it.
#
# Optional environment:
#   REPEATS=N, DURATION=seconds per cell
#   ONLY=small,post,stream,intercept,sni,idle,dns   scenarios to run (ONLY=hold: set
#       everything up and wait, for manual experiments)
#   TARGETS=botbox,nginx  CONNS=16,128          small/post targets and connection counts
#   BOTBOX_VARIANTS="h1=GODEBUG=http2client=0;gogc400=GOGC=400"
#       extra BotBox processes in the small, post and stream scenarios
#       (environment variables comma-separated; a first element
#       "@/path/to/botbox" runs another binary, e.g. a baseline build; the
#       element "policy=v2" runs issue 11's 20-rule policy with 5 routes on
#       the hit rule: BOTBOX_VARIANTS="policyv2=policy=v2"; the element
#       "guard=off" runs with address_guard disabled, beside the default
#       (guard on): BOTBOX_VARIANTS="guardoff=guard=off"; the element
#       "placeholders=on" turns placeholders and the tripwire on:
#       BOTBOX_VARIANTS="ph=placeholders=on"; the element "inject=off" runs
#       rules that inject nothing, and with "scrub=all" too each of them
#       says scrub_responses: true:
#       BOTBOX_VARIANTS="noinject=inject=off;scruball=inject=off,scrub=all";
#       the element "engine=net/http" serves HTTP/1.1 with net/http instead
#       of BotBox's engine: BOTBOX_VARIANTS="nethttp=engine=net/http";
#       a variant named "base" running a baseline binary adds the budget
#       lines "BotBox / base": BOTBOX_VARIANTS="base=@/tmp/botbox-ee87e5f")
#   PROFILE=DIR   BotBox runs as bench/profile (the same server code with
#       pprof); DIR/cpu.prof and DIR/allocs.prof are written when it stops
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null || ! command -v curl >/dev/null || ! command -v taskset >/dev/null; then
  if [ "$(id -u)" != 0 ]; then echo "bench: nginx, wrk, curl and taskset are needed (run as root to install them)" >&2; exit 1; fi
  echo "bench: installing nginx, wrk, curl (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light wrk curl util-linux >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx wrk curl util-linux >/dev/null
fi
if [ "$(nproc)" -lt 2 ]; then echo "bench: needs at least 2 CPUs (proxy and load are pinned apart)" >&2; exit 1; fi

bin=$(mktemp -d /tmp/botbox-bench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
echo "bench: building" >&2
go build -trimpath -o "$bin/botbox" ./cmd/botbox
for p in origin floor loadclient runner profile; do go build -trimpath -o "$bin/$p" "./bench/$p"; done

# 10,000 idle connections: the proxy and the load client each need > 10k fds.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

mkdir -p bench/results
suffix=""; [ "${QUICK:-}" = 1 ] && suffix="-quick"
out="bench/results/$(date -u +%Y%m%dT%H%M%SZ)${suffix}.txt"
taskset -c 1 "$bin/runner" -bin "$bin" -out "$out"
