#!/usr/bin/env bash
# Check, before any build starts, the system packages the build and the tests need beyond
# Rust, and install the missing ones by name where that is safe (apt-get on Debian and
# Ubuntu); on every other system print the one command that installs them and stop.
#
# Usage: scripts/setup-system.sh [--for run|test] [--check]
#   --for run   what `scripts/run.sh` needs: a C and C++ compiler, make, cmake, libclang,
#               Python 3.8+ with pip (fetch-assets) and Node.js with npm.
#   --for test  (default) the same, with Python 3.11+ and its venv module (the Python
#               package's tests).
#   --check     report only: never install, exit 1 when something is missing.
#
# Each thing is found the way the tool that uses it finds it:
# * libclang as bindgen's clang-sys loads it: `libclang.so`, `libclang-*.so`,
#   `libclang.so.*` or `libclang-*.so.*` (never `libclang-cpp*`, a different library) in
#   $LIBCLANG_PATH alone when set, else in `llvm-config --prefix`'s bin/lib/lib64,
#   $LD_LIBRARY_PATH, $LIBRARY_PATH and the system directories (/usr/lib*, /usr/lib*/*,
#   /usr/lib*/*/*, /usr/local/...; on macOS the Command Line Tools, Xcode and Homebrew's llvm);
# * commands on PATH, and Python's version and modules by running it.
#
# For tests, SETUP_ROOT (default /) prefixes every file looked up, SETUP_PATH replaces PATH
# for the commands looked up, and SETUP_UNAME replaces `uname -s`.
set -euo pipefail

purpose=test
check_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --for) purpose="${2:?--for needs run or test}"; shift 2 ;;
        --check) check_only=1; shift ;;
        *) echo "setup: unknown argument $1 (usage: setup-system.sh [--for run|test] [--check])" >&2; exit 2 ;;
    esac
done
case "$purpose" in run|test) ;; *) echo "setup: --for takes run or test, not $purpose" >&2; exit 2 ;; esac

root="${SETUP_ROOT:-/}"
root="${root%/}"
lookup_path="${SETUP_PATH:-$PATH}"
kernel="${SETUP_UNAME:-$(uname -s)}"

# The path of command $1 on the lookup path, or nothing.
find_cmd() {
    local dir
    local IFS=:
    for dir in $lookup_path; do
        [ -n "$dir" ] && [ -x "$dir/$1" ] && [ ! -d "$dir/$1" ] && { echo "$dir/$1"; return 0; }
    done
    return 1
}

# The first libclang that clang-sys would load in directory $1 (a real path), or nothing.
libclang_in() {
    local dir="$1" f name
    [ -d "$dir" ] || return 1
    for f in "$dir"/libclang.so "$dir"/libclang-*.so "$dir"/libclang.so.* "$dir"/libclang-*.so.* \
             "$dir"/libclang.dylib; do
        [ -e "$f" ] || continue
        name="${f##*/}"
        case "$name" in *-cpp.*|*-cpp[0-9]*) continue ;; esac
        echo "$f"
        return 0
    done
    return 1
}

find_libclang() {
    local dir prefix
    if [ -n "${LIBCLANG_PATH:-}" ]; then
        # clang-sys searches only there when it is set: a file or a directory.
        if [ -f "$LIBCLANG_PATH" ]; then
            case "${LIBCLANG_PATH##*/}" in *-cpp.*) return 1 ;; esac
            echo "$LIBCLANG_PATH"
            return 0
        fi
        libclang_in "$LIBCLANG_PATH"
        return
    fi
    if llvm_config="$(find_cmd llvm-config)"; then
        prefix="$("$llvm_config" --prefix 2>/dev/null | head -n1)" || prefix=""
        if [ -n "$prefix" ]; then
            for dir in "$prefix/bin" "$prefix/lib" "$prefix/lib64"; do
                libclang_in "$dir" && return 0
            done
        fi
    fi
    local IFS=:
    for dir in ${LD_LIBRARY_PATH:-} ${LIBRARY_PATH:-}; do
        [ -n "$dir" ] && libclang_in "$dir" && return 0
    done
    unset IFS
    local patterns
    if [ "$kernel" = Darwin ]; then
        patterns=("$root"/usr/local/opt/llvm*/lib/llvm*/lib "$root"/Library/Developer/CommandLineTools/usr/lib
                  "$root"/Applications/Xcode.app/Contents/Developer/Toolchains/XcodeDefault.xctoolchain/usr/lib
                  "$root"/usr/local/opt/llvm*/lib "$root"/opt/homebrew/opt/llvm*/lib)
    else
        patterns=("$root"/usr/local/llvm*/lib* "$root"/usr/local/lib*/*/* "$root"/usr/local/lib*/*
                  "$root"/usr/local/lib* "$root"/usr/lib*/*/* "$root"/usr/lib*/* "$root"/usr/lib*)
    fi
    for dir in "${patterns[@]}"; do
        [ -d "$dir" ] && libclang_in "$dir" && return 0
    done
    return 1
}

# The system's family: debian, fedora, arch, alpine, suse, macos, or unknown.
system_family() {
    if [ "$kernel" = Darwin ]; then echo macos; return; fi
    local id="" like="" word
    if [ -r "$root/etc/os-release" ]; then
        id="$(. "$root/etc/os-release" >/dev/null 2>&1; echo "${ID:-}")"
        like="$(. "$root/etc/os-release" >/dev/null 2>&1; echo "${ID_LIKE:-}")"
    fi
    for word in $id $like; do
        case "$word" in
            debian|ubuntu|linuxmint|pop|raspbian) echo debian; return ;;
            fedora|rhel|centos|rocky|almalinux|amzn|ol) echo fedora; return ;;
            arch|manjaro|endeavouros) echo arch; return ;;
            alpine) echo alpine; return ;;
            suse|opensuse|opensuse-leap|opensuse-tumbleweed|sles) echo suse; return ;;
        esac
    done
    echo unknown
}

# The package that provides thing $2 on family $1.
package_for() {
    case "$1:$2" in
        debian:libclang) echo libclang-dev ;;
        debian:cmake) echo cmake ;;
        debian:cc|debian:c++|debian:make) echo build-essential ;;
        debian:python) echo "python3 python3-venv python3-pip" ;;
        debian:node) echo "nodejs npm" ;;
        fedora:libclang) echo clang-devel ;;
        fedora:cmake) echo cmake ;;
        fedora:cc) echo gcc ;;
        fedora:c++) echo gcc-c++ ;;
        fedora:make) echo make ;;
        fedora:python) echo "python3 python3-pip" ;;
        fedora:node) echo "nodejs npm" ;;
        arch:libclang) echo clang ;;
        arch:cmake) echo cmake ;;
        arch:cc|arch:c++|arch:make) echo base-devel ;;
        arch:python) echo "python python-pip" ;;
        arch:node) echo "nodejs npm" ;;
        alpine:libclang) echo clang-dev ;;
        alpine:cmake) echo cmake ;;
        alpine:cc|alpine:c++|alpine:make) echo build-base ;;
        alpine:python) echo "python3 py3-pip" ;;
        alpine:node) echo "nodejs npm" ;;
        suse:libclang) echo clang-devel ;;
        suse:cmake) echo cmake ;;
        suse:cc) echo gcc ;;
        suse:c++) echo gcc-c++ ;;
        suse:make) echo make ;;
        suse:python) echo "python311 python311-pip" ;;
        suse:node) echo "nodejs npm" ;;
        macos:libclang) echo llvm ;;
        macos:cmake) echo cmake ;;
        macos:python) echo python@3.12 ;;
        macos:node) echo node ;;
        *) return 1 ;;
    esac
}

install_command() {
    case "$1" in
        debian) echo "apt-get install -y --no-install-recommends $2" ;;
        fedora) echo "dnf install -y $2" ;;
        arch) echo "pacman -S --needed --noconfirm $2" ;;
        alpine) echo "apk add $2" ;;
        suse) echo "zypper install -y $2" ;;
        macos) echo "brew install $2" ;;
    esac
}

missing=()
notes=()
report() { printf 'setup: %-8s %s\n' "$1" "$2"; }

if path="$(find_cmd cmake)"; then report ok "cmake ($path)"; else report missing "cmake"; missing+=(cmake); fi
cc_path=""
for c in cc gcc clang; do cc_path="$(find_cmd "$c")" && break; done
if [ -n "$cc_path" ]; then report ok "C compiler ($cc_path)"; else report missing "C compiler (cc, gcc or clang)"; missing+=(cc); fi
cxx_path=""
for c in c++ g++ clang++; do cxx_path="$(find_cmd "$c")" && break; done
if [ -n "$cxx_path" ]; then report ok "C++ compiler ($cxx_path)"; else report missing "C++ compiler (c++, g++ or clang++)"; missing+=(c++); fi
if path="$(find_cmd make)"; then report ok "make ($path)"; else report missing "make"; missing+=(make); fi
if path="$(find_libclang)"; then
    report ok "libclang ($path)"
else
    where="the system library directories"
    [ -n "${LIBCLANG_PATH:-}" ] && where="LIBCLANG_PATH=$LIBCLANG_PATH"
    report missing "libclang (bindgen loads libclang.so, libclang-*.so or libclang.so.*; none in $where; libclang-cpp is another library)"
    missing+=(libclang)
fi

need_minor=8
[ "$purpose" = test ] && need_minor=11
if py="$(find_cmd python3)"; then
    version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "?")"
    minor="${version#3.}"
    if [ "${version%%.*}" != 3 ] || ! [ "$minor" -ge "$need_minor" ] 2>/dev/null; then
        # No package of the same name fixes a version: say what does.
        report missing "Python 3.$need_minor or later (python3 is $version)"
        notes+=("Python 3.$need_minor or later is needed (python3 at $py is $version): install a newer one (your system's python3.1x package, pyenv or Homebrew) and put it first on PATH.")
    else
        modules="pip"
        [ "$purpose" = test ] && modules="pip, venv, ensurepip"
        if "$py" -c "import $modules" >/dev/null 2>&1; then
            report ok "Python $version ($py, with $modules)"
        else
            report missing "Python's $modules modules (python3 $version at $py lacks one)"
            missing+=(python)
        fi
    fi
else
    report missing "Python 3.$need_minor or later (python3)"
    missing+=(python)
fi
node_ok=1
if path="$(find_cmd node)"; then report ok "Node.js ($path)"; else report missing "Node.js (node)"; node_ok=0; fi
if path="$(find_cmd npm)"; then report ok "npm ($path)"; else report missing "npm"; node_ok=0; fi
[ $node_ok -eq 1 ] || missing+=(node)
if ! find_cmd cargo >/dev/null; then
    report missing "Rust (cargo): install it with rustup, then run this again"
    notes+=("Rust is installed with rustup, not by this script.")
elif [ "$purpose" = test ]; then
    # The tests' build runs clippy's driver and rustfmt (scripts/test.sh).
    if driver="$(find_cmd clippy-driver)" && "$driver" --version >/dev/null 2>&1 \
        && "$(find_cmd cargo)" fmt --version >/dev/null 2>&1; then
        report ok "clippy and rustfmt"
    else
        report missing "clippy or rustfmt (Rust components)"
        notes+=("Rust's clippy and rustfmt components are missing: rustup component add clippy rustfmt")
    fi
fi

family="$(system_family)"
report system "$family"
if [ ${#missing[@]} -eq 0 ] && [ ${#notes[@]} -eq 0 ]; then
    exit 0
fi
packages=()
for thing in "${missing[@]}"; do
    if pkg="$(package_for "$family" "$thing")"; then
        for p in $pkg; do
            case " ${packages[*]} " in *" $p "*) ;; *) packages+=("$p") ;; esac
        done
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: ${notes[*]}" >&2
    exit 1
fi
command_line=""
[ ${#packages[@]} -gt 0 ] && command_line="$(install_command "$family" "${packages[*]}")"
[ "$family" = macos ] && [[ " ${missing[*]} " == *" cc "* || " ${missing[*]} " == *" c++ "* || " ${missing[*]} " == *" make "* ]] \
    && command_line="xcode-select --install${command_line:+ && $command_line}"
if [ -n "$command_line" ]; then
    report install "$command_line"
fi
if [ "$family" = macos ] && [[ " ${missing[*]} " == *" libclang "* ]]; then
    report then "export LIBCLANG_PATH=\"\$(brew --prefix llvm)/lib\""
fi

sudo=()
[ "$(id -u)" -ne 0 ] && sudo=(sudo)
if [ $check_only -eq 0 ] && [ "$family" = debian ] && [ ${#packages[@]} -gt 0 ] \
    && find_cmd apt-get >/dev/null && { [ ${#sudo[@]} -eq 0 ] || find_cmd sudo >/dev/null; }; then
    echo "setup: installing ${packages[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! "${sudo[@]}" apt-get install -y --no-install-recommends ${packages[*]} >/dev/null; then
        "${sudo[@]}" apt-get update -qq
        # shellcheck disable=SC2086
        "${sudo[@]}" apt-get install -y --no-install-recommends ${packages[*]} >/dev/null
    fi
    # Installed: check again, reporting only.
    exec bash "${BASH_SOURCE[0]}" --for "$purpose" --check
fi
if [ -z "$command_line" ]; then
    echo "setup: no package manager known for this system ($family): install the missing tools above, then run this again" >&2
elif [ $check_only -eq 0 ]; then
    echo "setup: missing what the build needs; install it with (as root):" >&2
    echo "    $command_line" >&2
    echo "then run this command again" >&2
fi
[ ${#notes[@]} -gt 0 ] && echo "setup: ${notes[*]}" >&2
exit 1
