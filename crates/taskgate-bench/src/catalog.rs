//! Section 16, large catalogs: how well and how fast tool search finds what a need asks for,
//! and what search mode saves a host.
//!
//! The catalog is the `tools/list` of real servers from npm and PyPI, recorded as fixtures with
//! their versions (`catalog/servers/`, `catalog/README.md`), each prefixed as the gateway
//! prefixes an upstream's tools. The needs (`catalog/needs.json`) are written as a user would ask,
//! each with the tool or tools that serve it. The search is the gateway's own: the index it
//! builds (`taskgate_core::tool_search`) and what `find_tools` returns from it (`matches`).
//!
//! - recall@1 and recall@5: the share of needs whose first result, or one of the first five, is
//!   a tool that serves it; also for the even-numbered needs (whose misses the search's synonym
//!   groups were written from) and the odd-numbered ones (held out);
//! - the bytes of `tools/list` a host receives: the whole catalog, against search mode's;
//! - the search's p50/p99 (index lookup and the result's tool objects) at 1,000 and 10,000 tools:
//!   the real catalog copied under other upstream names until it is that large.
//!
//! With `TASKGATE_BENCH_RANKS=<file>` it writes each need's ranking, for
//! `catalog/embeddings.py` (embedding models measured beside the index, and fused with it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use taskgate_core::catalog::{Catalog, Naming};
use taskgate_core::tool_search::{matches, ToolIndex};
use taskgate_protocol::mcp::ToolView;

use crate::harness::verdict;
use crate::plan::Plan;

/// One recorded server: its fixture's name and its tools.
struct Server {
    name: String,
    tools: Vec<Value>,
}

/// One need and the tools (`server/tool`) that serve it.
struct Need {
    text: String,
    tools: Vec<String>,
}

fn catalog_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog")
}

fn read_servers(dir: &Path) -> Result<Vec<Server>> {
    let mut servers = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("servers"))
        .with_context(|| format!("the fixtures in {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for file in files {
        let fixture: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
        let name = file.file_stem().and_then(|s| s.to_str()).context("a fixture's name")?.to_owned();
        let tools = fixture["tools"].as_array().with_context(|| format!("tools in {}", file.display()))?.clone();
        servers.push(Server { name, tools });
    }
    Ok(servers)
}

fn read_needs(dir: &Path) -> Result<Vec<Need>> {
    let needs: Value = serde_json::from_slice(&std::fs::read(dir.join("needs.json"))?)?;
    let needs = needs.as_array().context("needs.json is an array")?;
    needs
        .iter()
        .map(|n| {
            let text = n["need"].as_str().context("a need's text")?.to_owned();
            let tools = n["tools"].as_array().context("a need's tools")?;
            let tools = tools.iter().filter_map(Value::as_str).map(str::to_owned).collect();
            Ok(Need { text, tools })
        })
        .collect()
}

/// The gateway's name of a fixture's tool (`server/tool` → `server__tool`).
fn gateway_name(id: &str) -> String {
    id.replacen('/', "__", 1)
}

/// The catalog of `servers`, copied (under the names `<server>-<n>`) until it holds `at_least`
/// tools, as the gateway merges it: every upstream prefixed.
fn catalog(servers: &[Server], at_least: usize) -> Catalog {
    let total: usize = servers.iter().map(|s| s.tools.len()).sum();
    let copies = at_least.div_ceil(total.max(1)).max(1);
    let upstream = |server: &Server, copy: usize| {
        if copy == 0 {
            server.name.clone()
        } else {
            format!("{}-{copy}", server.name)
        }
    };
    let naming = (0..copies)
        .flat_map(|copy| servers.iter().map(move |s| Naming { upstream: upstream(s, copy), prefix: true }))
        .collect();
    let mut catalog = Catalog::new("__", naming);
    for copy in 0..copies {
        for server in servers {
            let tools = server.tools.iter().filter_map(|t| ToolView::from_value(t.clone())).collect();
            catalog.set_tools(&upstream(server, copy), tools, false);
        }
    }
    catalog
}

fn index_of(catalog: &Catalog) -> ToolIndex {
    ToolIndex::build(catalog.entries().map(|(name, entry)| (name.as_str(), &entry.tool)), catalog.generation())
}

/// The first five results' names for each need, and recall@1 and recall@5.
fn recall(catalog: &Catalog, index: &ToolIndex, needs: &[Need]) -> (f64, f64, Vec<String>) {
    let (mut first, mut five) = (0usize, 0usize);
    let mut misses = Vec::new();
    for need in needs {
        let found = matches(catalog, index, &need.text, 5, |_, _| true);
        let names: Vec<&str> = found.iter().filter_map(|t| t["name"].as_str()).collect();
        let serves = |name: &&str| need.tools.iter().any(|t| gateway_name(t) == *name);
        if names.first().is_some_and(serves) {
            first += 1;
        }
        if names.iter().any(serves) {
            five += 1;
        } else {
            misses.push(format!("{:?} → {}", need.text, names.first().unwrap_or(&"nothing")));
        }
    }
    let n = needs.len().max(1) as f64;
    (first as f64 / n, five as f64 / n, misses)
}

/// Each need's 60 best tools (`server/tool`) with their scores, in the needs' order: what
/// `catalog/embeddings.py` fuses with embedding models' rankings.
fn write_ranks(index: &ToolIndex, needs: &[Need], path: &Path) -> Result<()> {
    let ranks: Vec<Value> = needs
        .iter()
        .map(|need| {
            let found = index.search(&need.text, 60, |_| true);
            Value::Object(found.into_iter().map(|(name, score)| (name.replacen("__", "/", 1), json!(score))).collect())
        })
        .collect();
    std::fs::write(path, serde_json::to_vec(&ranks)?).with_context(|| format!("writing {}", path.display()))
}

/// p50 and p99 of a search (index lookup and the five results' tool objects), over the needs
/// `rounds` times.
fn latency(catalog: &Catalog, index: &ToolIndex, needs: &[Need], rounds: usize) -> (Duration, Duration) {
    let mut took = Vec::with_capacity(needs.len() * rounds);
    for _ in 0..rounds {
        for need in needs {
            let started = Instant::now();
            let found = matches(catalog, index, &need.text, 5, |_, _| true);
            took.push(started.elapsed());
            std::hint::black_box(found);
        }
    }
    took.sort_unstable();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

pub fn catalog_search(plan: &Plan) -> Result<()> {
    println!("## 16. Large catalogs: tool search's recall and cost, search mode's listing");
    println!();
    let dir = catalog_dir();
    let servers = read_servers(&dir)?;
    let needs = read_needs(&dir)?;
    let real = catalog(&servers, 0);
    for need in &needs {
        for tool in &need.tools {
            if real.resolve(&gateway_name(tool)).is_none() {
                bail!("need {:?} names {tool}, which no fixture lists", need.text);
            }
        }
    }
    let index = index_of(&real);
    let (at1, at5, misses) = recall(&real, &index, &needs);
    if let Some(path) = std::env::var_os("TASKGATE_BENCH_RANKS") {
        write_ranks(&index, &needs, Path::new(&path))?;
    }
    let half = |parity: usize| -> Vec<Need> {
        needs
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == parity)
            .map(|(_, n)| Need { text: n.text.clone(), tools: n.tools.clone() })
            .collect()
    };
    let halves = [half(0), half(1)];
    let (even1, even5, _) = recall(&real, &index, &halves[0]);
    let (odd1, odd5, _) = recall(&real, &index, &halves[1]);
    // What a host is sent: every tool, or search mode's two meta-tools (before it activates any).
    let all: Vec<Value> = real.entries().map(|(name, entry)| entry.tool.renamed(name)).collect();
    let full = serde_json::to_vec(&json!({ "tools": all }))?.len();
    let search = serde_json::to_vec(&json!({ "tools": taskgate_core::tenants::profiles::meta_tools() }))?.len();
    let five: Vec<usize> = needs
        .iter()
        .map(|n| {
            serde_json::to_vec(&json!({ "tools": matches(&real, &index, &n.text, 5, |_, _| true) }))
                .map_or(0, |v| v.len())
        })
        .collect();
    let mean_five = five.iter().sum::<usize>() / five.len().max(1);
    println!(
        "catalog: {} servers' recorded tools/list (npm and PyPI, versions in catalog/servers/), {} tools; {} needs",
        servers.len(),
        real.len(),
        needs.len()
    );
    println!();
    println!("| measure | value | target |");
    println!("| --- | --- | --- |");
    println!("| recall@1 | {at1:.3} (even needs {even1:.3}, odd {odd1:.3}) | |");
    println!("| recall@5 | {at5:.3} (even needs {even5:.3}, odd {odd5:.3}) | ≥ 0.9: {} |", verdict(at5 >= 0.9));

    let share = search as f64 / full as f64;
    println!("| tools/list bytes, every tool | {full} | |");
    println!(
        "| tools/list bytes, search mode (find_tools, use_tools) | {search} ({:.2}% of every tool's) | < 5%: {} |",
        share * 100.0,
        verdict(share < 0.05)
    );
    println!("| a find_tools result of 5 tools, mean bytes | {mean_five} | |");
    let rounds = if plan.quick { 1 } else { 30 };
    let mut worst_p99 = Duration::ZERO;
    for size in [1_000, 10_000] {
        let copied = catalog(&servers, size);
        let started = Instant::now();
        let index = index_of(&copied);
        let built = started.elapsed();
        let (p50, p99) = latency(&copied, &index, &needs, rounds);
        worst_p99 = worst_p99.max(p99);
        let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1e3);
        let target = if size == 10_000 {
            format!("p99 < 2 ms: {}", verdict(p99 < Duration::from_millis(2)))
        } else {
            String::new()
        };
        println!(
            "| search p50 / p99 at {} tools (index built in {}) | {} / {} | {target} |",
            copied.len(),
            ms(built),
            ms(p50),
            ms(p99)
        );
    }
    println!();
    println!("- the needs no first five answered ({}):", misses.len());
    for miss in misses.iter().take(if plan.quick { 3 } else { 80 }) {
        println!("  - {miss}");
    }
    println!();
    Ok(())
}
