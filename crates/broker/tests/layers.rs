//! The broker's modules import each other one way only: no circle. Read from
//! the sources (the paths each module names with `crate::`, `super::`,
//! `self::`, or a child in a `use`), test modules aside, so that a new import
//! that closes a circle fails here, naming the modules and who imports what.
//!
//! The layers, top to bottom: `broker` (the composition root: nothing
//! imports it), `front` (the listeners, behind the `Dispatch` seam), the
//! group coordinators (`groups`), the replica layer (`replica/`), the control
//! layer (`control/`), and the leaves (`responder`, `send`, `config`,
//! `metrics`, `net`, `auth`, ...); [`FORBIDDEN`] says which may not import
//! which.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn the_broker_modules_import_each_other_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 20, "read only {} modules", graph.len());
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "the broker's modules import each other in a circle:\n{}",
        describe(&graph, &circles)
    );
}

#[test]
fn nothing_imports_the_composition_root() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let importers: Vec<&String> = graph
        .iter()
        .filter(|(m, deps)| *m != "crate" && deps.contains("broker"))
        .map(|(m, _)| m)
        .collect();
    assert!(
        importers.is_empty(),
        "modules importing `broker`: {importers:?}"
    );
}

/// The layers, each with the ones it must not import (above it, or beside
/// it across a seam): the front end reaches the rest only through
/// `front::Dispatch`; the replica layer knows neither the front end nor the
/// group coordinators; the control layer knows only the leaves; the leaf
/// every layer answers through (`responder`) and the writer it uses
/// (`send`) know none of them.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "front",
        &["replica", "groups", "control::client", "control::host"],
    ),
    ("groups", &["front"]),
    ("replica", &["front", "groups"]),
    ("control", &["front", "replica", "groups"]),
    ("responder", &["front", "replica", "control", "groups"]),
    (
        "send",
        &["front", "replica", "control", "groups", "responder"],
    ),
];

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let within = |m: &str, layer: &str| m == layer || m.starts_with(&format!("{layer}::"));
    let mut wrong = Vec::new();
    for (module, deps) in &graph {
        for (layer, forbidden) in FORBIDDEN {
            if !within(module, layer) {
                continue;
            }
            for d in deps
                .iter()
                .filter(|d| forbidden.iter().any(|f| within(d, f)))
            {
                wrong.push(format!("{module} -> {d}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// The checker finds what it is meant to: a planted circle, through a
/// grouped `use`, a `super::` path and an inline `crate::` path.
#[test]
fn the_checker_finds_a_planted_circle() {
    let files = [
        ("a", "use crate::{b::X, c};\nfn f() {}\n"),
        ("b", "fn g() { crate::c::h(); }\n"),
        (
            "c",
            "use super::a::Y;\n#[cfg(test)]\nmod tests { use crate::b::Z; }\n",
        ),
        ("d", "use crate::a;\n"),
    ];
    let modules: BTreeSet<String> = ["crate", "a", "b", "c", "d"].map(String::from).into();
    let graph: Graph = files
        .iter()
        .map(|(m, text)| (m.to_string(), imports(m, text, &modules)))
        .collect();
    assert_eq!(graph["a"], ["b", "c"].map(String::from).into());
    assert_eq!(
        graph["c"],
        ["a"].map(String::from).into(),
        "test modules aside"
    );
    let circles = circles(&graph);
    assert_eq!(circles, vec![["a", "b", "c"].map(String::from).to_vec()]);
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path ("front::kafka", "crate" for lib.rs) -> the modules it imports.
fn module_graph(src: &Path) -> Graph {
    let files = sources(src);
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .filter(|p| p != "mod")
            .collect();
        match parts.as_slice() {
            [one] if one == "lib" || one == "main" => "crate".to_string(),
            _ => parts.join("::"),
        }
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    files
        .iter()
        .filter(|f| !f.ends_with("main.rs"))
        .map(|f| {
            let module = module_of(f);
            let text = std::fs::read_to_string(f).unwrap();
            let deps = imports(&module, &text, &modules);
            (module, deps)
        })
        .collect()
}

/// The modules `module`'s source names, itself and its own descendants aside.
fn imports(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    if module == "crate" {
        // lib.rs: the crate's face, declaring and re-exporting every module.
        return BTreeSet::new();
    }
    let code = without_comments(outside_tests(text));
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if is_path_start(&code, i) {
            expand("crate", &code[i + "crate::".len()..], &mut paths);
        }
    }
    let parent = module.rsplit_once("::").map_or("crate", |(p, _)| p);
    for (i, _) in code.match_indices("super::") {
        if is_path_start(&code, i) {
            expand(parent, &code[i + "super::".len()..], &mut paths);
        }
    }
    for (i, _) in code.match_indices("self::") {
        if is_path_start(&code, i) {
            expand(module, &code[i + "self::".len()..], &mut paths);
        }
    }
    // `use child::...` names a child module relative to this one.
    for line in code.lines() {
        let line = line.trim_start();
        let Some(rest) = line
            .strip_prefix("pub(crate) use ")
            .or_else(|| line.strip_prefix("pub use "))
            .or_else(|| line.strip_prefix("use "))
        else {
            continue;
        };
        let first: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let child = if module == "crate" {
            first.clone()
        } else {
            format!("{module}::{first}")
        };
        if modules.contains(&child) {
            expand(module, rest, &mut paths);
        }
    }
    paths
        .iter()
        .filter_map(|p| resolve(p, modules))
        .filter(|m| m != module && !m.starts_with(&format!("{module}::")))
        .collect()
}

/// Whether `crate::`/`super::`/`self::` at `i` starts a path (not the end of
/// another word such as `my_crate::`).
fn is_path_start(code: &str, i: usize) -> bool {
    code[..i]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
}

/// The full paths a use tree or path at the start of `rest` names, each
/// prefixed with `base` ("a::b::{C, d::E}" -> base::a::b::C, base::a::b::d::E).
fn expand(base: &str, rest: &str, out: &mut Vec<String>) {
    let mut path = base.to_string();
    let mut chars = rest.char_indices().peekable();
    let mut segment = String::new();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else if c == ':' && chars.peek().is_some_and(|(_, n)| *n == ':') {
            chars.next();
            if segment == "super" {
                path = path
                    .rsplit_once("::")
                    .map_or("crate".to_string(), |(p, _)| p.to_string());
            } else if segment != "self" && !segment.is_empty() {
                path = format!("{path}::{segment}");
            }
            segment.clear();
        } else if c == '{' && segment.is_empty() {
            for item in split_group(&rest[i + 1..]) {
                expand(&path, item.trim(), out);
            }
            return;
        } else {
            break;
        }
    }
    if !segment.is_empty() && segment != "self" {
        path = format!("{path}::{segment}");
    }
    out.push(path);
}

/// The top-level items of a `{...}` group whose text starts after the `{`.
fn split_group(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

/// The longest module that `path` ("crate::a::b::Item") lies in.
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let path = path.strip_prefix("crate::").unwrap_or(path);
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// A file's text before its `#[cfg(test)]` module (tests may reach across).
fn outside_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The text with `//` comments (doc comments too) removed.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) if !l[..at].contains('"') => &l[..at],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The circles of the graph (its strongly connected parts with more than one
/// module), each sorted.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        if found.iter().any(|c| c.contains(m)) || !reaches[m].contains(m) {
            continue;
        }
        let circle: Vec<String> = graph
            .keys()
            .filter(|o| reaches[m].contains(*o) && reaches[*o].contains(m))
            .cloned()
            .collect();
        if circle.len() > 1 {
            found.push(circle);
        }
    }
    found
}

fn describe(graph: &Graph, circles: &[Vec<String>]) -> String {
    let mut out = String::new();
    for circle in circles {
        out.push_str(&format!("circle: {}\n", circle.join(", ")));
        for m in circle {
            for d in graph[m].iter().filter(|d| circle.contains(d)) {
                out.push_str(&format!("  {m} -> {d}\n"));
            }
        }
    }
    out
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
