//! Two link choices for the `wirespeed` binary that shrink what a server
//! keeps resident, each taken only where the tools take it.
//!
//! **Packed relative relocations** (`-z pack-relative-relocs`, DT_RELR),
//! where the linker and the C library have them (binutils 2.38, glibc 2.36:
//! Debian 12, Ubuntu 22.10 and later). A position-independent binary of
//! this size carries 1.7 MB of relative relocations that the loader reads
//! at every start, and that stay resident: packed, they take a few KiB. The
//! probe links and runs a C program with the flag, with the same `cc` that
//! links Rust binaries on Linux; a linker or C library without DT_RELR
//! fails one of the two, and nothing changes. A binary linked so needs
//! glibc 2.36 where it runs: `WIRESPEED_RELR=0` links without it, as
//! `scripts/build-wheel --release` does for the wheel's binary.
//!
//! **The start-up code together** (`--symbol-ordering-file`, lld's). The
//! kernel maps 64 KiB around every page of code a process touches, so the
//! functions a server runs from its start to its first answers, scattered
//! over a 39 MB `.text` by crate, kept 9.5 MiB of it resident.
//! `startup.order` lists them (`scripts/startup-order` writes it from a
//! run under callgrind), and the linker places them first, side by side.
//! Names a build no longer has are skipped without a warning: a stale list
//! packs less, and links the same. The names are the same wherever the
//! repository is cloned only when no code holds the clone's path: the
//! suffix of the local functions that codegen units share (`.llvm.N`)
//! hashes it. So the release profile has no debug info, and
//! `wirespeed-proto`'s generated code is in its source tree, not
//! included from `OUT_DIR`.
//!
//! The probe links an empty Rust program with the same `rustc` and flags
//! and the option; a linker without it (GNU ld, where rustc is told to
//! use it) fails, and nothing changes.
//! `WIRESPEED_ORDER=0` links without it.
//!
//! Neither is tried when cross compiling.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=startup.order");
    println!("cargo:rerun-if-env-changed=WIRESPEED_RELR");
    println!("cargo:rerun-if-env-changed=WIRESPEED_ORDER");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != host || !target.ends_with("-linux-gnu") {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    if !off("WIRESPEED_RELR") && relr_links(&out) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("startup.order");
    if !off("WIRESPEED_ORDER") && order.is_file() {
        let args = [
            format!("-Wl,--symbol-ordering-file={}", order.display()),
            "-Wl,--no-warn-symbol-ordering".to_owned(),
        ];
        if rust_links_with(&out, &args) {
            for arg in args {
                println!("cargo:rustc-link-arg-bins={arg}");
            }
        }
    }
}

fn off(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "0")
}

/// Links and runs a C program with packed relative relocations.
fn relr_links(out: &Path) -> bool {
    let source = out.join("relr_probe.c");
    let probe = out.join("relr_probe");
    // A relocated pointer, so the probe has a relative relocation to pack.
    let program = "static int x; int *p = &x; int main(void) { return *p; }\n";
    if std::fs::write(&source, program).is_err() {
        return false;
    }
    let linked = Command::new("cc")
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&probe)
        .arg(&source)
        .output()
        .is_ok_and(|o| o.status.success());
    linked
        && Command::new(&probe)
            .status()
            .is_ok_and(|status| status.success())
}

/// Links an empty Rust program with the `rustc` and flags cargo builds
/// this crate with, and these arguments for the linker.
fn rust_links_with(out: &Path, args: &[String]) -> bool {
    let source = out.join("order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let mut command = Command::new(rustc);
    if let Ok(flags) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        command.args(flags.split('\x1f').filter(|flag| !flag.is_empty()));
    }
    for arg in args {
        command.arg("-C").arg(format!("link-arg={arg}"));
    }
    command
        .arg("--crate-type=bin")
        .arg("-o")
        .arg(out.join("order_probe"))
        .arg(&source)
        .output()
        .is_ok_and(|o| o.status.success())
}
