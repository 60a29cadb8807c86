#!/usr/bin/env bash
# What this machine's Docker allows for a multi-machine testbed (docs/multi-machine.md).
#
# Two dockerd, each in its own network namespace (entered with `nsenter --net`:
# `ip netns exec` remounts /sys and hides the cgroups from dockerd), joined by a
# veth pair, form a Swarm; an attachable overlay carries a ping between two
# containers on the two engines; then the service limits that decide plan A or
# A': `--network none`, `--privileged`, `--cap-add NET_ADMIN`, a global service
# with the engine socket mounted, and what happens to a task whose container dies.
#
# Usage (root): bench/probe_swarm.sh [WORKDIR]   (default /tmp/wbsw; keep it short:
# containerd's socket lives under the exec root and a unix socket path is at most 108 bytes)
# Prints every command (`$ ...`) and its real output. Everything it started is
# stopped by pid and removed on exit, also on Ctrl-C: both engines, their
# containers, the namespaces, the veth, the data roots and sockets.
set -u

W=${1:-/tmp/wbsw}
NS=(wbsw1 wbsw2)
ADDR=(10.231.0.1 10.231.0.2)
IMAGE=wbprobe:1
PIDS=()

say() { printf '\n## %s\n' "$*"; }
# run CMD...: print it, run it, print its output and a non-zero status
run() {
    printf '$ %s\n' "$*"
    "$@" 2>&1
    local rc=$?
    [ "$rc" -ne 0 ] && printf '(exit %d)\n' "$rc"
    return "$rc"
}
d() { local i=$1; shift; docker -H "unix://$W/$i/docker.sock" "$@"; }
# the same, printed as the reader would type it
D() { local i=$1; shift; run docker -H "unix://$W/$i/docker.sock" "$@"; }

cleanup() {
    trap - EXIT INT TERM
    say "cleanup"
    for i in 1 2; do
        [ -S "$W/$i/docker.sock" ] || continue
        d "$i" service rm $(d "$i" service ls -q 2>/dev/null) >/dev/null 2>&1
        d "$i" rm -f $(d "$i" ps -aq 2>/dev/null) >/dev/null 2>&1
        d "$i" swarm leave --force >/dev/null 2>&1
    done
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null
    done
    # shims or containerd that outlived their dockerd: only processes whose command line names this probe's
    # own work directory (nothing else on the machine can)
    for p in /proc/[0-9]*; do
        if { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | grep -q -- "$W/"; then
            kill -KILL "${p#/proc/}" 2>/dev/null
        fi
    done
    findmnt -rn -o TARGET | grep "^$W/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$W"
    echo "removed: engines (pids ${PIDS[*]:-none}), namespaces ${NS[*]}, $W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$(id -u)" -ne 0 ]; then echo "probe_swarm: needs root (network namespaces, dockerd)"; exit 2; fi
for tool in dockerd docker nsenter ip ping; do
    command -v "$tool" >/dev/null || { echo "probe_swarm: $tool is not installed"; exit 2; }
done
if [ -e "$W" ] || ip netns list | grep -qw "${NS[0]}"; then
    echo "probe_swarm: $W or netns ${NS[0]} exists (another probe running, or a crashed one: remove them)"; exit 2
fi
mkdir -p "$W"

say "versions"
run docker --version
run grep CapBnd /proc/self/status
run dockerd --version
run uname -r

say "two network namespaces joined by a veth pair"
for i in 0 1; do
    run ip netns add "${NS[$i]}"
    run ip -n "${NS[$i]}" link set lo up
done
run ip link add wbsw-a netns "${NS[0]}" type veth peer name wbsw-b netns "${NS[1]}"
run ip -n "${NS[0]}" addr add "${ADDR[0]}/24" dev wbsw-a
run ip -n "${NS[1]}" addr add "${ADDR[1]}/24" dev wbsw-b
run ip -n "${NS[0]}" link set wbsw-a up
run ip -n "${NS[1]}" link set wbsw-b up

say "one dockerd per namespace (nsenter --net), each with its own roots and socket"
for i in 1 2; do
    mkdir -p "$W/$i"
    argv=(dockerd --data-root "$W/$i/data" --exec-root "$W/$i/x" --pidfile "$W/$i/dockerd.pid"
          -H "unix://$W/$i/docker.sock" --iptables=false --ip6tables=false --bridge=none)
    printf '$ nsenter --net=/run/netns/%s %s &\n' "${NS[$((i - 1))]}" "${argv[*]}"
    setsid nsenter --net="/run/netns/${NS[$((i - 1))]}" "${argv[@]}" >"$W/$i/dockerd.log" 2>&1 &
    PIDS+=($!)
done
for i in 1 2; do
    for _ in $(seq 1 120); do d "$i" version >/dev/null 2>&1 && break; sleep 0.5; done
    D "$i" version --format "engine $i: {{.Server.Version}} API {{.Server.APIVersion}}" || exit 1
done

say "Swarm: init on engine 1, join from engine 2"
D 1 swarm init --advertise-addr "${ADDR[0]}" --listen-addr "${ADDR[0]}:2377" | sed 's/SWMTKN-[^ ]*/SWMTKN-.../'
token=$(d 1 swarm join-token -q worker)
printf '$ docker -H unix://%s/2/docker.sock swarm join --token SWMTKN-... %s:2377\n' "$W" "${ADDR[0]}"
d 2 swarm join --advertise-addr "${ADDR[1]}" --listen-addr "${ADDR[1]}:2377" --token "$token" "${ADDR[0]}:2377" 2>&1
D 1 node ls --format '{{.Hostname}} {{.Status}} {{.Availability}} {{.ManagerStatus}} {{.EngineVersion}}'
D 1 node ls -q

say "a tiny image from the host's own binaries (no registry, no pull), imported into each engine"
root="$W/rootfs"
mkdir -p "$root/bin" "$root/tmp" "$root/var/run" "$root/etc"
bins=("$(command -v sh)" "$(command -v sleep)" "$(command -v ping)" "$(command -v ip)" "$(command -v cat)"
      "$(command -v docker)")
for b in "${bins[@]}"; do
    cp -L "$b" "$root/bin/"
    ldd "$b" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"; cp -Ln "$lib" "$root$lib"
    done
done
echo "root:x:0:0:root:/:/bin/sh" > "$root/etc/passwd"
for i in 1 2; do
    printf '$ tar -C %s -c . | docker -H unix://%s/%s/docker.sock import - %s\n' "$root" "$W" "$i" "$IMAGE"
    tar -C "$root" -c . | d "$i" import -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null 2>&1 || echo "(import failed)"
done
D 2 images --format '{{.Repository}}:{{.Tag}} {{.Size}}'

say "an attachable overlay; one container on each engine; ping across"
D 1 network create -d overlay --attachable wbprobe-ov
D 1 run -d --name p1 --network wbprobe-ov "$IMAGE" sleep 600
D 2 run -d --name p2 --network wbprobe-ov "$IMAGE" sleep 600
ip2=$(d 2 inspect -f '{{(index .NetworkSettings.Networks "wbprobe-ov").IPAddress}}' p2 2>/dev/null)
echo "p2 overlay address: ${ip2:-none}"
[ -n "$ip2" ] && D 1 exec p1 ping -c 5 -i 0.2 "$ip2"
D 1 exec p1 ping -c 2 -i 0.2 p2
D 1 rm -f p1 >/dev/null
D 2 rm -f p2 >/dev/null

# settle: wait until a service's tasks are past preparing, then show them
show_service() {
    for _ in $(seq 1 20); do
        d 1 service ps --format '{{.CurrentState}}' "$1" 2>/dev/null | grep -qiE 'preparing|pending|assigned|new' || break
        sleep 0.5
    done
    sleep 2
    D 1 service ps --no-trunc --format '{{.Name}} {{.Node}} {{.DesiredState}} {{.CurrentState}} {{.Error}}' "$1"
}

say "service limit: --network none"
D 1 service create --detach --name s-none --network none "$IMAGE" sleep 600 && show_service s-none
D 1 service rm s-none >/dev/null 2>&1

say "service limit: --privileged"
D 1 service create --detach --name s-priv --privileged "$IMAGE" sleep 600

say "service limit: --cap-add NET_ADMIN (a task that adds a veth pair needs it)"
D 1 service create --detach --name s-cap --cap-add NET_ADMIN --restart-condition none "$IMAGE" \
    sh -c 'ip link add wbv0 type veth peer name wbv1 && echo NET_ADMIN works && sleep 600' && show_service s-cap
D 1 service logs --raw s-cap
D 1 service create --detach --name s-nocap --restart-condition none "$IMAGE" \
    sh -c 'ip link add wbv0 type veth peer name wbv1 && echo NET_ADMIN works && sleep 600' && show_service s-nocap
D 1 service logs --raw s-nocap
D 1 service rm s-cap s-nocap >/dev/null 2>&1

say "plan A': a global agent service, host network, NET_ADMIN, its engine's socket mounted"
# On real machines every engine's socket is /var/run/docker.sock; here the two engines share one file system, so
# each node's socket is reached through a link named by its Swarm node id (a mount source may use {{.Node.ID}}).
mkdir -p "$W/sock"
for i in 1 2; do
    ln -s "$W/$i/docker.sock" "$W/sock/$(d "$i" info --format '{{.Swarm.NodeID}}').sock"
done
D 1 service create --detach --name agent --mode global --network host --cap-add NET_ADMIN \
    --mount "type=bind,src=$W/sock/{{.Node.ID}}.sock,dst=/var/run/docker.sock" "$IMAGE" \
    sh -c 'docker -H unix:///var/run/docker.sock info --format "agent sees engine {{.Swarm.NodeID}} with {{.Containers}} containers"; ip link add wbag0 type veth peer name wbag1 && echo "NET_ADMIN in the engine netns: ok" && ip link del wbag0; ip -br addr show; sleep 600' \
    && show_service agent
D 1 service logs --raw agent

say "what the agent needs beyond that: the host containers' namespaces (--pid host) and TAPs (/dev/net/tun)"
D 1 service create --detach --name s-pid --pid host "$IMAGE" sleep 600
D 1 service create --detach --name s-dev --device /dev/net/tun "$IMAGE" sleep 600
D 1 service create --detach --name s-tun --restart-condition none --cap-add NET_ADMIN \
    --mount type=bind,src=/dev/net/tun,dst=/dev/net/tun "$IMAGE" \
    sh -c 'ip tuntap add mode tap wbt0 && echo TAP works; sleep 600' && show_service s-tun
D 1 service logs --raw s-tun
D 1 service rm s-tun >/dev/null 2>&1

say "plan A: the agent as a plain container of its machine's engine plumbs a --network none host container"
D 2 run -d --name h1 --network none --label wanbed.run=probe "$IMAGE" sleep 600
hpid=$(d 2 inspect -f '{{.State.Pid}}' h1)
agent_cmd="ip tuntap add mode tap wbt0 && echo TAP works && ip tuntap del mode tap wbt0; ip link add wbh0 type veth peer name wbh1 && ip link set wbh1 netns $hpid && echo moved into the pid $hpid namespace"
# --privileged grants every capability the engine knows; where the machine's own bounding set lacks one
# (CapBnd in /proc/self/status), runc refuses it: the explicit capabilities the agent needs are the fallback
D 2 run --rm --privileged --network host --pid host --label wanbed.run=probe "$IMAGE" sh -c "$agent_cmd"
D 2 run --rm --cap-add NET_ADMIN --cap-add SYS_ADMIN --cap-add SYS_PTRACE --device /dev/net/tun \
    --network host --pid host --label wanbed.run=probe "$IMAGE" \
    sh -c "$agent_cmd"
D 2 exec h1 ip -br link
D 2 rm -f h1 >/dev/null

say "a task whose container dies is replaced by a new container (new id and name)"
cid=$(d 2 ps -q --filter label=com.docker.swarm.service.name=agent)
D 2 ps --format '{{.ID}} {{.Names}}' --filter label=com.docker.swarm.service.name=agent
D 2 rm -f "$cid" >/dev/null
sleep 8
D 2 ps --format '{{.ID}} {{.Names}}' --filter label=com.docker.swarm.service.name=agent
D 1 service ps --format '{{.Name}} {{.Node}} {{.DesiredState}} {{.CurrentState}}' agent

say "images are not distributed: an image only engine 1 has"
tar -C "$root" -c . | d 1 import -c 'ENV PATH=/bin' - wbprobe:only1 >/dev/null 2>&1
D 1 service create --detach --name s-img --mode global wbprobe:only1 sleep 600 && show_service s-img
D 1 service rm s-img agent >/dev/null 2>&1
exit 0
