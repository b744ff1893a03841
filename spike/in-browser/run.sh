#!/bin/bash
# The in-browser Linux spike (docs/IN-BROWSER.md), from registry packages only: builds a 32-bit
# guest (Debian's 686 kernel, busybox, story 1 in miniature, and ackscope's probe if
# ACKSCOPE_I686 names one built for i686-unknown-linux-musl), boots it in v86 in headless
# Chromium BOOTS times, and prints what each boot measured.
#
#   spike/in-browser/run.sh [BOOTS]
#
# KERNEL=tiny (the default) builds the guest's kernel from Debian's linux-source-6.1 with
# tinyconfig and vm/kernel.options (3 to 4 minutes on 2 cores, once); KERNEL=debian boots Debian's
# own 686 kernel instead.
#
# Needs: root on an x86-64 Debian host that runs 32-bit binaries (the guest's busybox packs
# the initramfs), rustup, npm, apt-get, chromium, python3, gzip. Adds dpkg's i386 architecture
# only for the download and removes it after, also on failure. Works in
# target/in-browser-spike.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(cd "$here/../.." && pwd)/target/in-browser-spike
boots=${1:-3}
kernel_kind=${KERNEL:-tiny}
v86_version=0.5.462
mkdir -p "$work"/{debs,root,guest,site}
cd "$work"

echo "== v86 $v86_version (npm)"
[ -f "v86-$v86_version.tgz" ] || npm pack --silent "v86@$v86_version" >/dev/null
tar xzf "v86-$v86_version.tgz"
cp package/build/libv86.js package/build/v86.wasm site/

echo "== Debian's 686 kernel, busybox-static (i386) and SeaBIOS"
if ! ls debs/linux-image-*-686-unsigned_*.deb debs/linux-source-6.1_*.deb >/dev/null 2>&1; then
    added=no
    if ! dpkg --print-foreign-architectures | grep -x i386 >/dev/null; then
        dpkg --add-architecture i386
        added=yes
        trap 'dpkg --remove-architecture i386; apt-get update -qq || true' EXIT
    fi
    apt-get update -qq || true
    kernel=$(apt-cache depends linux-image-686:i386 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$kernel" ]; then
        echo "no linux-image-*-686 behind linux-image-686:i386 in apt's lists" >&2
        exit 1
    fi
    (cd debs && apt-get download -qq "${kernel%:i386}-unsigned:i386" busybox-static:i386 seabios linux-source-6.1)
    if [ "$added" = yes ]; then
        dpkg --remove-architecture i386
        apt-get update -qq || true
        trap - EXIT
    fi
fi
for deb in debs/*.deb; do
    case "$deb" in *linux-source*) ;; *) dpkg-deb -x "$deb" root ;; esac
done
cp root/usr/share/seabios/bios.bin root/usr/share/seabios/vgabios-stdvga.bin site/
if [ "$kernel_kind" = debian ]; then
    cp root/boot/vmlinuz-*-686 site/bzImage
    cmdline="console=ttyS0 quiet 8250.nr_uarts=2 cryptomgr.notests noisapnp pnpbios=off mitigations=off"
else
    echo "== the guest's kernel: tinyconfig and kernel.options, HZ=1000"
    command -v flex >/dev/null && command -v bison >/dev/null || apt-get install -y -qq flex bison
    if [ ! -d ksrc/linux ]; then
        mkdir -p ksrc
        dpkg-deb --fsys-tarfile debs/linux-source-6.1_*.deb | tar -x -O --wildcards '*/linux-source-6.1.tar.xz' |
            tar -xJ -C ksrc
        mv ksrc/linux-source-6.1 ksrc/linux
    fi
    (
        cd ksrc/linux
        make ARCH=i386 tinyconfig >/dev/null
        grep -v '^#' "$here/../../vm/kernel.options" | while read -r option; do scripts/config --enable "$option"; done
        for other in KERNEL_XZ KERNEL_LZMA KERNEL_BZIP2 KERNEL_LZO KERNEL_LZ4 KERNEL_ZSTD HZ_100 HZ_250 HZ_300 PREEMPT_NONE; do
            scripts/config --disable "$other"
        done
        scripts/config --set-val HZ 1000
        make ARCH=i386 olddefconfig >/dev/null
        make -j"$(nproc)" ARCH=i386 bzImage >/dev/null
    )
    cp ksrc/linux/arch/x86/boot/bzImage site/bzImage
    cmdline="console=ttyS0 quiet 8250.nr_uarts=2"
fi

echo "== story 1 in miniature, for the guest (i686 musl) and for the host"
rustup target add i686-unknown-linux-musl >/dev/null 2>&1 || true
rustc -O --edition 2021 --target i686-unknown-linux-musl "$here/story1.rs" -o guest/story1
rustc -O --edition 2021 "$here/story1.rs" -o story1-host

echo "== the initramfs"
mkdir -p guest/{bin,proc,sys,dev,tmp}
cp root/bin/busybox guest/bin/
cp "$here/init" guest/init
if [ -n "${ACKSCOPE_I686:-}" ]; then cp "$ACKSCOPE_I686" guest/ackscope; fi
(cd guest && find . | "$work/root/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -9 >"$work/site/initrd.gz")
cp "$here/index.html" site/
for f in site/*; do printf '%-22s %9d bytes, %9d gzipped\n' "${f#site/}" "$(stat -c %s "$f")" "$(gzip -9c "$f" | wc -c)"; done
echo "total gzipped: $(for f in site/*; do gzip -9c "$f" | wc -c; done | awk '{s+=$1} END {printf "%.1f MB", s/1e6}')"

echo "== the host, for comparison"
./story1-host 100 nagle,nodelay,reconnect,nodelay | grep '^STORY1 ' || echo "the host printed no figures"

python3 -m http.server --bind 127.0.0.1 --directory site 8792 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
query=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$cmdline")
for boot in $(seq 1 "$boots"); do
    echo "== boot $boot"
    log=$(mktemp)
    profile=$(mktemp -d)
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --enable-logging=stderr --v=0 \
        "http://127.0.0.1:8792/index.html?cmdline=$query&use-scheduling-api" 2>"$log" &
    browser=$!
    for _ in $(seq 1 480); do grep -q GUEST-DONE "$log" && break; sleep 0.5; done
    kill $browser 2>/dev/null || true
    wait $browser 2>/dev/null || true
    grep -E '"(SERIAL|SPIKE) ' "$log" | sed 's/.*"SERIAL //; s/.*"SPIKE //; s/", source.*//' |
        grep -E 'ready|BOOTED|KERNEL|STORY1 |PROBE|SESSION-' || echo "boot $boot: the guest said nothing"
    # The session the guest sent over its second serial port, read by the host's ackscope.
    session=$(grep -o 'SPIKE SESSION [^"]*' "$log" | head -1 || true)
    if [ -n "$session" ] && command -v "${ACKSCOPE_HOST:-$work/../release/ackscope}" >/dev/null; then
        echo "SESSION ${session#SPIKE SESSION }" | sed 's/ b64=.*//'
        echo "${session#*b64=}" | base64 -d >"$work/session-$boot.ackscope"
        "${ACKSCOPE_HOST:-$work/../release/ackscope}" show "$work/session-$boot.ackscope" | grep -E 'requests|latency'
    fi
    grep -E '"SERIAL ' "$log" | grep -o 'GUEST-DONE.*' | sed 's/", source.*//' || true
    rm -rf "$log" "$profile"
done
