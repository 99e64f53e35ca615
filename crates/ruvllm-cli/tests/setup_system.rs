//! `scripts/setup-system.sh --check` against fixture directory trees of the common system
//! layouts: the script must find libclang where bindgen's clang-sys would load it (and not
//! take `libclang-cpp` for it), find commands on the given PATH, tell the system's family
//! from its os-release, and print the one command that installs what is missing there.
//!
//! Each fixture is a directory tree made here: empty library files where a distribution's
//! packages put them, and small shell scripts standing in for `cmake`, the compilers,
//! `python3` (which answers the version asked) and `node`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup-system.sh")
}

/// A fixture root with an os-release, a bin directory and the given (empty) files.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str, os_release: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("ruvllm-setup-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("etc")).unwrap();
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::write(dir.join("etc/os-release"), os_release).unwrap();
        Fixture { dir }
    }

    fn file(self, rel: &str) -> Fixture {
        let path = self.dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
        self
    }

    fn exe(self, name: &str, body: &str) -> Fixture {
        let path = self.dir.join("bin").join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// Every tool present, Python at version `python`.
    fn tools(self, python: &str) -> Fixture {
        let py = format!("case \"$2\" in *version_info*) echo {python} ;; *) exit 0 ;; esac");
        [
            "cmake",
            "cc",
            "c++",
            "make",
            "node",
            "npm",
            "cargo",
            "clippy-driver",
        ]
        .iter()
        .fold(self, |f, name| f.exe(name, "exit 0"))
        .exe("python3", &py)
    }

    /// Runs the check with this tree as the root and its bin as the only PATH.
    fn check(&self, purpose: &str, env: &[(&str, String)]) -> (i32, String) {
        let mut cmd = Command::new("bash");
        cmd.arg(script())
            .args(["--for", purpose, "--check"])
            .env("SETUP_ROOT", &self.dir)
            .env("SETUP_PATH", self.dir.join("bin"))
            .env("SETUP_UNAME", "Linux")
            .env_remove("LIBCLANG_PATH")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("LIBRARY_PATH");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().expect("no signal"), text)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

const DEBIAN: &str = "ID=debian\nVERSION_ID=\"12\"\n";
const UBUNTU: &str = "ID=ubuntu\nID_LIKE=debian\n";
const FEDORA: &str = "ID=fedora\n";
const ROCKY: &str = "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n";
const ARCH: &str = "ID=arch\n";
const ALPINE: &str = "ID=alpine\n";

fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{text}"))
}

#[test]
fn debian_with_only_libclang_cpp_is_missing_libclang() {
    // The fresh Debian 12 machine of issue 65: libclang-cpp14 installed, libclang-dev not.
    let f = Fixture::new("deb-cpp", DEBIAN)
        .tools("3.11")
        .file("usr/lib/llvm-14/lib/libclang-cpp.so.14")
        .file("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14")
        .file("usr/lib/llvm-14/lib/libLLVM-14.so");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "setup: missing  libclang").contains("libclang-cpp is another library"));
    assert_eq!(line(&out, "setup: system"), "setup: system   debian");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  apt-get install -y --no-install-recommends libclang-dev"
    );
}

#[test]
fn debian_libclang_dev_layout_is_found() {
    let f = Fixture::new("deb-dev", DEBIAN)
        .tools("3.11")
        .file("usr/lib/llvm-14/lib/libclang-cpp.so.14")
        .file("usr/lib/llvm-14/lib/libclang.so")
        .file("usr/lib/x86_64-linux-gnu/libclang-14.so.1");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(line(&out, "setup: ok       libclang").contains("libclang"));
    assert!(!out.contains("missing"), "{out}");
}

#[test]
fn runtime_only_libclang_is_found_as_clang_sys_loads_it() {
    // libclang1-14 alone: only the versioned file, which clang-sys loads at run time.
    let f = Fixture::new("deb-rt", UBUNTU)
        .tools("3.12")
        .file("usr/lib/x86_64-linux-gnu/libclang-14.so.1");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "setup: ok       libclang").ends_with("libclang-14.so.1)"),
        "{out}"
    );
}

#[test]
fn fedora_and_rhel_get_dnf() {
    let f = Fixture::new("fedora", FEDORA)
        .tools("3.12")
        .exe("cmake", "exit 0");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  dnf install -y clang-devel"
    );
    let f = Fixture::new("fedora-ok", FEDORA)
        .tools("3.12")
        .file("usr/lib64/libclang.so.17.0.6");
    assert_eq!(f.check("test", &[]).0, 0);
    let f = Fixture::new("rocky", ROCKY)
        .tools("3.11")
        .file("usr/lib64/libLLVM.so");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(line(&out, "setup: system"), "setup: system   fedora");
}

#[test]
fn arch_and_alpine_get_their_package_managers() {
    let f = Fixture::new("arch", ARCH).tools("3.12");
    fs::remove_file(f.dir.join("bin/cmake")).unwrap();
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  pacman -S --needed --noconfirm cmake clang"
    );
    let f = Fixture::new("arch-ok", ARCH)
        .tools("3.12")
        .file("usr/lib/libclang.so");
    assert_eq!(f.check("test", &[]).0, 0);

    let f = Fixture::new("alpine", ALPINE).tools("3.12");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  apk add clang-dev"
    );
    let f = Fixture::new("alpine-ok", ALPINE)
        .tools("3.12")
        .file("usr/lib/llvm17/lib/libclang.so.17");
    assert_eq!(f.check("test", &[]).0, 0);
}

#[test]
fn libclang_path_is_the_only_place_searched_when_set() {
    let f = Fixture::new("libclang-path", DEBIAN)
        .tools("3.11")
        .file("usr/lib/llvm-14/lib/libclang.so")
        .file("opt/llvm/lib/libclang-cpp.so.18");
    let hidden = f.dir.join("opt/llvm/lib").display().to_string();
    let (code, out) = f.check("test", &[("LIBCLANG_PATH", hidden)]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "setup: missing  libclang").contains("LIBCLANG_PATH="));
    let f = f.file("opt/llvm/lib/libclang.so.18.1");
    let shown = f.dir.join("opt/llvm/lib").display().to_string();
    assert_eq!(f.check("test", &[("LIBCLANG_PATH", shown)]).0, 0);
}

#[test]
fn llvm_config_prefix_is_searched() {
    let f = Fixture::new("llvm-config", "ID=debian\n")
        .tools("3.11")
        .file("opt/llvm18/lib/libclang.so");
    let prefix = f.dir.join("opt/llvm18").display().to_string();
    let f = f.exe("llvm-config", &format!("echo {prefix}"));
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(line(&out, "setup: ok       libclang").contains("opt/llvm18/lib/libclang.so"));
}

#[test]
fn the_tests_need_clippy_and_rustfmt() {
    let f = Fixture::new("noclippy", DEBIAN)
        .tools("3.11")
        .file("usr/lib/llvm-14/lib/libclang.so");
    assert_eq!(f.check("test", &[]).0, 0);
    fs::remove_file(f.dir.join("bin/clippy-driver")).unwrap();
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rustup component add clippy rustfmt"), "{out}");
    // The main job builds without them.
    assert_eq!(f.check("run", &[]).0, 0);
}

#[test]
fn python_and_node_are_checked_for_what_each_command_needs() {
    let f = Fixture::new("py39", DEBIAN)
        .tools("3.9")
        .file("usr/lib/llvm-14/lib/libclang.so");
    let (code, out) = f.check("test", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "setup: missing  Python 3.11 or later").contains("python3 is 3.9"));
    // No package of the same name gives a newer Python: no install line, a note instead.
    assert!(!out.contains("setup: install"), "{out}");
    assert!(out.contains("install a newer one"), "{out}");
    // The main job needs Python only to run pip: 3.9 is enough there.
    assert_eq!(f.check("run", &[]).0, 0);

    let f = Fixture::new("nonode", DEBIAN)
        .tools("3.11")
        .file("usr/lib/llvm-14/lib/libclang.so");
    fs::remove_file(f.dir.join("bin/npm")).unwrap();
    let (code, out) = f.check("run", &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  apt-get install -y --no-install-recommends nodejs npm"
    );
}

#[test]
fn macos_points_at_homebrew_and_libclang_path() {
    let f = Fixture::new("macos", "").tools("3.12");
    let cmd_env = vec![("SETUP_UNAME", "Darwin".to_string())];
    let (code, out) = f.check("test", &cmd_env);
    assert_eq!(code, 1, "{out}");
    assert_eq!(line(&out, "setup: system"), "setup: system   macos");
    assert_eq!(
        line(&out, "setup: install"),
        "setup: install  brew install llvm"
    );
    assert!(line(&out, "setup: then").contains("LIBCLANG_PATH"));
    let f = Fixture::new("macos-clt", "")
        .tools("3.12")
        .file("Library/Developer/CommandLineTools/usr/lib/libclang.dylib");
    assert_eq!(f.check("test", &cmd_env).0, 0);
}

/// The flags that keep AMX out of llama.cpp are the same for the crate's build
/// (.cargo/config.toml) and the other llama.cpp builds (scripts/llamacpp-flags.sh).
#[test]
fn llamacpp_flags_agree_between_cargo_and_the_scripts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    let flags = |key: &str| -> String {
        let line = config
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} missing from .cargo/config.toml"));
        line.split('"').nth(1).unwrap().to_string()
    };
    let c = flags("CFLAGS_x86_64_unknown_linux_gnu");
    assert_eq!(c, flags("CXXFLAGS_x86_64_unknown_linux_gnu"));
    for m in ["__AMX_TILE__", "__AMX_INT8__", "__AMX_BF16__"] {
        assert!(c.contains(&format!("-U{m}")), "{c}");
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". {}/scripts/llamacpp-flags.sh && echo \"$LLAMACPP_CFLAGS\"",
            root.display()
        ))
        .output()
        .unwrap();
    let script = String::from_utf8(out.stdout).unwrap();
    if cfg!(target_arch = "x86_64") {
        assert_eq!(script.trim(), c);
    }
}

/// Under an AMX target (`-march=sapphirerapids`, what `-march=native` means on the Xeons
/// whose VMs fault), the flags turn off ggml's AMX guard (`ggml-cpu/amx/amx.h`: `#if
/// defined(__AMX_INT8__) && defined(__AVX512VNNI__)`), after <immintrin.h> too: the
/// kernels are not compiled, on any x86-64 build machine.
#[test]
fn the_flags_compile_ggml_amx_guard_out_under_an_amx_target() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("ruvllm-amx-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let src = dir.join("amx.cpp");
    fs::write(
        &src,
        "#include <immintrin.h>\n#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)\n\
         #error AMX kernels would be compiled\n#endif\nint main() { return 0; }\n",
    )
    .unwrap();
    let compile = |flags: &str| {
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". {}/scripts/llamacpp-flags.sh && c++ -march=sapphirerapids {flags} -c {} -o /dev/null",
                root.display(),
                src.display()
            ))
            .output()
            .unwrap()
    };
    // The target really turns AMX on (else this test would prove nothing)...
    let plain = compile("");
    assert!(
        !plain.status.success(),
        "AMX not on under -march=sapphirerapids"
    );
    assert!(String::from_utf8_lossy(&plain.stderr).contains("AMX kernels would be compiled"));
    // ...and the flags turn it off.
    let out = compile("$LLAMACPP_CFLAGS");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = fs::remove_dir_all(&dir);
}
