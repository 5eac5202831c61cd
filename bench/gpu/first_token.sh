#!/usr/bin/env bash
# Process start to first token of `gearbox generate`, as a user's fresh process meets it:
#   bench/gpu/first_token.sh ENGINE [PROMPT_TOKENS]
# Runs `gearbox generate ENGINE --prompt-ids ... --max-new-tokens 1` five times, each a new
# process with a prompt of PROMPT_TOKENS (default 128) token ids, and prints the median
# milliseconds from launching the process to the generated token reaching its stdout (line
# buffered through stdbuf), on a line of its own. Each run's first-token and exit times go
# to stderr. The five runs read the engine file from the page cache after the first.
# Environment: GEARBOX (default `gearbox` on PATH), DEVICE (default cuda). Needs bash 5
# (EPOCHREALTIME) and coreutils' stdbuf.
set -euo pipefail
engine=$1
tokens=${2:-128}
gearbox=${GEARBOX:-gearbox}
device=${DEVICE:-cuda}
[[ -r $engine ]] || { echo "first_token.sh: cannot read $engine" >&2; exit 2; }
[[ $tokens =~ ^[1-9][0-9]*$ ]] || { echo "first_token.sh: PROMPT_TOKENS must be a positive integer" >&2; exit 2; }

# Ids below 2000, inside every vocabulary gearbox builds (the mini's is 2048).
ids=""
for ((i = 0; i < tokens; ++i)); do ids+="${ids:+,}$(((3 + i * 7919) % 2000))"; done

stamp=$(mktemp)
log=$(mktemp)
trap 'rm -f "$stamp" "$log"' EXIT
micros() { local t=${1/./}; echo $((10#$t)); }  # EPOCHREALTIME (s.us) as microseconds
first_ms=()
for run in 1 2 3 4 5; do
  start=$EPOCHREALTIME
  set +e
  stdbuf -oL "$gearbox" generate "$engine" --prompt-ids "$ids" --max-new-tokens 1 --device "$device" 2>"$log" |
    { IFS= read -r _ && echo "$EPOCHREALTIME" >"$stamp"; cat >/dev/null; }
  rc=${PIPESTATUS[0]}
  end=$EPOCHREALTIME
  set -e
  [[ $rc -eq 0 && -s $stamp ]] || { echo "first_token.sh: gearbox generate failed:" >&2; cat "$log" >&2; exit 1; }
  first=$(($(micros "$(cat "$stamp")") - $(micros "$start")))
  exit_us=$(($(micros "$end") - $(micros "$start")))
  : >"$stamp"
  printf 'run %d: first token %d.%03d ms, exit %d.%03d ms\n' "$run" $((first / 1000)) $((first % 1000)) \
    $((exit_us / 1000)) $((exit_us % 1000)) >&2
  first_ms+=("$first")
done
median=$(printf '%s\n' "${first_ms[@]}" | sort -n | sed -n 3p)
printf '%d.%03d\n' $((median / 1000)) $((median % 1000))
