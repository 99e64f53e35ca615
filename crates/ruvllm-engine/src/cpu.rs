//! The CPU features this build was compiled for, and a check that the running CPU has them.
//!
//! The workspace builds with `-C target-cpu=native` (and llama.cpp with `-march=native`):
//! the build machine's vector extensions are compiled in without a runtime switch, which is
//! what makes the kernels fast. A binary copied to a CPU without one of them would die with
//! "Illegal instruction" at the first such instruction; [`check`] finds that first and
//! returns an error that names the missing features and the fix (rebuild on that machine).
//! Binaries call it before any other work.
//!
//! Cost: one `cpuid` look-up per feature, cached by the standard library: microseconds.
//!
//! For tests, the environment variable `RUVLLM_CPU_HIDE` (a comma-separated list of feature
//! names, or `all`) makes [`check`] treat those features as absent from the running CPU,
//! so the refusal path can be exercised on any machine.

use std::fmt;

/// One CPU feature: its name (as `is_x86_feature_detected!` spells it), whether this build
/// was compiled for it, and whether the running CPU has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// The feature's name, e.g. `"avx2"`.
    pub name: &'static str,
    /// Compiled in (`cfg!(target_feature = ...)`).
    pub built: bool,
    /// Present on the running CPU (and granted by the OS).
    pub present: bool,
}

/// The running CPU lacks features this build was compiled for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CpuMismatch {
    /// The missing features' names.
    pub missing: Vec<&'static str>,
}

impl fmt::Display for CpuMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this ruvllm was built for a CPU with {}, which this CPU lacks; build it on this \
             machine (cargo install --path crates/ruvllm-cli, or scripts/run.sh) instead of \
             copying it",
            self.missing.join(", ")
        )
    }
}

macro_rules! features {
    ($($name:tt),* $(,)?) => {
        /// The features this build knows, in order: compiled-in and present flags.
        /// Cost: one cached `cpuid` look-up each.
        pub fn features() -> Vec<Feature> {
            vec![$(feature($name, cfg!(target_feature = $name), detect!($name))),*]
        }
    };
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
macro_rules! detect {
    ($name:tt) => {
        std::arch::is_x86_feature_detected!($name)
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! detect {
    ($name:tt) => {
        std::arch::is_aarch64_feature_detected!($name)
    };
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
features!(
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "popcnt",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi1",
    "bmi2",
    "lzcnt",
    "avx512f",
    "avx512cd",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512vnni",
    "avx512vbmi",
    "avx512vbmi2",
    "avx512bf16",
    "avx512ifma",
    "avx512vpopcntdq",
    "avx512bitalg",
    "gfni",
    "vaes",
    "vpclmulqdq",
);

#[cfg(target_arch = "aarch64")]
features!("neon", "fp16", "dotprod", "i8mm", "sve", "sve2", "bf16");

#[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
/// No runtime detection on this architecture: nothing to check.
pub fn features() -> Vec<Feature> {
    Vec::new()
}

#[allow(dead_code)] // unused on architectures without detection
fn feature(name: &'static str, built: bool, present: bool) -> Feature {
    Feature {
        name,
        built,
        present: present && !hidden(name),
    }
}

/// Whether `RUVLLM_CPU_HIDE` names `name` (or says `all`).
fn hidden(name: &str) -> bool {
    std::env::var("RUVLLM_CPU_HIDE")
        .map(|v| v.split(',').map(str::trim).any(|h| h == name || h == "all"))
        .unwrap_or(false)
}

/// The names of the features this build was compiled for, space-separated (for `-v` and
/// the server's properties).
pub fn built_for() -> String {
    let names: Vec<&str> = features()
        .into_iter()
        .filter(|f| f.built)
        .map(|f| f.name)
        .collect();
    if names.is_empty() {
        "the architecture's baseline".into()
    } else {
        names.join(" ")
    }
}

/// Checks that the running CPU has every feature this build was compiled for.
///
/// # Errors
/// [`CpuMismatch`] naming the missing features.
pub fn check() -> Result<(), CpuMismatch> {
    let missing: Vec<&'static str> = features()
        .into_iter()
        .filter(|f| f.built && !f.present)
        .map(|f| f.name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CpuMismatch { missing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_runs_here() {
        // The tests run where they were built: every compiled-in feature is present.
        check().unwrap();
        for f in features() {
            assert!(!f.built || f.present, "{f:?}");
        }
    }

    #[test]
    fn the_message_names_the_features_and_the_fix() {
        let e = CpuMismatch {
            missing: vec!["avx2", "fma"],
        };
        let m = e.to_string();
        assert!(m.contains("avx2, fma"), "{m}");
        assert!(m.contains("cargo install --path crates/ruvllm-cli"), "{m}");
    }
}
