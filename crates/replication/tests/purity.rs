//! The crate stays pure: its only dependency is the protocol crate without its
//! frame codec (the one part of it on tokio), and no source outside its tests
//! does I/O, reads a clock, spawns, or keeps process-wide state. A rule that
//! needs any of these belongs in the broker's shell, which passes the result in.

use std::path::{Path, PathBuf};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// What no rule may name, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("tokio", "a runtime"),
    ("std::fs", "file I/O"),
    ("std::net", "network I/O"),
    ("std::io", "I/O"),
    ("std::process", "processes"),
    ("std::thread", "threads"),
    ("std::env", "the environment"),
    ("Instant::now", "the monotonic clock (time is passed in)"),
    ("SystemTime", "the wall clock"),
    ("wall_clock_ms", "the wall clock"),
    ("static ", "process-wide state"),
    ("thread_local!", "thread-wide state"),
    ("Atomic", "shared mutable state"),
    ("Mutex", "shared mutable state"),
    ("RwLock", "shared mutable state"),
    ("rand::", "randomness (the shell decides)"),
];

#[test]
fn the_only_dependency_is_the_protocol_crate_without_its_frame_codec() {
    let manifest = std::fs::read_to_string(Path::new(MANIFEST_DIR).join("Cargo.toml")).unwrap();
    let deps: Vec<&str> = section(&manifest, "[dependencies]")
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(
        deps,
        ["syncline-proto = { path = \"../proto\", default-features = false }"],
        "crates/replication/Cargo.toml [dependencies]"
    );
    assert!(
        section(&manifest, "[build-dependencies]").next().is_none(),
        "no build script dependencies"
    );
}

#[test]
fn no_source_does_io_reads_a_clock_or_keeps_process_wide_state() {
    let mut found = Vec::new();
    for file in sources(&Path::new(MANIFEST_DIR).join("src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in outside_tests(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for (word, what) in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word} ({what})", file.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "impure code:\n{}", found.join("\n"));
}

/// The checker sees what it is meant to: a planted line is found.
#[test]
fn the_checker_finds_a_planted_clock_read() {
    let planted = "fn f() {}\nlet now = std::time::Instant::now();\n#[cfg(test)]\nmod tests {\n    static X: u8 = 0;\n}\n";
    let outside = outside_tests(planted);
    assert!(outside.contains("Instant::now"));
    assert!(!outside.contains("static "), "test modules are exempt");
}

/// The lines of a manifest section, up to the next section.
fn section<'a>(manifest: &'a str, header: &'a str) -> impl Iterator<Item = &'a str> {
    manifest
        .lines()
        .skip_while(move |l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
}

/// A file's text before its `#[cfg(test)]` module (tests may read a clock to
/// make a base instant).
fn outside_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    }
}

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}
