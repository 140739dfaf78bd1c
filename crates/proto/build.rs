//! Compiles `proto/*.proto` with protox (a pure-Rust protobuf compiler), so a fresh
//! machine needs nothing but the Rust toolchain.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(&files, [&root])?;
    prost_build::Config::new()
        // Record payloads travel as `Bytes`: decoding a frame slices them out of the
        // receive buffer instead of copying.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
