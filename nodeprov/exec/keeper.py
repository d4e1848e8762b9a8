"""The POSIX sh of a keeper (see :mod:`nodeprov.node.keeper`): the keeper itself, its stdin
feeder, an attach with its frame writer, the freer of what was read and its report of what
was fed, and a look at how the kept process stands. Each takes its values as positional
parameters (and awk programs and sh scripts through the environment), never interpolated
into its text.

The frames a control plane writes to an attach's stdin, one per line: ``D ID LENGTH PAYLOAD``
(the payload with ``%`` and line breaks spelt ``%25`` and ``%0A``, LENGTH its bytes),
``E ID`` (the end of the process's input), ``A OUT ERR`` (the bytes of stdout and of stderr
before OUT and ERR are no longer needed: the node frees them), ``R`` (release: the process
ended and its output was read; the keeper's directory goes). Ids rise by one per frame; the
keeper feeds each id once, so a frame written twice across a drop reaches the process once.

An attach's stdout is the process's stdout with lines of the attach's own among it, each a
single write starting with :data:`TAG`: ``attached PID START LOGGED OUT_BASE ERR_BASE``
first, ``fed ID`` (the feeder wrote every frame up to ID into the process's stdin) anywhere,
and the exit line (:data:`EXIT`) where stdout ends.
"""

from __future__ import annotations

from .preamble import SIGNAL_GROUP_FUNCTION
from .shell import START_TIME_FUNCTION

__all__ = [
    "ATTACH",
    "EXIT",
    "FED",
    "FEED",
    "FREE",
    "KEEPER",
    "REPORT",
    "STATUS",
    "STOP",
    "TAG",
    "TRIM_STEP",
    "WRITE",
]

TAG = b"\x1enodeprov-keep "
"""What starts each line an attach says of itself (its report, what was fed, its last line)."""
EXIT = TAG + b"exit "
"""An attach's last line: ``exit STATUS SIZE WHY``, SIZE the bytes of stdout before it."""
FED = TAG + b"fed "
"""An attach's line among stdout: ``fed ID``, every frame up to ID is in the process's stdin."""

TRIM_STEP = 1 << 20
"""Bytes of ``in.log`` (or of ``fed``) the feeder lets pass before it frees them: one
``fallocate`` a step."""

# The agent's stdin: each frame of in.log once, in order of ids ("D ID LENGTH PAYLOAD",
# the payload with % and line breaks spelt %25 and %0A; "E ID" ends the input). After each
# frame fed, a note "ID POS" in fed (POS: the bytes of in.log read); every TRIM_STEP, what
# was read of in.log is freed (a hole punched: offsets stay), and the notes but the last two.
FEED = (
    """\
function note(  line) {
  line = sprintf("%.0f %.0f", last, pos)
  print line > notes; fflush(notes)
  before = latest; latest = noted; noted += length(line) + 1
}
function punch(size, name) {
  return "fallocate -p -o 0 -l " sprintf("%.0f", size) " -- \\"$NP_KEEP_DIR/" name "\\""
}
function free(  command) {
  note(); freed = pos; kept = before
  command = "exec " punch(pos, "in.log")
  if (kept > 0) command = punch(kept, "fed") " && " command
  system(command " >/dev/null 2>&1")
}
BEGIN { notes = ENVIRON["NP_KEEP_DIR"] "/fed"; step = """
    + str(TRIM_STEP)
    + """ }
{ pos += length($0) + 1 }
$1 == "D" && NF >= 3 {
  rest = substr($0, length($2) + 4); cut = index(rest, " ")
  payload = substr(rest, cut + 1)
  if (cut > 0 && length(payload) == substr(rest, 1, cut - 1) + 0 && $2 + 0 > last) {
    last = $2 + 0
    gsub(/%0A/, "\\n", payload); gsub(/%25/, "%", payload)
    printf "%s", payload; fflush()
    note()
  }
}
$1 == "E" && $2 + 0 > last { last = $2 + 0; note(); exit }
pos - freed >= step || noted - kept >= step { free() }
"""
)

# The keeper, started detached (NodeHandle.spawn_detached). Positional parameters: the
# directory, grace (whole seconds), term_grace, the expiry (epoch seconds, or empty), the
# mark, the PWD and SHLVL the command must see ("=value", or empty for none), then the
# command. A start that fails says why in "failed".
KEEPER = (
    START_TIME_FUNCTION
    + """\
trap '' HUP INT
dir=$1 grace=$2 term=$3 expires=$4 mark=$5
umask 077
mkdir -p -- "${dir%/*}" 2>/dev/null
mkdir -- "$dir" 2>/dev/null || exit 126
fail() { printf '%s\\n' "$1" >"$dir/failed"; exit 127; }
for tool in setsid tail awk mkfifo stat date touch grep fallocate flock; do
  command -v "$tool" >/dev/null 2>&1 || fail "missing $tool"
done
tail --pid=$$ -c 0 /dev/null >/dev/null 2>&1 || fail "missing tail --pid"
command -v -- "$8" >/dev/null 2>&1 || fail notfound
{ mkfifo -- "$dir/in" && : >"$dir/in.log" && : >"$dir/out" && : >"$dir/err" && : >"$dir/fed" &&
  : >"$dir/lease"; } 2>/dev/null || fail "no room in $dir"
# What was read is freed by punching holes: a filesystem that cannot would keep it all.
fallocate -p -o 0 -l 1 -- "$dir/out" 2>/dev/null || fail "no hole punching (fallocate -p) in $dir"
tail -s 0.005 -c +1 -f "$dir/in.log" 2>/dev/null |
  NP_KEEP_DIR=$dir LC_ALL=C awk -W interactive "$NP_FEED" >"$dir/in" 2>/dev/null &
unset NP_FEED
case $6 in =*) export PWD="${6#=}" ;; *) unset PWD ;; esac
case $7 in =*) export SHLVL="${7#=}" ;; *) unset SHLVL ;; esac
shift 7
NODEPROV_GUARD=$mark setsid "$@" <"$dir/in" >>"$dir/out" 2>>"$dir/err" &
agent=$! started=
started=$(__np_start_of "$agent")
printf '%s %s\\n' "$agent" "${started:--}" >"$dir/pid.new" && mv -f "$dir/pid.new" "$dir/pid"
lapsed() {
  [ -d "$dir" ] || { why=gone; return 0; }
  now=$(date +%s)
  if [ -n "$expires" ] && [ "$now" -ge "$expires" ]; then why=ttl; return 0; fi
  seen=$(stat -c %Y "$dir/lease" 2>/dev/null) || seen=0
  [ $((now - seen)) -ge "$grace" ] && why=lease
}
ours() { [ "$(__np_start_of "$agent")" = "$started" ]; }
(
  while sleep 1; do
    lapsed || continue
    printf '%s\\n' "$why" >"$dir/why" 2>/dev/null
    ours || exit 0
    kill -TERM -"$agent" 2>/dev/null
    sleep "$term" || sleep 1
    ours || exit 0
    kill -KILL -"$agent" 2>/dev/null
    exit 0
  done
) </dev/null >/dev/null 2>&1 &
watchdog=$!
# A SIGTERM to the keeper's group (a shutdown, an operator) ends the process as its lease
# would, and the keeper goes on to record its end and, nobody attaching, remove its directory.
trap 'printf "term\\n" >"$dir/why" 2>/dev/null; kill -TERM -"$agent" 2>/dev/null
  ( sleep "$term" || sleep 1; ours && kill -KILL -"$agent" 2>/dev/null ) </dev/null >/dev/null 2>&1 &' TERM
wait "$agent"
rc=$?
while kill -0 "$agent" 2>/dev/null; do wait "$agent"; rc=$?; done  # a trapped TERM cut the wait short
kill "$watchdog" 2>/dev/null
why=exit
[ -s "$dir/why" ] && read -r why <"$dir/why"
# What the process started carries its mark, wherever it went: found through /proc. Swept
# before rc is written, so that an rc says all of it is gone.
for round in 1 2 3 4 5; do
  found=
  for pid in $(grep -lsxzF -e "NODEPROV_GUARD=$mark" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${pid#/proc/}; kill -KILL "${pid%/environ}" 2>/dev/null && found=1
  done
  [ -n "$found" ] || break
done
printf '%s %s\\n' "$rc" "$why" >"$dir/rc.new" && mv -f "$dir/rc.new" "$dir/rc"
trap '' TERM
kill -TERM 0 2>/dev/null
# Kept until the control plane has read it all and released it, or nobody attached for grace.
while [ -d "$dir" ]; do
  seen=$(stat -c %Y "$dir/lease" 2>/dev/null) || seen=0
  [ $(($(date +%s) - seen)) -lt "$grace" ] || break
  sleep 1
done
rm -rf -- "$dir"
"""
)

# A control plane's frames, off the channel into in.log: only whole frames; "A" sets the
# bases (below them, the journals' bytes may go) in base.0, then base.1: whenever one is cut
# short, the other holds what was punched or more. Then it wakes the freer; "R" releases.
WRITE = """\
BEGIN {
  split(ENVIRON["NP_BASES"], base, " "); out = base[1] + 0; err = base[2] + 0
  bases[0] = ENVIRON["NP_KEEP_DIR"] "/base.0"; bases[1] = ENVIRON["NP_KEEP_DIR"] "/base.1"
  free = "exec sh -c \\"$NP_FREE\\" nodeprov-free"
}
$1 == "D" && NF >= 3 {
  rest = substr($0, length($2) + 4); cut = index(rest, " ")
  if (cut > 0 && length(substr(rest, cut + 1)) == substr(rest, 1, cut - 1) + 0) { print; fflush() }
  next
}
$1 == "E" && NF == 2 { print; fflush(); next }
$1 == "A" && NF == 3 && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ && ($2 + 0 > out || $3 + 0 > err) {
  if ($2 + 0 > out) out = $2 + 0
  if ($3 + 0 > err) err = $3 + 0
  line = sprintf("%.0f %.0f", out, err)
  print line > bases[0]; close(bases[0]); print line > bases[1]; close(bases[1])
  print "" | free; fflush(free)
  next
}
$0 == "R" { system("rm -rf -- \\"$NP_KEEP_DIR\\""); exit }
"""

# The writer's freer: woken by a line, it punches the holes up to the bases (the larger of
# base.0 and base.1), once for any number of wakings while it punched.
FREE = """\
exec >/dev/null 2>&1
was_out=${NP_BASES% *} was_err=${NP_BASES#* }
while read -r _; do
  out=$was_out err=$was_err
  for record in "$NP_KEEP_DIR/base.0" "$NP_KEEP_DIR/base.1"; do
    read -r o e <"$record" || continue
    case $o:$e in *[!0-9:]* | :* | *:) continue ;; esac
    [ "$o" -le "$out" ] || out=$o
    [ "$e" -le "$err" ] || err=$e
  done
  [ "$out" = "$was_out" ] || fallocate -p -o 0 -l "$out" -- "$NP_KEEP_DIR/out"
  [ "$err" = "$was_err" ] || fallocate -p -o 0 -l "$err" -- "$NP_KEEP_DIR/err"
  was_out=$out was_err=$err
done
"""

# An attach's report of what the feeder fed, off the notes in fed: one write a line.
REPORT = """\
NF == 2 && $1 ~ /^[0-9]+$/ && $1 + 0 > fed {
  fed = $1 + 0; line = sprintf("\\036nodeprov-keep fed %s\\n", $1); printf "%s", line; fflush()
}
"""

# $1 dir, $2 stdout offset, $3 stderr offset, $4 seconds between lease renewals, $5 seconds
# to wait for a keeper that is starting, $6 the attach generation last held (0: none). Ends
# the attach before it, reports (the process, the last frame id in the log, where the
# journals' freed bytes end, its generation), then follows the
# journals (from their bases, where an offset is below) and the feeder's notes until the
# process ends and says how it ended; its stdin is the control plane's frames.
ATTACH = (
    SIGNAL_GROUP_FUNCTION
    + """\
dir=$1 n=0
# The attach's own complaints (its files gone under a release) are not the process's stderr.
exec 4>&2 2>/dev/null
while [ ! -s "$dir/pid" ]; do
  if [ -s "$dir/failed" ]; then
    printf '\\036nodeprov-keep failed %s\\n' "$(cat "$dir/failed")"; rm -rf -- "$dir"; exit 0
  fi
  [ "$n" -lt "$(($5 * 100))" ] || { printf '\\036nodeprov-keep gone\\n'; exit 0; }
  sleep 0.01 || sleep 1; n=$((n + 1))
done
read -r pid start <"$dir/pid"
# One attach at a time, under a lock: a control plane that held generation $6 of the attach
# and lost it to another is told so (superseded), never let back in; $6 = 0 takes over.
exec 5>>"$dir/attach.lock"
flock 5
held=$(cat "$dir/gen" 2>/dev/null)
case $held in ''|*[!0-9]*) held=0 ;; esac
if [ "$6" != 0 ] && [ "$6" != "$held" ]; then
  printf '\\036nodeprov-keep superseded %s\\n' "$held"; exit 0
fi
# Nor is an attach from a byte of stdout already freed: it would end the one that reads on.
numbers='NF == 2 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/'
freed=$(cat "$dir/base.0" "$dir/base.1" | LC_ALL=C awk "$numbers"' { if ($1 + 0 > o) o = $1 + 0 }
  END { printf "%.0f", o }')
if [ "$2" -lt "$freed" ]; then printf '\\036nodeprov-keep freed %s\\n' "$freed"; exit 0; fi
# The attach before ends, and is waited for: nothing it writes reaches in.log after this.
if [ -s "$dir/attach" ]; then
  while read -r p s; do signal_group KILL "$p" "$s"; done <"$dir/attach"
  n=0
  while [ "$n" -lt 300 ]; do
    left=
    while read -r p s; do
      [ "$(__np_start_of "$p")" = "$s" ] && ! grep -q '^State:.*Z' "/proc/$p/status" && left=1
    done <"$dir/attach"
    [ -n "$left" ] || break
    sleep 0.01 || sleep 1; n=$((n + 1))
  done
fi
gen=$((held + 1))
printf '%s\\n' "$gen" >"$dir/gen"
printf '%s %s\\n' "$$" "$(__np_start_of $$)" >"$dir/attach"
# The log before the feeder's last note was read (and may be freed): its ids are fed.
fed=$(tail -n 1 "$dir/fed" | LC_ALL=C awk "$numbers"' { print $1 " " $2 }')
read_to=${fed#* } fed=${fed% *}
# A frame is logged when whole: a writer killed mid-line left a torn one, which the feeder
# skips, and which the control plane must send again.
last=$(tail -c +$((${read_to:-0} + 1)) "$dir/in.log" | LC_ALL=C awk -v m="${fed:-0}" '
  $1 == "D" && NF >= 3 {
    rest = substr($0, length($2) + 4); cut = index(rest, " ")
    if (cut > 0 && length(substr(rest, cut + 1)) == substr(rest, 1, cut - 1) + 0 && $2 + 0 > m) m = $2 + 0
  }
  $1 == "E" && NF == 2 && $2 + 0 > m { m = $2 + 0 }
  END { print m + 0 }')
bases=$(cat "$dir/base.0" "$dir/base.1" | LC_ALL=C awk "$numbers"' {
  if ($1 + 0 > o) o = $1 + 0; if ($2 + 0 > e) e = $2 + 0 } END { printf "%.0f %.0f", o, e }')
out_base=${bases% *} err_base=${bases#* } out_from=$2 err_from=$3
[ "$out_from" -ge "$out_base" ] || out_from=$out_base
[ "$err_from" -ge "$err_base" ] || err_from=$err_base
printf '\\n' >>"$dir/in.log"
touch "$dir/lease"
exec 3<&0
NP_KEEP_DIR=$dir NP_BASES=$bases LC_ALL=C awk -W interactive "$NP_WRITE" <&3 >>"$dir/in.log" 4>&- 5>&- &
writer=$!
exec 3<&-
unset NP_WRITE
note() { printf '%s %s\\n' "$1" "$(__np_start_of "$1")" >>"$dir/attach"; }
note "$writer"
# The report first on stdout, the lock held until then (the next attach cannot end this one
# before it said it is attached); the follower of stdout at once after it.
printf '\\036nodeprov-keep attached %s %s %s %s %s %s\\n' \\
  "$pid" "$start" "$last" "$out_base" "$err_base" "$gen"
exec 5>&-
# GNU tail follows a file through inotify where it trusts it (a local file system), and then
# wakes every -s seconds only to see whether the process lives; elsewhere (a container's
# overlayfs) it polls the files at that rate. Waking every few milliseconds for nothing cost
# an idle kept process 5 ms of CPU a second; on a local file system its followers now see
# its end within 20 ms (stdout) and 50 ms, at no cost to the output's latency.
case $(stat -f -c %T "$dir" 2>/dev/null) in
  ext2/ext3 | xfs | btrfs | tmpfs) out_every=0.02 every=0.05 ;;
  *) out_every=0.002 every=0.005 ;;
esac
(
  tail --pid="$pid" -s "$every" -c +$((err_from + 1)) -f "$dir/err" >&4 4>&- &
  errors=$!
  tail --pid="$pid" -s "$out_every" -c +$((out_from + 1)) -f "$dir/out" 4>&- &
  output=$!
  note "$output"
  note "$errors"
  (
    tail --pid="$pid" -s "$every" -n 1 -f "$dir/fed" </dev/null 4>&- &
    note $!
    wait
  ) | LC_ALL=C awk -W interactive "$NP_REPORT" 4>&- &
  reporter=$!
  note "$reporter"
  wait "$output" "$errors"
  kill "$reporter" 2>/dev/null
  size=$(stat -c %s "$dir/out" 2>/dev/null) || size=-
  n=0
  while [ ! -s "$dir/rc" ] && [ "$n" -lt 200 ]; do sleep 0.05 || sleep 1; n=$((n + 1)); done
  read -r rc why <"$dir/rc" 2>/dev/null || { rc=- why=lost; }
  printf '\\036nodeprov-keep exit %s %s %s\\n' "$rc" "$size" "$why"
) &
follower=$!
note $!
(
  alive() { [ -n "$(__np_start_of "$1")" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
  while alive "$writer" && [ -d "$dir" ]; do touch "$dir/lease" 2>/dev/null; sleep "$4" || sleep 1; done
) </dev/null >/dev/null 4>&- &
renewer=$!
note $!
wait "$writer"
kill "$renewer" "$follower" 2>/dev/null
if [ -s "$dir/attach" ]; then
  while read -r p s; do [ "$p" = $$ ] || signal_group KILL "$p" "$s"; done <"$dir/attach"
fi
exit 0
"""
)

# $1 dir, $2 term_grace (whole seconds): stop the kept process (SIGTERM to its group, SIGKILL
# term_grace later; why "stop"), wait until the keeper has written its rc (what it started is
# gone by then), and say how it stands as STATUS does. Waits term_grace + 5 s at most.
STOP = (
    START_TIME_FUNCTION
    + """\
dir=$1 term=$2
[ -s "$dir/pid" ] || { echo gone; exit 0; }
read -r pid start <"$dir/pid"
ours() { [ "$start" = - ] || [ "$(__np_start_of "$pid")" = "$start" ]; }
if [ ! -s "$dir/rc" ]; then
  printf 'stop\\n' >"$dir/why" 2>/dev/null
  ours && kill -TERM -"$pid" 2>/dev/null
fi
tenths=0
while [ -d "$dir" ] && [ ! -s "$dir/rc" ] && [ "$tenths" -lt $((term * 10 + 50)) ]; do
  [ "$tenths" -eq $((term * 10)) ] && ours && kill -KILL -"$pid" 2>/dev/null
  sleep 0.1
  tenths=$((tenths + 1))
done
if [ -s "$dir/rc" ]; then read -r rc why <"$dir/rc"; printf 'exit %s %s\\n' "$rc" "$why"
elif [ -d "$dir" ]; then echo running
else echo gone; fi
"""
)

# $1 dir, $2 (optional) how many hundredths of a second to wait for the exit first: how the
# kept process stands.
STATUS = """\
n=0
while [ ! -s "$1/rc" ] && [ -s "$1/pid" ] && [ "$n" -lt "${2:-0}" ]; do
  sleep 0.01 || sleep 1; n=$((n + 1))
done
if [ -s "$1/rc" ]; then read -r rc why <"$1/rc"; printf 'exit %s %s\\n' "$rc" "$why"
elif [ -s "$1/pid" ]; then echo running
else echo gone; fi
"""
