//! The documents point at what exists: every link of README.md, ARCHITECTURE.md, BENCHMARKS.md
//! and docs/ resolves (to a file, and to a heading when it names one), every code path they
//! name in backticks is in the repository, every document section a source comment cites
//! (`(BENCHMARKS.md, "Heading")`) is there, and the documents a newcomer reads once stay short
//! enough to be read once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents a reader is sent to.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut all: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"].iter().map(|d| root.join(d)).collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    all.extend(docs);
    all
}

/// A heading's anchor as GitHub makes it: lower case, spaces as hyphens, other punctuation
/// dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The headings of a markdown file (outside code blocks), as written.
fn headings(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut fenced = false;
    let mut all = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            all.push(line.trim_start_matches('#').trim().to_owned());
        }
    }
    all
}

/// The markdown links of a text: `](target)`.
fn links(text: &str) -> Vec<String> {
    text.split("](").skip(1).filter_map(|rest| rest.split(')').next()).map(str::to_owned).collect()
}

/// `path` with its `..` and `.` taken away, as a path inside the repository (`None`: outside it).
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<std::path::Component> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            std::path::Component::CurDir => {}
            part => parts.push(part),
        }
    }
    let resolved: PathBuf = parts.iter().collect();
    resolved.starts_with(root).then_some(resolved)
}

/// Every file under `dir` whose path ends with `tail`.
fn ends_with(dir: &Path, tail: &str, found: &mut bool) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.to_string_lossy().ends_with(&format!("/{tail}")) {
            *found = true;
            return;
        }
        if path.is_dir() {
            ends_with(&path, tail, found);
            if *found {
                return;
            }
        }
    }
}

#[test]
fn every_link_of_the_documents_resolves_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { doc.clone() } else { doc.parent().unwrap().join(file) };
            let Some(target) = inside(&root(), &target).filter(|t| t.exists()) else {
                broken.push(format!("{}: {link} (no such file in the repository)", doc.display()));
                continue;
            };
            if let Some(anchor) = anchor.filter(|_| target.extension().is_some_and(|e| e == "md")) {
                let anchors: BTreeSet<String> = headings(&target).iter().map(|h| slug(h)).collect();
                if !anchors.contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}

#[test]
fn every_code_path_the_documents_name_is_in_the_repository() {
    let root = root();
    let mut missing = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for quoted in text.split('`').skip(1).step_by(2) {
            let is_path = quoted.contains('/') || quoted.ends_with(".rs");
            let kinds = [".rs", ".md", ".toml", ".mjs", ".py", ".yml", ".yaml", ".json"];
            let plain = quoted.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
            if !is_path || !plain || quoted.starts_with('/') || !kinds.iter().any(|k| quoted.ends_with(k)) {
                continue;
            }
            // A path from the repository's root, from the document, or inside a crate's sources
            // (ARCHITECTURE.md names `gateway/callers.rs` within its crate).
            let mut found = [root.join(quoted), doc.parent().unwrap().join(quoted)]
                .iter()
                .any(|p| inside(&root, p).is_some_and(|p| p.exists()));
            if !found {
                ends_with(&root.join("crates"), quoted, &mut found);
            }
            if !found {
                ends_with(&root.join("tests"), quoted, &mut found);
            }
            if !found {
                missing.push(format!("{}: `{quoted}`", doc.display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths the documents name that do not exist: {missing:#?}");
}

#[test]
fn every_document_section_a_source_comment_cites_exists() {
    let root = root();
    let mut sources = Vec::new();
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() && entry.file_name() != "target" {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    rust_files(&root.join("crates"), &mut sources);
    let mut missing = Vec::new();
    for source in sources {
        // Comments joined across lines: a citation may wrap.
        let text = std::fs::read_to_string(&source).unwrap();
        let joined: String = text
            .lines()
            .map(|l| l.trim_start().trim_start_matches("//!").trim_start_matches("///").trim_start_matches("//").trim())
            .collect::<Vec<_>>()
            .join(" ");
        for doc in ["BENCHMARKS.md", "ARCHITECTURE.md", "README.md"] {
            for rest in joined.split(&format!("{doc}, \"")).skip(1) {
                let Some(cited) = rest.split('"').next() else { continue };
                let anchors: BTreeSet<String> = headings(&root.join(doc)).iter().map(|h| slug(h)).collect();
                if !anchors.contains(&slug(cited)) {
                    missing.push(format!("{}: {doc}, \"{cited}\"", source.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "sections cited that the documents do not have: {missing:#?}");
}

/// The documents a newcomer reads first, and the most lines each may have: the details go to the
/// `docs/` page of their topic, the history to git.
const LENGTHS: [(&str, usize); 3] = [("ARCHITECTURE.md", 399), ("README.md", 300), ("BENCHMARKS.md", 400)];

#[test]
fn the_documents_a_newcomer_reads_first_stay_within_their_lengths() {
    let root = root();
    let mut long = Vec::new();
    for (doc, most) in LENGTHS {
        let lines = std::fs::read_to_string(root.join(doc)).unwrap().lines().count();
        if lines > most {
            long.push(format!("{doc}: {lines} lines, at most {most}"));
        }
    }
    assert!(long.is_empty(), "documents longer than a newcomer reads at once: {long:#?}");
}
