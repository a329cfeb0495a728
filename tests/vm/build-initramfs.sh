#!/bin/sh
# build-initramfs.sh CACHE_DIR TEST_BINARY OUT_DIR [TEST_ARGS...]
#
# Prepares a Debian 6.1 cloud kernel and an initramfs that loads veth and
# ipip (with their dependencies from each module's modinfo), runs
# TEST_BINARY with ROUTED_IN_VM=1 and TEST_ARGS, prints
# "ROUTED-VM-EXIT <code>" and powers off. Downloads (kernel,
# busybox-static) are cached in CACHE_DIR. Writes OUT_DIR/vmlinuz and
# OUT_DIR/initrd.gz.
#
# Optional environment:
#   VM_MODULES  more modules to load after veth and ipip (e.g. "bridge
#               nf_tables nft_chain_nat nft_masq"); dependencies follow.
#   VM_FILES    a directory copied into the initramfs root as it is
#               (symlinks followed), e.g. opt/routed/bin/routed.
#   VM_DYNBINS  host executables (dynamically linked is fine) copied to
#               the same path in the initramfs with every library ldd
#               lists and the dynamic loader, e.g. "/usr/bin/ip".
# The VM gets PATH=/usr/sbin:/usr/bin:/sbin:/bin; busybox's applet links
# go to /bin and never replace a file already there, so VM_DYNBINS win.
set -eu
cache=$1 bin=$2 out=$3
shift 3
mkdir -p "$cache" "$out"
cache=$(cd "$cache" && pwd)

# Tests may build initramfs images side by side: one download at a time.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache/.lock"
	flock 9
fi

# The newest 6.1 cloud kernel apt knows about.
if [ ! -f "$cache/kernel.done" ]; then
	pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64$' | awk '{print $1}' | sort -V | tail -n1)
	[ -n "$pkg" ] || pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$' | awk '{print $1}' | sort -V | tail -n1)
	[ -n "$pkg" ] || { echo "no linux-image-6.1.0-*-cloud-amd64 package found (apt-get update?)" >&2; exit 1; }
	rm -rf "$cache/kernel" && mkdir -p "$cache/kernel"
	(cd "$cache" && rm -f linux-image-*.deb && apt-get download -q "$pkg" >&2)
	dpkg -x "$cache"/linux-image-*.deb "$cache/kernel"
	rm -f "$cache"/linux-image-*.deb
	touch "$cache/kernel.done"
fi
if [ ! -f "$cache/busybox.done" ]; then
	rm -rf "$cache/busybox" && mkdir -p "$cache/busybox"
	(cd "$cache" && rm -f busybox-static_*.deb && apt-get download -q busybox-static >&2)
	dpkg -x "$cache"/busybox-static_*.deb "$cache/busybox"
	rm -f "$cache"/busybox-static_*.deb
	touch "$cache/busybox.done"
fi
# Downloads are done; building the image needs no lock.
if command -v flock >/dev/null 2>&1; then
	flock -u 9
	exec 9>&-
fi

kdir=$(ls -d "$cache"/kernel/lib/modules/* | head -n1)
cp "$(ls "$cache"/kernel/boot/vmlinuz-* | head -n1)" "$out/vmlinuz"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/modules" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run" "$root/var/lib" "$root/etc"
# /var/run is /run, as on Debian: `ip netns` keeps namespaces in
# /run/netns and CNI runtimes name them /var/run/netns/NAME.
ln -s ../run "$root/var/run"
cp "$cache/busybox/bin/busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
cp "$bin" "$root/test.bin"
if [ -n "${VM_FILES:-}" ]; then
	cp -RL "$VM_FILES/." "$root/"
fi
# Dynamically linked host tools: the binary, its libraries and the loader
# at the paths the host uses (ld.so finds them in its default dirs).
for b in ${VM_DYNBINS:-}; do
	for f in "$b" $(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
		mkdir -p "$root$(dirname "$f")"
		[ -e "$root$f" ] || cp -L "$f" "$root$f"
	done
done

# Modules in load order: each module's dependencies before it. The
# package ships no modules.dep (depmod makes it at install time), so the
# dependencies come from each module's own modinfo "depends=" field, and
# names map to files through modules.order.
: >"$root/modules/order"
modpath() { # module name -> path relative to $kdir
	awk -v n="$(echo "$1" | tr - _)" '{ b = $0; sub(".*/", "", b); sub("[.]ko.*", "", b); gsub("-", "_", b); if (b == n) { print $0; exit } }' "$kdir/modules.order"
}
add_module() { # module name
	local name rel d
	name=$(echo "$1" | tr - _)
	grep -qx "$name" "$root/modules/order" && return 0
	rel=$(modpath "$name")
	if [ -z "$rel" ]; then
		grep -q "/$name.ko" "$kdir/modules.builtin" 2>/dev/null && return 0
		echo "module $name not found under $kdir" >&2
		exit 1
	fi
	case "$rel" in
	*.ko.xz) xz -dc "$kdir/$rel" >"$root/modules/$name.ko" ;;
	*.ko.zst) zstd -qdc "$kdir/$rel" >"$root/modules/$name.ko" ;;
	*.ko.gz) gzip -dc "$kdir/$rel" >"$root/modules/$name.ko" ;;
	*) cp "$kdir/$rel" "$root/modules/$name.ko" ;;
	esac
	for d in $(grep -a -o 'depends=[A-Za-z0-9_,-]*' "$root/modules/$name.ko" | head -n1 | cut -d= -f2 | tr , ' '); do
		add_module "$d"
	done
	echo "$name" >>"$root/modules/order"
}
for want in veth ipip ${VM_MODULES:-}; do
	add_module "$want"
done

args=""
for a in "$@"; do args="$args '$a'"; done
cat >"$root/init" <<INIT
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns
ip link set lo up
for m in \$(cat /modules/order); do
	insmod /modules/\$m.ko || echo "ROUTED-VM: insmod \$m failed"
done
echo "ROUTED-VM: modules loaded: \$(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
# Which accelerator the guest really got: Linux names KVM when it finds
# it; under TCG there is no such line.
echo "ROUTED-VM: \$(grep -c ^processor /proc/cpuinfo) vCPUs, \$(dmesg | grep -m1 'Hypervisor detected' || echo 'no hypervisor detected (TCG)')"
cd /tmp
ROUTED_IN_VM=1 ${VM_ENV:-} /test.bin $args
echo "ROUTED-VM-EXIT \$?"
sync
echo o >/proc/sysrq-trigger
sleep 10
INIT
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out/initrd.gz")
echo "built $out/initrd.gz with modules: $(tr '\n' ' ' <"$root/modules/order")" >&2
