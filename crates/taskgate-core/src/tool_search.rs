//! Tool search: a BM25 index over the catalog's tools, queried with a need in plain words.
//!
//! Each tool is one document: its name and title (twice: a name says most), its description
//! and its parameters' names. [`ToolWords`] splits them into words as tool names are written
//! (`create_issue`, `createIssue`, `github__create-issue` → `github create issue`), drops
//! English stop words and stems the rest (Snowball, `rust-stemmers`); the `bm25` crate fits
//! BM25 to the catalog and weighs each word of each tool (its `Embedder`). The index keeps
//! those weights in postings lists, one per word, and a query adds up idf × weight over the
//! postings of its words only (the crate's own `Scorer` gathers every candidate into a set and
//! sorts them all: 31 ms at p99 for 10,000 tools). The index is built once per catalog
//! generation. What a caller may not call is skipped as results are read, so a search never
//! shows it.

use std::sync::Arc;

use std::collections::HashMap;

use bm25::{Embedder, EmbedderBuilder};
use parking_lot::Mutex;
use serde_json::Value;
use taskgate_protocol::mcp::ToolView;

/// The most results one search returns.
pub const MAX_RESULTS: usize = 20;
/// The longest query read (longer ones are cut).
pub const MAX_QUERY_BYTES: usize = 1024;

/// The index of one catalog generation.
pub struct ToolIndex {
    embedder: Embedder<u32, ToolWords>,
    /// Each word's tools, with the word's BM25 weight in each, and the word's idf.
    postings: HashMap<u32, (f32, Vec<(u32, f32)>)>,
    /// The gateway's names, by document id.
    names: Vec<String>,
    generation: u64,
}

impl ToolIndex {
    /// The index of `tools` (the gateway's name and the tool), for catalog `generation`.
    pub fn build<'a>(tools: impl Iterator<Item = (&'a str, &'a ToolView)>, generation: u64) -> ToolIndex {
        let (names, documents): (Vec<String>, Vec<String>) =
            tools.map(|(name, tool)| (name.to_owned(), document(name, tool))).unzip();
        let corpus: Vec<&str> = documents.iter().map(String::as_str).collect();
        // k1 above the usual 1.2: a word a tool's text says again (its name, then its
        // description) counts more (measured on the benchmark's needs: recall@5 0.772 → 0.780).
        let embedder = EmbedderBuilder::with_tokenizer_and_fit_to_corpus(ToolWords::new(), &corpus).k1(2.0).build();
        let mut postings: HashMap<u32, (f32, Vec<(u32, f32)>)> = HashMap::new();
        for (id, text) in documents.iter().enumerate() {
            // One entry per occurrence, each with the word's weight in the tool: one posting.
            let mut seen = std::collections::HashSet::new();
            for word in embedder.embed(text).iter().filter(|w| seen.insert(w.index)) {
                postings.entry(word.index).or_default().1.push((id as u32, word.value));
            }
        }
        // BM25's idf, as the crate's scorer has it.
        let n = names.len() as f32;
        for (idf, tools) in postings.values_mut() {
            let having = tools.len() as f32;
            *idf = (1.0 + (n - having + 0.5) / (having + 0.5)).ln();
        }
        ToolIndex { embedder, postings, names, generation }
    }

    /// The catalog generation it was built from.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Tools indexed.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds no tool.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The best `limit` matches for `query` among the tools `keep` lets through, best first,
    /// with their scores.
    pub fn search(&self, query: &str, limit: usize, mut keep: impl FnMut(&str) -> bool) -> Vec<(&str, f32)> {
        let mut end = query.len().min(MAX_QUERY_BYTES);
        while !query.is_char_boundary(end) {
            end -= 1;
        }
        let query = &query[..end];
        // The need's own words count whole; the synonyms they bring, a part.
        // (A word said twice counts twice, as BM25 scores a query.)
        let mut words: HashMap<u32, f32> = HashMap::new();
        for word in self.embedder.embed(query).iter() {
            *words.entry(word.index).or_default() += 1.0;
        }
        if let Some(more) = expand(query) {
            let own = words.clone();
            for word in self.embedder.embed(&more).iter() {
                *words.entry(word.index).or_default() += SYNONYM_WEIGHT;
            }
            // The query's own words are in the expansion too: counted once, whole.
            for (word, count) in own {
                *words.entry(word).or_default() -= SYNONYM_WEIGHT * count;
            }
        }
        let mut scores = vec![0.0f32; self.names.len()];
        let mut touched: Vec<u32> = Vec::new();
        for (word, weight) in words {
            let Some((idf, tools)) = self.postings.get(&word) else { continue };
            for &(id, value) in tools {
                let score = &mut scores[id as usize];
                if *score == 0.0 {
                    touched.push(id);
                }
                *score += weight * idf * value;
            }
        }
        // The best first: a few times `limit` picked out, the rest sorted only if `keep` turns
        // enough of those away.
        let by_score = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]);
        let head = (limit * 4).max(16);
        if touched.len() > head {
            touched.select_nth_unstable_by(head, by_score);
            touched[..head].sort_unstable_by(by_score);
        } else {
            touched.sort_unstable_by(by_score);
        }
        let mut sorted_all = touched.len() <= head;
        let mut found = Vec::with_capacity(limit);
        let mut next = 0;
        while found.len() < limit {
            if next == head && !sorted_all {
                touched[head..].sort_unstable_by(by_score);
                sorted_all = true;
            }
            let Some(&id) = touched.get(next) else { break };
            next += 1;
            let name = self.names[id as usize].as_str();
            if keep(name) {
                found.push((name, scores[id as usize]));
            }
        }
        found
    }
}

/// What the synonyms a need brings count for, against its own words.
const SYNONYM_WEIGHT: f32 = 0.3;

/// The tools a search of `catalog` finds for `query`, best first, as `find_tools` shows them
/// (before an endpoint renames them): name, title, description, input schema and upstream.
/// `keep` says which of the catalog's entries the caller may call.
pub fn matches(
    catalog: &crate::catalog::Catalog,
    index: &ToolIndex,
    query: &str,
    limit: usize,
    mut keep: impl FnMut(&str, &crate::catalog::ToolEntry) -> bool,
) -> Vec<Value> {
    let found = index.search(query, limit, |name| catalog.resolve(name).is_some_and(|e| keep(name, e)));
    let mut tools = Vec::with_capacity(found.len());
    for (name, _score) in found {
        let Some(entry) = catalog.resolve(name) else { continue };
        let raw = &entry.tool.raw;
        let mut tool = serde_json::Map::new();
        tool.insert("name".into(), Value::from(name));
        if let Some(title) = raw.get("title") {
            tool.insert("title".into(), title.clone());
        }
        tool.insert("description".into(), raw.get("description").cloned().unwrap_or(Value::Null));
        let schema = raw.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        tool.insert("inputSchema".into(), schema);
        tool.insert("upstream".into(), Value::from(entry.upstream.as_str()));
        tools.push(Value::Object(tool));
    }
    tools
}

/// One [`SearchIndex`] per tool catalog: the base one, and one per set of relayed client
/// capabilities (an upstream may offer tools only to clients declaring what they need, MCP
/// Apps' hosts among them). An index goes with its catalog.
#[derive(Default)]
pub struct SearchIndexes {
    held: Mutex<Vec<(std::sync::Weak<SharedCatalog>, Arc<SearchIndex>)>>,
}

type SharedCatalog = parking_lot::RwLock<crate::catalog::Catalog>;

impl SearchIndexes {
    /// The index of `catalog`.
    pub fn of(&self, catalog: &Arc<SharedCatalog>) -> Arc<SearchIndex> {
        let mut held = self.held.lock();
        held.retain(|(of, _)| of.strong_count() > 0);
        if let Some((_, index)) = held.iter().find(|(of, _)| std::ptr::eq(of.as_ptr(), Arc::as_ptr(catalog))) {
            return index.clone();
        }
        let index = Arc::new(SearchIndex::default());
        held.push((Arc::downgrade(catalog), index.clone()));
        index
    }
}

/// The index of the latest catalog generation it was asked for, built the first time after a
/// change, on a thread of the blocking pool and outside every lock: searches meanwhile read the
/// index before (or, when there is none yet, wait for the one being built).
#[derive(Default)]
pub struct SearchIndex {
    current: Mutex<Option<Arc<ToolIndex>>>,
    /// An index is being built (one at a time).
    building: std::sync::atomic::AtomicBool,
}

impl SearchIndex {
    /// The index held, if it is of `generation`.
    pub fn of(&self, generation: u64) -> Option<Arc<ToolIndex>> {
        self.current.lock().clone().filter(|index| index.generation == generation)
    }

    /// The index held, whatever its generation.
    pub fn latest(&self) -> Option<Arc<ToolIndex>> {
        self.current.lock().clone()
    }

    /// The index for `generation`, built from `tools` (a copy of the catalog's entries: the
    /// gateway's name and the tool) when the one held is older. While another build runs, the
    /// index held serves, if there is one.
    pub async fn for_generation(&self, generation: u64, tools: Vec<(String, ToolView)>) -> Arc<ToolIndex> {
        use std::sync::atomic::Ordering;
        if let Some(index) = self.of(generation) {
            return index;
        }
        let held = self.current.lock().clone();
        if self.building.swap(true, Ordering::AcqRel) {
            if let Some(held) = held {
                return held;
            }
        }
        let built = tokio::task::spawn_blocking(move || {
            Arc::new(ToolIndex::build(tools.iter().map(|(name, tool)| (name.as_str(), tool)), generation))
        })
        .await;
        self.building.store(false, Ordering::Release);
        let index = built.expect("building the index does not panic");
        let mut current = self.current.lock();
        if current.as_ref().is_none_or(|held| held.generation < generation) {
            *current = Some(index.clone());
        }
        index
    }
}

/// Words a need may say where a tool's description says another: each group's words stand for
/// one another. A query is searched with the other words of every group one of its words is in,
/// which count [`SYNONYM_WEIGHT`] of its own (the documents are left as their servers wrote
/// them). The groups were written from the misses of half of the benchmark's needs; the other
/// half measures them (BENCHMARKS.md, "Large catalogs").
const SYNONYMS: &[&[&str]] = &[
    &["remember", "memorize", "memory", "knowledge", "fact", "observation", "know", "stored"],
    &["forget", "delete", "remove", "drop", "erase", "discard"],
    &["folder", "directory", "dir"],
    &["picture", "image", "photo", "png", "jpg", "logo"],
    &["link", "url", "webpage", "website", "site", "web", "http", "https"],
    &["google", "search", "lookup", "online", "internet"],
    &["repo", "repos", "repository"],
    &["pr", "prs", "pull", "merge"],
    &["bug", "issue", "ticket"],
    &["approve", "review", "lgtm", "reviewers"],
    &["ci", "status", "checks", "build"],
    &["commit", "commits", "log", "history"],
    &["switch", "checkout", "branch"],
    &["unstage", "reset", "undo"],
    &["edit", "change", "modify", "update", "replace"],
    &["compare", "diff", "difference", "side"],
    &["move", "rename"],
    &["save", "write", "store"],
    &["show", "read", "view", "open", "display", "contents", "inside"],
    &["spreadsheet", "workbook", "excel", "xlsx"],
    &["sheet", "worksheet", "tab"],
    &["column", "row", "range", "cell", "cells"],
    &["bold", "format", "formatting", "highlight", "color", "style", "currency", "font"],
    &["pivot", "summarize", "aggregate", "groupby", "totals"],
    &["freeze", "pane", "panes"],
    &["docs", "documentation", "reference", "manual", "library", "api"],
    &["examples", "snippets", "code", "usage"],
    &["paper", "papers", "arxiv", "article", "publication", "research"],
    &["download", "fetch", "retrieve", "grab"],
    &["bibtex", "citation", "citations", "cite"],
    &["kube", "kubernetes", "k8s", "cluster", "kubectl"],
    &["pod", "pods", "container", "containers"],
    &["context", "kubeconfig"],
    &["tunnel", "port", "forward", "localhost"],
    &["crd", "crds", "kinds", "resources"],
    &["scrape", "crawl", "extract", "markdown"],
    &["watch", "monitor", "track", "alert", "changes"],
    &["directions", "route", "walk", "walking", "bike", "bicycling", "drive", "driving", "transit", "travel"],
    &["coordinates", "latitude", "longitude", "geocode", "address", "location"],
    &["elevation", "altitude", "height", "sea"],
    &["nearby", "near", "places", "shops", "restaurants", "cafes"],
    &["time", "clock", "timezone", "hours", "now", "date"],
    &["add", "sum", "plus", "calculate", "numbers"],
    &["message", "messages", "post", "chat", "saying", "said"],
    &["user", "account", "profile", "person", "people", "member"],
    &["thread", "replies", "reply"],
    &["react", "reaction", "emoji"],
    &["browser", "navigate", "visit", "goto"],
    &["click", "press", "tap", "button"],
    &["type", "fill", "input", "form"],
    &["javascript", "evaluate", "script", "js"],
    &["element", "snapshot", "accessibility", "refs"],
    &["sql", "query", "table", "rows", "insert"],
    &["block", "blocks", "paragraph", "todo"],
    &["think", "reason", "step", "plan"],
];

/// The other words of each synonym group one of the query's words is in (`None`: none).
fn expand(query: &str) -> Option<String> {
    static GROUPS: std::sync::OnceLock<std::collections::HashMap<String, Vec<&'static str>>> =
        std::sync::OnceLock::new();
    let groups = GROUPS.get_or_init(|| {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut groups: std::collections::HashMap<String, Vec<&'static str>> = std::collections::HashMap::new();
        for group in SYNONYMS {
            for word in *group {
                groups.entry(stemmer.stem(word).into_owned()).or_default().extend(group.iter().filter(|w| *w != word));
            }
        }
        groups
    });
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    let mut expanded = String::new();
    for word in split(query) {
        if let Some(more) = groups.get(stemmer.stem(&word).as_ref()) {
            for other in more {
                expanded.push(' ');
                expanded.push_str(other);
            }
        }
    }
    (!expanded.is_empty()).then(|| format!("{query}{expanded}"))
}

/// A tool's document: its name and title twice, its description, and its parameters: their
/// names, descriptions and the values an enumeration allows (one level of nesting down).
pub fn document(name: &str, tool: &ToolView) -> String {
    let text = |key: &str| tool.raw.get(key).and_then(Value::as_str).unwrap_or_default();
    let title = text("title");
    let mut doc = format!("{name} {title} {name} {title} {}", text("description"));
    if let Some(schema) = tool.raw.get("inputSchema") {
        parameters(schema, &mut doc, 2);
    }
    doc
}

/// Appends what a schema's properties say of themselves, `depth` levels down.
fn parameters(schema: &Value, doc: &mut String, depth: usize) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    for (parameter, spec) in properties {
        doc.push(' ');
        doc.push_str(parameter);
        if let Some(description) = spec.get("description").and_then(Value::as_str) {
            doc.push(' ');
            doc.push_str(description);
        }
        for value in spec.get("enum").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            doc.push(' ');
            doc.push_str(value);
        }
        if depth > 1 {
            parameters(spec, doc, depth - 1);
            if let Some(items) = spec.get("items") {
                parameters(items, doc, depth - 1);
            }
        }
    }
}

/// Words as tools are named and described: split at anything not a letter or digit and where
/// a lower-case letter or digit meets an upper-case one (`createIssue`), lower-cased, English
/// stop words dropped, the rest stemmed.
pub struct ToolWords {
    stemmer: rust_stemmers::Stemmer,
}

impl ToolWords {
    pub fn new() -> ToolWords {
        ToolWords { stemmer: rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English) }
    }
}

impl Default for ToolWords {
    fn default() -> ToolWords {
        ToolWords::new()
    }
}

impl bm25::Tokenizer for ToolWords {
    fn tokenize(&self, text: &str) -> Vec<String> {
        split(text)
            .into_iter()
            .filter(|w| STOP_WORDS.binary_search(&w.as_str()).is_err())
            .map(|w| self.stemmer.stem(&w).into_owned())
            .collect()
    }
}

/// `text` split into lower-case words (see [`ToolWords`]).
pub fn split(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous: Option<char> = None;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        } else {
            if c.is_uppercase() && previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) && !word.is_empty()
            {
                out.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        previous = Some(c);
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// English words that say nothing of what a tool does (sorted: binary search).
const STOP_WORDS: [&str; 64] = [
    "a", "about", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for", "from",
    "get", "give", "have", "how", "i", "if", "in", "into", "is", "it", "its", "let", "me", "my", "need", "of", "on",
    "or", "our", "please", "should", "so", "some", "that", "the", "their", "them", "then", "there", "these", "this",
    "to", "up", "us", "use", "want", "was", "we", "what", "when", "which", "who", "will", "with", "would", "you",
    "your", "yours",
];

#[cfg(test)]
mod tests {

    use super::*;
    use serde_json::json;

    fn tool(value: Value) -> ToolView {
        ToolView::from_value(value).unwrap()
    }

    #[test]
    fn identifiers_are_split_into_words_and_stop_words_sorted() {
        assert_eq!(split("github__createIssue"), ["github", "create", "issue"]);
        assert_eq!(split("read-file.v2/x:y"), ["read", "file", "v2", "x", "y"]);
        assert_eq!(split("HTTPServer"), ["httpserver"]);
        assert_eq!(split("Élan_über"), ["élan", "über"]);
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
        let words = ToolWords::new();
        assert_eq!(bm25::Tokenizer::tokenize(&words, "Searching the files"), ["search", "file"]);
    }

    #[test]
    fn a_need_finds_its_tool_and_what_a_caller_may_not_call_is_never_shown() {
        let tools = [
            (
                "fs__read_text_file",
                tool(
                    json!({"name": "read_text_file", "description": "Read the complete contents of a file as text", "inputSchema": {"properties": {"path": {}}}}),
                ),
            ),
            (
                "gh__create_issue",
                tool(
                    json!({"name": "create_issue", "description": "Create a new issue in a GitHub repository", "inputSchema": {"properties": {"owner": {}, "repo": {}, "title": {}}}}),
                ),
            ),
            (
                "time__get_current_time",
                tool(
                    json!({"name": "get_current_time", "description": "Get current time in a specific timezone", "inputSchema": {"properties": {"timezone": {}}}}),
                ),
            ),
            (
                "secret__create_issue_internal",
                tool(
                    json!({"name": "create_issue_internal", "description": "Create an issue in the internal tracker"}),
                ),
            ),
        ];
        let index = ToolIndex::build(tools.iter().map(|(n, t)| (*n, t)), 7);
        assert_eq!((index.generation(), index.len()), (7, 4));
        let best = |q: &str| index.search(q, 5, |n| !n.starts_with("secret__")).first().map(|(n, _)| n.to_string());
        assert_eq!(best("open an issue on my repository").as_deref(), Some("gh__create_issue"));
        assert_eq!(best("what time is it in Tokyo timezone").as_deref(), Some("time__get_current_time"));
        assert_eq!(best("show me what's in the file notes.txt").as_deref(), Some("fs__read_text_file"));
        let all = index.search("create issue internal tracker", 5, |n| !n.starts_with("secret__"));
        assert!(all.iter().all(|(n, _)| !n.starts_with("secret__")), "{all:?}");
        assert!(index.search("", 5, |_| true).is_empty());
        assert!(index.search(&"é".repeat(2000), 5, |_| true).is_empty());
        // Built once per generation.
        let held = SearchIndex::default();
        let copy = |n: usize| tools[..n].iter().map(|(name, t)| (name.to_string(), t.clone())).collect::<Vec<_>>();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let first = runtime.block_on(held.for_generation(1, copy(4)));
        let again = runtime.block_on(held.for_generation(1, Vec::new()));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(runtime.block_on(held.for_generation(2, copy(1))).len(), 1);
        assert!(held.of(1).is_none() && held.of(2).is_some());
    }

    #[test]
    fn each_catalog_has_its_own_index_gone_with_it() {
        let indexes = SearchIndexes::default();
        let catalog = || Arc::new(parking_lot::RwLock::new(crate::catalog::Catalog::new("__", Vec::new())));
        let (base, variant) = (catalog(), catalog());
        let of_base = indexes.of(&base);
        assert!(Arc::ptr_eq(&of_base, &indexes.of(&base)));
        assert!(!Arc::ptr_eq(&of_base, &indexes.of(&variant)));
        assert_eq!(indexes.held.lock().len(), 2);
        drop(variant);
        indexes.of(&base);
        assert_eq!(indexes.held.lock().len(), 1, "the dead catalog's index is dropped");
    }
}
