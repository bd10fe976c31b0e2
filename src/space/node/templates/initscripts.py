"""The guest's boot scripts, run by busybox sh.

Stage 1 is `/init` in the initramfs: it loads the virtio drivers, configures the
network from the kernel command line, finds the disks by label and switches to
the template's root. Stage 2 lives on the agent disk (`/run/space/init`), runs as
PID 1 on the template's root and supervises the agent forever. Both print
`space-init: ...` lines on the console and power the VM off on a fatal error.

Kernel parameters: `space.ip=ADDR/PREFIX`, `space.gw=ADDR`, `space.mac=MAC`,
`space.dns=ADDR` (written to the root's /etc/resolv.conf; default: the gateway),
`space.hostname=NAME`.
"""

from __future__ import annotations

ROOT_LABEL = "space-root"
AGENT_LABEL = "space-agent"
AGENT_MOUNT = "/run/space"

_COMMON = r"""
set -f
say() { echo "space-init: $*"; }
die() {
    say "FATAL: $*"
    $BB poweroff -f
    exit 1
}
arg() {
    read -r cmdline < /proc/cmdline
    for w in $cmdline; do
        case "$w" in "$1="*) echo "${w#*=}"; return 0 ;; esac
    done
}
"""

STAGE1 = (
    "#!/bin/sh\n# space-init stage 1 (initramfs /init)\nBB=/bin/busybox\n"
    "export PATH=/bin:/sbin:/usr/bin:/usr/sbin\n"
    + _COMMON
    + r"""
mount -t proc proc /proc || die "cannot mount /proc"
mount -t sysfs sysfs /sys || die "cannot mount /sys"
mount -t devtmpfs devtmpfs /dev || die "cannot mount devtmpfs on /dev"
say "stage 1, kernel $(uname -r)"

for m in $(cat /etc/space-modules); do
    insmod "/lib/modules/$m.ko" || die "insmod $m failed"
done
say "modules loaded:" $(cat /etc/space-modules)

ip link set lo up || die "cannot bring lo up"
IP=$(arg space.ip)
GW=$(arg space.gw)
MAC=$(arg space.mac)
if [ -n "$IP" ]; then
    [ -d /sys/class/net/eth0 ] || die "space.ip=$IP given but there is no eth0"
    if [ -n "$MAC" ]; then ip link set eth0 address "$MAC" || die "cannot set eth0 MAC $MAC"; fi
    ip addr add "$IP" dev eth0 || die "cannot add $IP to eth0"
    ip link set eth0 up || die "cannot bring eth0 up"
    if [ -n "$GW" ]; then ip route add default via "$GW" dev eth0 || die "no route via $GW"; fi
    say "eth0 $IP${GW:+ via $GW}"
fi

disk() {
    n=0
    while [ $n -lt 100 ]; do
        findfs "LABEL=$1" 2>/dev/null && return 0
        sleep 0.02
        n=$((n + 1))
    done
    return 1
}
disks() { echo $(blkid 2>/dev/null) ; }
ROOT=$(disk @ROOT_LABEL@) || die "no disk labelled @ROOT_LABEL@" \
    "(a template root must be made with mkfs.ext4 -L @ROOT_LABEL@); disks: $(disks)"
AGENT=$(disk @AGENT_LABEL@) || die "no disk labelled @AGENT_LABEL@ (the agent disk);" \
    "disks: $(disks)"
mount -t ext4 -o rw "$ROOT" /newroot || die "cannot mount $ROOT (@ROOT_LABEL@) read-write"
[ -d /newroot/run ] || mkdir /newroot/run || die "cannot create /run on the root disk"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /newroot/run || die "cannot mount tmpfs on /run"
mkdir -p /newroot@AGENT_MOUNT@
mount -t ext4 -o ro "$AGENT" /newroot@AGENT_MOUNT@ \
    || die "cannot mount $AGENT (@AGENT_LABEL@) read-only"
[ -f /newroot@AGENT_MOUNT@/init ] || die "$AGENT has no init"
DNS=$(arg space.dns)
DNS=${DNS:-$GW}
if [ -n "$DNS" ]; then
    rm -f /newroot/etc/resolv.conf
    echo "nameserver $DNS" > /newroot/etc/resolv.conf || die "cannot write resolv.conf"
fi
say "root $ROOT, agent $AGENT; switching root"
umount /proc /sys /dev || say "warning: cannot unmount /proc /sys /dev"
exec switch_root /newroot @AGENT_MOUNT@/bin/busybox sh @AGENT_MOUNT@/init
die "switch_root failed"
"""
)

STAGE2 = (
    "# space-init stage 2 (PID 1 on the template's root, from the agent disk)\n"
    "BB=@AGENT_MOUNT@/bin/busybox\n"
    "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root\n"
    + _COMMON
    + r"""
$BB mkdir -p /proc /sys /dev /tmp
$BB mount -t proc -o nosuid,nodev,noexec proc /proc || die "cannot mount /proc"
$BB mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || die "cannot mount /sys"
$BB mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev || die "cannot mount /dev"
exec </dev/console >/dev/console 2>&1
$BB mkdir -p /dev/pts /dev/shm
$BB mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=666 devpts /dev/pts \
    || die "cannot mount /dev/pts"
$BB mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm || die "cannot mount /dev/shm"
$BB ln -sfn /proc/self/fd /dev/fd
$BB ln -sfn /proc/self/fd/0 /dev/stdin
$BB ln -sfn /proc/self/fd/1 /dev/stdout
$BB ln -sfn /proc/self/fd/2 /dev/stderr
$BB chmod 1777 /tmp || die "cannot make /tmp world-writable"
NAME=$(arg space.hostname)
if [ -n "$NAME" ]; then $BB hostname "$NAME" || die "cannot set hostname $NAME"; fi
say "stage 2 ready, starting agent"
cd /
while :; do
    @AGENT_MOUNT@/bin/space-agent
    say "agent exited with status $?, restarting"
    $BB sleep 0.2
done
"""
)

#: `/run/space/bin/python3`: the runtime's Python via its own loader, isolated (-I).
PYTHON_LAUNCHER = r"""#!@AGENT_MOUNT@/bin/busybox sh
RT=@AGENT_MOUNT@/rt
exec $RT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
    --library-path $RT/lib/x86_64-linux-gnu:$RT/usr/lib/x86_64-linux-gnu \
    $RT/usr/bin/python3.11 -I "$@"
"""

#: `/run/space/bin/space-agent`: `python -m space.guest` with the agent disk's code first.
AGENT_LAUNCHER = r"""#!@AGENT_MOUNT@/bin/busybox sh
exec @AGENT_MOUNT@/bin/python3 -c 'import runpy, sys
sys.path.insert(0, "@AGENT_MOUNT@/py")
runpy.run_module("space.guest", run_name="__main__", alter_sys=True)' "$@"
"""


def render(script: str) -> bytes:
    """Fill in the labels and mount point."""
    return (
        script.replace("@ROOT_LABEL@", ROOT_LABEL)
        .replace("@AGENT_LABEL@", AGENT_LABEL)
        .replace("@AGENT_MOUNT@", AGENT_MOUNT)
        .encode()
    )
