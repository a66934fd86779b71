#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The linux-rxe guest's boot, run as PID 1 by the image's /sbin/emu-init from the run's
# 9p share (/emu), so changing it needs no image rebuild. It takes over the host port
# described in /emu/guest.env (MAC, MTU, addresses, routes), adds the rxe device on it,
# runs /emu/cmd.sh, leaves its exit status in /emu/status and rxe's counters in the log
# directory, and powers off. Never exits: PID 1 exiting would panic the kernel.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. /emu/guest.env
say() { echo "emu-guest: $*"; }
off() { sync; echo o > /proc/sysrq-trigger; sleep 30; }
fail() { say "boot failed: $*"; echo 255 > /emu/status; off; }

for m in $EMU_MOUNTS; do            # tag=path: the host's directories at the same paths
    tag=${m%%=*}; dir=${m#*=}
    mkdir -p "$dir" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 "$tag" "$dir" \
        || fail "mount $tag on $dir"
done
if [ "$EMU_MAC" != none ]; then
modprobe virtio_net 2>/dev/null
ip link set lo up
dev=$(for d in /sys/class/net/*; do [ "$(cat $d/address)" = "$EMU_MAC" ] && basename $d; done)
[ -n "$dev" ] || fail "no interface with MAC $EMU_MAC"
echo 0 > /proc/sys/net/ipv6/conf/$dev/accept_dad      # the address is ours already
echo 0 > /proc/sys/net/ipv6/conf/$dev/autoconf
ip link set "$dev" mtu "$EMU_MTU" up || fail "mtu $EMU_MTU on $dev"
for a in $EMU_ADDRS; do            # CIDR[,noprefixroute]
    f=""; case $a in *,*) f=${a#*,};; esac
    ip addr add "${a%%,*}" dev "$dev" $f || fail "address $a"
done
for r in $EMU_ROUTES; do           # dst,gateway (empty: on-link), on-link ones first
    gw=${r#*,}; ip route add "${r%%,*}" ${gw:+via "$gw"} dev "$dev" || fail "route $r"
done
modprobe rdma_rxe || fail "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev "$dev" || fail "rdma link add rxe0"
# the GID table follows the addresses asynchronously: wait until every address is in it
n=0
while [ $n -lt 100 ]; do
    want=$(echo $EMU_ADDRS | wc -w); have=$(cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null \
        | grep -cv '^0000:0000:0000:0000:0000:0000:0000:0000$')
    [ "$have" -gt "$want" ] && break      # + the link-local GID
    n=$((n + 1)); sleep 0.05
done
fi
say "up in $(cut -d' ' -f1 /proc/uptime) s: $dev $EMU_ADDRS mtu $EMU_MTU, rxe0 $(cat /sys/class/infiniband/rxe0/ports/1/state)"

{ cd /emu && /bin/sh /emu/cmd.sh; echo $? > /emu/status; } 2>&1 | tee /emu/cmd.out
say "command exited $(cat /emu/status) at $(cut -d' ' -f1 /proc/uptime) s"
if [ -n "$EMU_COUNTERS" ]; then
    for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
        echo "$(basename $f) $(cat $f)"
    done > "$EMU_COUNTERS" 2>/dev/null
fi
off
