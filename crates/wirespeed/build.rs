//! Links the `wirespeed` binary with packed relative relocations
//! (`-z pack-relative-relocs`, DT_RELR) where the linker and the C library
//! take them (binutils 2.38, glibc 2.36: Debian 12, Ubuntu 22.10 and
//! later). A position-independent binary of this size carries 1.7 MB of
//! relative relocations that the loader reads at every start, and that
//! stay resident: packed, they take a few KiB. Elsewhere, and when cross
//! compiling, the binary links as before.
//!
//! The probe links and runs a C program with the flag, with the same `cc`
//! that links Rust binaries on Linux; a linker or C library without
//! DT_RELR fails one of the two, and nothing changes. A binary linked so
//! needs glibc 2.36 where it runs: `WIRESPEED_RELR=0` links without it, as
//! `scripts/build-wheel --release` does for the wheel's binary.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=WIRESPEED_RELR");
    if std::env::var("WIRESPEED_RELR").is_ok_and(|v| v == "0") {
        return;
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != host || !target.ends_with("-linux-gnu") {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let source = out.join("relr_probe.c");
    let probe = out.join("relr_probe");
    // A relocated pointer, so the probe has a relative relocation to pack.
    let program = "static int x; int *p = &x; int main(void) { return *p; }\n";
    if std::fs::write(&source, program).is_err() {
        return;
    }
    let linked = Command::new("cc")
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&probe)
        .arg(&source)
        .output()
        .is_ok_and(|o| o.status.success());
    let runs = linked
        && Command::new(&probe)
            .status()
            .is_ok_and(|status| status.success());
    if runs {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
