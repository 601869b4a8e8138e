//! The shape of the source tree, checked on every test run:
//!
//! - inside each crate, the imports between files run one way: no import circle (ARCHITECTURE.md,
//!   "Layers inside a crate");
//! - no source file is longer than [`MAX_LINES`] lines, tests aside;
//! - no two files of a crate share a name (`mod.rs` aside);
//! - no file imports all of its parent (`use super::*`) outside its tests: what a file uses
//!   of the module around it is named, so a reader sees which part of a type it touches.
//!
//! An import is any path in code that starts with `crate::`, `super::`, `self::`, a child module
//! or a name the file imports (in a `use` tree or written out in an expression), resolved to the
//! file that defines what it names: through the module files, then through the `use`
//! declarations of the file it lands in (a re-export, or a parent's import that a child reaches
//! with `super::`). A `pub use` only forwards a name (a facade) and is no import of the file that
//! writes it, unless that file's own code uses the name too. Declaring a child module (`mod x;`)
//! is not an import, nor is a method call (it names no path). Test code (`#[cfg(test)]` items
//! and modules) is left out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The most lines a source file may have, its `#[cfg(test)]` module aside.
const MAX_LINES: usize = 600;

#[test]
fn no_crate_has_an_import_circle() {
    let mut report = String::new();
    for krate in crates() {
        let graph = ImportGraph::of_crate(&krate);
        for circle in graph.circles() {
            report.push_str(&format!("\n{}: a circle of {} files:\n", krate.display(), circle.len()));
            for (from, to, path) in graph.edges_within(&circle) {
                report.push_str(&format!("    {from} -> {to}   ({path})\n"));
            }
        }
    }
    assert!(report.is_empty(), "imports must run one way inside a crate (ARCHITECTURE.md):{report}");
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let mut long = Vec::new();
    for krate in crates() {
        let graph = ImportGraph::of_crate(&krate);
        for file in graph.files.values().filter(|f| !f.is_test && f.lines_outside_tests > MAX_LINES) {
            long.push(format!("{} ({} lines)", file.path.display(), file.lines_outside_tests));
        }
    }
    assert!(long.is_empty(), "split these by responsibility (at most {MAX_LINES} lines, tests aside): {long:?}");
}

#[test]
fn no_two_files_of_a_crate_share_a_name() {
    let mut twice = Vec::new();
    for krate in crates() {
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for path in rust_files(&krate.join("src")) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !["mod.rs", "lib.rs", "main.rs"].contains(&name.as_str()) {
                seen.entry(name).or_default().push(path.display().to_string());
            }
        }
        twice.extend(seen.into_values().filter(|paths| paths.len() > 1));
    }
    assert!(twice.is_empty(), "name each file by what it holds, once per crate: {twice:?}");
}

#[test]
fn no_file_imports_all_of_its_parent_outside_tests() {
    let mut globbing = Vec::new();
    for krate in crates() {
        let graph = ImportGraph::of_crate(&krate);
        for file in graph.files.values().filter(|f| !f.is_test && f.super_glob) {
            globbing.push(file.path.display().to_string());
        }
    }
    assert!(
        globbing.is_empty(),
        "name what these files use of their parent module instead of `use super::*`: {globbing:?}"
    );
}

/// The check finds what it should: a circle through `super::`, a re-export and a path in an
/// expression; none where a child is only declared, or where test code reaches up.
#[test]
fn the_check_finds_circles_and_only_circles() {
    let dir = tempfile_dir();
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("src/lib.rs", "mod a;\nmod b;\npub use a::Alpha;\n// use crate::b::Beta; a comment is no import\n");
    write("src/a/mod.rs", "mod child;\npub struct Alpha;\nfn f() { let s = \"crate::b::Beta\"; }\n");
    write("src/a/child.rs", "use super::Alpha;\n");
    write(
        "src/b.rs",
        "pub struct Beta;\n#[cfg(test)]\nmod tests {\n    use crate::Alpha;\n}\n#[cfg(test)]\nuse crate::a::Alpha;\n",
    );
    let graph = ImportGraph::of_crate(&dir);
    assert!(graph.circles().is_empty(), "{:?}", graph.edges);
    assert!(graph.edges.contains(&("a/child.rs".into(), "a/mod.rs".into(), "super::Alpha".into())));
    assert!(!graph.files.values().any(|f| f.super_glob));

    // `use super::*` is found outside tests, and only there.
    write("src/a/child.rs", "use super::*;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n");
    let graph = ImportGraph::of_crate(&dir);
    assert!(graph.files["a/child.rs"].super_glob);
    write("src/a/child.rs", "use super::Alpha;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n");
    assert!(!ImportGraph::of_crate(&dir).files["a/child.rs"].super_glob);

    // b reaches a through the crate root's re-export, a reaches b in an expression: a circle.
    write("src/b.rs", "use crate::Alpha;\npub struct Beta;\n");
    write("src/a/mod.rs", "mod child;\npub struct Alpha;\nfn f() -> crate::b::Beta { crate::b::Beta }\n");
    let graph = ImportGraph::of_crate(&dir);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{:?}", graph.edges);
    assert_eq!(circles[0], BTreeSet::from(["a/mod.rs".to_string(), "b.rs".to_string()]));

    // A child that names its parent's import (`super::Beta`, imported in a/mod.rs) depends on b.
    write("src/a/mod.rs", "mod child;\nuse crate::b::Beta;\npub struct Alpha;\n");
    write("src/a/child.rs", "use super::{Alpha, Beta};\n");
    let graph = ImportGraph::of_crate(&dir);
    assert!(graph.edges.contains(&("a/child.rs".into(), "b.rs".into(), "super::Beta".into())));

    // A parent that re-exports a child's item and uses it itself depends on the child: with the
    // child naming the parent, a circle. A plain re-export (a facade) is no import.
    write("src/a/mod.rs", "mod child;\npub use child::Gamma;\npub struct Alpha;\n");
    write("src/a/child.rs", "use super::Alpha;\npub struct Gamma;\n");
    assert!(ImportGraph::of_crate(&dir).circles().is_empty());
    write("src/a/mod.rs", "mod child;\npub use child::Gamma;\npub struct Alpha(Gamma);\n");
    assert_eq!(ImportGraph::of_crate(&dir).circles().len(), 1);

    // A path through an imported module (`use crate::b; … b::Beta`) counts against that module.
    write("src/a/mod.rs", "mod child;\nuse crate::b;\npub struct Alpha;\nfn f() -> b::Beta { b::Beta }\n");
    write("src/a/child.rs", "use super::Alpha;\n");
    let graph = ImportGraph::of_crate(&dir);
    assert!(graph.edges.contains(&("a/mod.rs".into(), "b.rs".into(), "b::Beta".into())), "{:?}", graph.edges);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("taskgate-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every crate of the workspace.
fn crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("crates/")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("src").is_dir())
        .collect();
    crates.sort();
    assert!(crates.len() >= 8, "found only {crates:?}");
    crates
}

/// One source file: its module path, what it imports, and whether it is test code.
struct SourceFile {
    path: PathBuf,
    /// Its module's path from the crate root (`a/b.rs` and `a/b/mod.rs` are `["a", "b"]`).
    module: Vec<String>,
    /// Every path the file's non-test code names, as written, with the inline modules it sits in.
    paths: Vec<(Vec<String>, Vec<String>)>,
    /// The names its `use` declarations bring in (an alias, or the last segment), to their paths.
    uses: HashMap<String, (Vec<String>, Vec<String>)>,
    /// Child modules it declares under `#[cfg(test)]`.
    test_children: Vec<String>,
    /// Its code outside tests imports all of its parent module (`use super::*`).
    super_glob: bool,
    is_test: bool,
    lines_outside_tests: usize,
}

/// The files of one crate and the imports between them.
struct ImportGraph {
    files: BTreeMap<String, SourceFile>,
    /// `(from, to, the path as written)`, file names relative to `src/`.
    edges: BTreeSet<(String, String, String)>,
}

impl ImportGraph {
    fn of_crate(krate: &Path) -> Self {
        let src = krate.join("src");
        let mut files = BTreeMap::new();
        for path in rust_files(&src) {
            let name = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap();
            files.insert(name.clone(), SourceFile::read(path, module_of(&name), &text));
        }
        // A file declared as a test module is test code, and so is every file below it.
        let test_modules: Vec<Vec<String>> = files
            .values()
            .flat_map(|f| f.test_children.iter().map(|child| [f.module.clone(), vec![child.clone()]].concat()))
            .collect();
        for file in files.values_mut() {
            file.is_test = test_modules.iter().any(|t| file.module.starts_with(t));
        }
        let by_module: HashMap<Vec<String>, String> =
            files.iter().map(|(name, f)| (f.module.clone(), name.clone())).collect();
        let mut edges = BTreeSet::new();
        for (name, file) in files.iter().filter(|(_, f)| !f.is_test) {
            for (inline, path) in &file.paths {
                if let Some(target) = resolve(&files, &by_module, name, inline, path, 0) {
                    if &target != name && !files[&target].is_test {
                        edges.insert((name.clone(), target, path.join("::")));
                    }
                }
            }
        }
        ImportGraph { files, edges }
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<BTreeSet<String>> {
        let names: Vec<&String> = self.files.keys().collect();
        let index_of: HashMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
        for (from, to, _) in &self.edges {
            next[index_of[from]].push(index_of[to]);
        }
        let mut tarjan = Tarjan { next: &next, index: vec![None; names.len()], ..Tarjan::default() };
        for v in 0..names.len() {
            if tarjan.index[v].is_none() {
                tarjan.visit(v);
            }
        }
        tarjan
            .components
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| c.into_iter().map(|i| names[i].clone()).collect())
            .collect()
    }

    fn edges_within(&self, circle: &BTreeSet<String>) -> Vec<(String, String, String)> {
        self.edges.iter().filter(|(from, to, _)| circle.contains(from) && circle.contains(to)).cloned().collect()
    }
}

#[derive(Default)]
struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: HashMap<usize, usize>,
    stack: Vec<usize>,
    on_stack: BTreeSet<usize>,
    counter: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low.insert(v, self.counter);
        self.counter += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        for &w in &self.next[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    let low = self.low[&v].min(self.low[&w]);
                    self.low.insert(v, low);
                }
                Some(index) if self.on_stack.contains(&w) => {
                    let low = self.low[&v].min(index);
                    self.low.insert(v, low);
                }
                Some(_) => {}
            }
        }
        if Some(self.low[&v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `a/b.rs`, `a/b/mod.rs` → `["a", "b"]`; `lib.rs`, `main.rs` → `[]`; `bin/x.rs` → `["bin", "x"]`.
fn module_of(name: &str) -> Vec<String> {
    let stem = name.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main")) {
        parts.pop();
    }
    parts
}

/// The file a path names, starting from the file `from` (inside its inline modules `inline`).
fn resolve(
    files: &BTreeMap<String, SourceFile>,
    by_module: &HashMap<Vec<String>, String>,
    from: &str,
    inline: &[String],
    path: &[String],
    depth: usize,
) -> Option<String> {
    if depth > 8 {
        return None;
    }
    let here = [files[from].module.clone(), inline.to_vec()].concat();
    let (mut module, rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (here, &path[1..]),
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let mut module = here;
            for _ in 0..supers {
                module.pop()?;
            }
            (module, &path[supers..])
        }
        // A path relative to the module it is written in (`child::Item`), where `child` is a
        // module, or one through a name the file imports (`use crate::tasks; … tasks::Item`).
        Some(first) => {
            let child = [here.clone(), vec![first.to_string()]].concat();
            if by_module.contains_key(&child) {
                (here, path)
            } else if let Some((inline, imported)) = files[from].uses.get(first).filter(|_| path.len() > 1) {
                let through = [imported.clone(), path[1..].to_vec()].concat();
                if through.first() == Some(&path[0]) {
                    return None;
                }
                return resolve(files, by_module, from, inline, &through, depth + 1);
            } else {
                return None;
            }
        }
        None => return None,
    };
    // Down through the module files as far as they go.
    let mut rest = rest;
    while let Some(segment) = rest.first() {
        let mut child = module.clone();
        child.push(segment.clone());
        if by_module.contains_key(&child) {
            module = child;
            rest = &rest[1..];
        } else {
            break;
        }
    }
    // The deepest existing file: inline modules have no file of their own.
    let mut file_module = module.clone();
    while !by_module.contains_key(&file_module) {
        file_module.pop()?;
    }
    let file = by_module[&file_module].clone();
    // A name the file only imports (a re-export, or a parent's import) is the imported file's.
    if let Some(name) = rest.first() {
        if file_module == module {
            if let Some((inline, target)) = files[&file].uses.get(name) {
                let target = [target.clone(), rest[1..].to_vec()].concat();
                return resolve(files, by_module, &file, inline, &target, depth + 1).or(Some(file));
            }
        }
    }
    Some(file)
}

impl SourceFile {
    fn read(path: PathBuf, module: Vec<String>, text: &str) -> Self {
        let (tokens, lines) = tokens(&strip_comments_and_literals(text));
        let mut file = SourceFile {
            path,
            module,
            paths: Vec::new(),
            uses: HashMap::new(),
            test_children: Vec::new(),
            super_glob: false,
            is_test: false,
            lines_outside_tests: text.lines().count(),
        };
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut re_exports: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
        let mut bare: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut depth = 0usize;
        let mut test_attribute = false;
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i].as_str();
            match token {
                "#" if tokens.get(i + 1).is_some_and(|t| t == "[") => {
                    let end = matching(&tokens, i + 1);
                    let attribute = &tokens[i + 2..end];
                    if attribute.first().is_some_and(|t| t == "cfg")
                        && attribute.iter().any(|t| t == "test")
                        && !attribute.iter().any(|t| t == "not")
                    {
                        test_attribute = true;
                    }
                    i = end + 1;
                    continue;
                }
                _ if test_attribute => {
                    // Skip the whole item the attribute is on.
                    test_attribute = false;
                    let start_line = lines[i];
                    let end = item_end(&tokens, i);
                    if let Some(m) = (i..end).find(|&j| tokens[j] == "mod") {
                        if end == m + 2 && tokens[end] == ";" {
                            file.test_children.push(tokens[m + 1].clone());
                        }
                    }
                    if depth == 0 && inline.is_empty() {
                        // A test module at the top level does not count toward the file's length.
                        if tokens[i..end].iter().any(|t| t == "mod") {
                            let end_line = lines[end.min(lines.len() - 1)];
                            file.lines_outside_tests -= end_line.saturating_sub(start_line) + 1;
                        }
                    }
                    i = end + 1;
                    continue;
                }
                "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                    inline.push((tokens[i + 1].clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                }
                "use" => {
                    let end = (i..tokens.len()).find(|&j| tokens[j] == ";").unwrap_or(tokens.len());
                    let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                    // `pub use` forwards a name (a facade): it is an import of this file only if
                    // this file's own code uses the name too (see below).
                    let re_export = i > 0 && (tokens[i - 1] == "pub" || tokens[i - 1] == ")");
                    for (path, alias) in use_tree(&tokens[i + 1..end], Vec::new()) {
                        if alias.is_none() && path == ["super"] {
                            file.super_glob = true;
                        }
                        if re_export {
                            if let Some(alias) = &alias {
                                re_exports.push((alias.clone(), names.clone(), path.clone()));
                            }
                        } else {
                            file.paths.push((names.clone(), path.clone()));
                        }
                        if let Some(alias) = alias {
                            file.uses.insert(alias, (names.clone(), path));
                        }
                    }
                    i = end + 1;
                    continue;
                }
                _ if is_ident(token)
                    && tokens.get(i + 1).is_some_and(|t| t == "::")
                    && !(i > 0 && tokens[i - 1] == "::") =>
                {
                    let mut path = vec![token.to_string()];
                    let mut j = i + 1;
                    while tokens.get(j).is_some_and(|t| t == "::") && tokens.get(j + 1).is_some_and(|t| is_ident(t)) {
                        path.push(tokens[j + 1].clone());
                        j += 2;
                    }
                    file.paths.push((inline.iter().map(|(n, _)| n.clone()).collect(), path));
                    i = j;
                    continue;
                }
                _ if is_ident(token) => {
                    bare.insert(token.to_string());
                }
                _ => {}
            }
            i += 1;
        }
        // A name the file re-exports and also uses in its own code is an import of it.
        for (alias, names, path) in re_exports {
            if bare.contains(&alias) {
                file.paths.push((names, path));
            }
        }
        file
    }
}

/// The paths a `use` tree names, each with the name it brings in (`None` for a glob).
fn use_tree(tokens: &[String], prefix: Vec<String>) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut path = prefix.clone();
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i].as_str() {
            "::" => {}
            "{" => {
                let end = matching(tokens, i);
                let mut start = i + 1;
                let mut depth = 0;
                for j in i + 1..=end {
                    match tokens[j].as_str() {
                        "{" => depth += 1,
                        "}" if depth > 0 => depth -= 1,
                        "," | "}" if depth == 0 => {
                            if start < j {
                                out.extend(use_tree(&tokens[start..j], path.clone()));
                            }
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                return out;
            }
            "*" => {
                out.push((path, None));
                return out;
            }
            "as" => {
                let alias = tokens.get(i + 1).cloned();
                out.push((path, alias.filter(|a| a != "_")));
                return out;
            }
            "self" if !path.is_empty() => {
                let name = path.last().cloned();
                out.push((path, name));
                return out;
            }
            ident if is_ident(ident) => path.push(ident.to_string()),
            _ => {}
        }
        i += 1;
    }
    if path.len() > prefix.len() {
        let name = path.last().cloned();
        out.push((path, name));
    }
    out
}

fn is_ident(token: &str) -> bool {
    token.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The index of the bracket that closes the one at `open`.
fn matching(tokens: &[String], open: usize) -> usize {
    let (o, c) = match tokens[open].as_str() {
        "[" => ("[", "]"),
        "(" => ("(", ")"),
        _ => ("{", "}"),
    };
    let mut depth = 0;
    for (j, token) in tokens.iter().enumerate().skip(open) {
        if token == o {
            depth += 1;
        } else if token == c {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    tokens.len() - 1
}

/// The last token of the item starting at `start`: its `;`, or the `}` closing its first block.
fn item_end(tokens: &[String], start: usize) -> usize {
    let mut j = start;
    while j < tokens.len() {
        match tokens[j].as_str() {
            ";" => return j,
            "{" => return matching(tokens, j),
            "(" | "[" => j = matching(tokens, j),
            _ => {}
        }
        j += 1;
    }
    tokens.len() - 1
}

/// The code with comments removed and string and character literals emptied, lines kept.
fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !chars.get(i.wrapping_sub(1)).is_some_and(|p| p.is_alphanumeric() || *p == '_')
            && {
                let s = if c == 'b' { i + 2 } else { i + 1 };
                let hashes = chars[s..].iter().take_while(|h| **h == '#').count();
                chars.get(s + hashes) == Some(&'"')
            }
        {
            let s = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[s..].iter().take_while(|h| **h == '#').count();
            i = s + hashes + 1;
            out.push_str("\"\"");
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).filter(|h| **h == '#').count() == hashes {
                    i += 1 + hashes;
                    break;
                }
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            continue;
        } else if c == '"' {
            i += 1;
            out.push_str("\"\"");
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            continue;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{..}'), or a lifetime ('a), which stays.
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
                continue;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
                continue;
            }
            out.push(c);
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and single punctuation, with the line (1-based) each stands on.
fn tokens(code: &str) -> (Vec<String>, Vec<usize>) {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut lines = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let before = out.len();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
        if out.len() > before {
            lines.push(line);
        }
    }
    (out, lines)
}
