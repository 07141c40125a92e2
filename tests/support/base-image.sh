#!/usr/bin/env bash
# Builds a small base image for the container-runtime tests of `baton eval --env podman|docker`
# from this host's own programs (no registry is reachable from the test machines): a shell, the
# core utilities, and the shared libraries they and the programs named after the tag load (the
# baton binary the trials mount, which itself stays out of the image).
# Usage: base-image.sh RUNTIME TAG [MOUNTED_PROGRAM...]
set -euo pipefail
runtime=$1
tag=$2
shift 2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
programs=(bash sh env cat cp mkdir rm mv ls ln sleep echo find setsid dirname basename test
    true false grep sed head tail wc touch chmod id sort kill nohup stat readlink uname mkfifo paste)
copy() {
    local src=$1
    mkdir -p "$root$(dirname "$src")"
    cp -L "$src" "$root$src"
}
libs_of() {
    for lib in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
        [ -e "$root$lib" ] || copy "$lib"
    done
}
for p in "${programs[@]}"; do
    path=$(command -v "$p" || true)
    case "$path" in /*) ;; *) continue ;; esac
    copy "$path"
    libs_of "$path"
done
for p in "$@"; do
    libs_of "$p"
done
# Debian keeps /bin and /lib in /usr: both spellings must reach the programs.
for d in bin lib lib64 sbin; do
    if [ -d "$root/usr/$d" ] && [ ! -e "$root/$d" ]; then
        ln -s "usr/$d" "$root/$d"
    elif [ -d "$root/$d" ] && [ -d "$root/usr/$d" ]; then
        cp -an "$root/usr/$d/." "$root/$d/"
        rm -rf "${root:?}/usr/$d"
        ln -s "../$d" "$root/usr/$d"
    fi
done
mkdir -p "$root/etc" "$root/root" "$root/tmp" "$root/app" "$root/var/tmp" "$root/usr/local/bin"
chmod 1777 "$root/tmp" "$root/var/tmp"
# mktemp made the root 0700: users other than root could not reach anything in the image.
chmod 755 "$root"
echo 'root:x:0:0:root:/root:/bin/bash' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
tar -C "$root" -cf "$root.tar" .
trap 'rm -rf "$root" "$root.tar"' EXIT
"$runtime" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'WORKDIR /app' \
    "$root.tar" "$tag" >/dev/null
