//! Section 9, instructions: the gateway's own work per proxied `tools/call`, counted by
//! callgrind. Instruction counts do not move with the noise of a shared machine, so this is the
//! figure each change to the proxy path is judged by.
//!
//! For each kind of call, the gateway runs twice under callgrind with the same upstream: once
//! with only the warm-up calls, once with the warm-up and then the measured calls. The
//! difference of the two totals, divided by the measured calls, is the cost of one call, with
//! start-up, the first upstream session and shutdown cancelled out.

use std::path::Path;

use anyhow::{bail, Context, Result};
use taskgate_testkit::McpClient;

use crate::harness::{call, connect, start_demo, start_gateway_wrapped};
use crate::plan::Plan;
use crate::revisions::stateless_call;

/// The kinds of call measured.
#[derive(Clone, Copy)]
enum Kind {
    /// A 2025-11-25 client in its session.
    Session,
    /// A 2026-07-28 stateless request.
    Stateless,
    /// A 2025-11-25 session call through the bare actix-web + hyper proxy: the stack alone.
    Bare,
    /// The same through the bare proxy with hyper's server in front instead of actix-web.
    BareHyper,
    /// A 2025-11-25 session call whose result is [`LARGE`] bytes of text.
    Large,
    /// The same through the bare proxy.
    BareLarge,
    /// A 2025-11-25 session call whose arguments hold [`LARGE`] bytes of text (echoed: the
    /// result holds them too). Against [`Kind::Large`], what the params cost as a tree.
    LargeArguments,
}

/// The text in the large result: what a result's size costs the gateway, against the stack.
const LARGE: usize = 64 * 1024;

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Session => "2025-11-25 session tools/call",
            Kind::Stateless => "2026-07-28 stateless tools/call",
            Kind::Bare => "the same session call through the bare actix-web + hyper proxy (the stack alone)",
            Kind::BareHyper => "the same session call through a bare hyper proxy (hyper's server and client, no actix)",
            Kind::Large => "2025-11-25 session tools/call with a 64 KiB result",
            Kind::BareLarge => "the same 64 KiB call through the bare proxy (the stack alone)",
            Kind::LargeArguments => {
                "2025-11-25 session tools/call with 64 KiB of arguments, echoed (a 64 KiB result too)"
            }
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Kind::Session => "session",
            Kind::Stateless => "stateless",
            Kind::Bare => "bare",
            Kind::BareHyper => "bare-hyper",
            Kind::Large => "large",
            Kind::BareLarge => "bare-large",
            Kind::LargeArguments => "large-arguments",
        }
    }
}

pub(crate) fn valgrind_installed() -> bool {
    std::process::Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The total instructions of one gateway run that served `calls` calls of `kind`.
async fn count(bin: &Path, demo_url: &str, kind: Kind, calls: usize) -> Result<u64> {
    let out = std::env::temp_dir().join(format!("taskgate-bench-callgrind-{}-{}", std::process::id(), calls));
    let wrap =
        ["valgrind".to_owned(), "--tool=callgrind".to_owned(), format!("--callgrind-out-file={}", out.display())];
    let config = format!("[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n");
    let (gateway, url) = match kind {
        Kind::Bare | Kind::BareLarge => crate::bare::start(demo_url, &wrap, crate::bare::Front::Actix).await?,
        Kind::BareHyper => crate::bare::start(demo_url, &wrap, crate::bare::Front::Hyper).await?,
        Kind::Session | Kind::Stateless | Kind::Large | Kind::LargeArguments => {
            start_gateway_wrapped(bin, &config, &wrap).await?
        }
    };
    let served = async {
        match kind {
            Kind::Session | Kind::Bare | Kind::BareHyper => {
                let client = connect(&url).await?;
                let tool = if matches!(kind, Kind::Session) { "demo__echo" } else { "echo" };
                for _ in 0..calls {
                    call(&client, tool).await?;
                }
            }
            Kind::Stateless => {
                let client = McpClient::new(&url);
                for _ in 0..calls {
                    stateless_call(&client, "demo__echo").await?;
                }
            }
            Kind::LargeArguments => {
                let client = connect(&url).await?;
                let text = "x".repeat(LARGE);
                for _ in 0..calls {
                    let mut c = client.clone();
                    let result = c.call("demo__echo", serde_json::json!({ "text": text })).await;
                    let echoed = result.as_ref().ok().and_then(|r| r["content"][0]["text"].as_str());
                    if echoed.map(str::len) != Some(LARGE) {
                        bail!("demo__echo answered {result:?}");
                    }
                }
            }
            Kind::Large | Kind::BareLarge => {
                let client = connect(&url).await?;
                let tool = if matches!(kind, Kind::BareLarge) { "blob" } else { "demo__blob" };
                for _ in 0..calls {
                    let mut c = client.clone();
                    let result = c.call(tool, serde_json::json!({ "bytes": LARGE })).await;
                    let text = result.as_ref().ok().and_then(|r| r["content"][0]["text"].as_str());
                    if text.map(str::len) != Some(LARGE) {
                        bail!("{tool} answered {result:?}");
                    }
                }
            }
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    // callgrind writes its profile when the process exits cleanly.
    gateway.terminate().await;
    let profile = std::fs::read_to_string(&out);
    // TASKGATE_BENCH_CALLGRIND_DIR keeps the profiles there (named by kind and calls), to be read
    // with callgrind_annotate; otherwise they are removed.
    match std::env::var_os("TASKGATE_BENCH_CALLGRIND_DIR") {
        Some(dir) => {
            let kept = Path::new(&dir).join(format!("{}-{calls}.callgrind", kind.slug()));
            if std::fs::rename(&out, &kept).is_err() {
                let _ = std::fs::copy(&out, &kept);
                let _ = std::fs::remove_file(&out);
            }
        }
        None => {
            let _ = std::fs::remove_file(&out);
        }
    }
    served?;
    let profile = profile.with_context(|| format!("callgrind wrote no profile at {}", out.display()))?;
    profile
        .lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|n| n.trim().parse().ok())
        .context("no totals in the callgrind profile")
}

pub async fn instructions(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 9. Instructions per proxied call (callgrind)");
    println!();
    if !valgrind_installed() {
        println!("- valgrind is not installed (apt-get install -y valgrind): this section was skipped.");
        println!();
        return Ok(());
    }
    let (warm_up, measured) = if plan.quick { (10, 20) } else { (50, 400) };
    let (_demo, demo_url) = start_demo(bin).await?;
    let mut per_call = Vec::new();
    for kind in [
        Kind::Session,
        Kind::Stateless,
        Kind::Bare,
        Kind::BareHyper,
        Kind::Large,
        Kind::BareLarge,
        Kind::LargeArguments,
    ] {
        let base = count(bin, &demo_url, kind, warm_up).await?;
        let full = count(bin, &demo_url, kind, warm_up + measured).await?;
        if full <= base {
            bail!("{}: {full} instructions with the calls, {base} without", kind.name());
        }
        per_call.push((kind, (full - base) / measured as u64));
    }
    println!("| call, to the demo upstream over HTTP | instructions per call in the proxy |");
    println!("| --- | --- |");
    for (kind, n) in &per_call {
        println!("| {} | {} |", kind.name(), n);
    }
    let ratio = per_call[1].1 as f64 / per_call[0].1 as f64;
    let over_stack = per_call[0].1 as f64 / per_call[2].1 as f64;
    println!();
    println!(
        "- {measured} calls after {warm_up} warm-up calls, each kind on a fresh gateway, one keep-alive connection"
    );
    // The 2026/2025 target is on added latency (section 8); this is the same comparison in
    // instructions, which section 8's wall time follows only loosely.
    println!("- 2026 stateless / 2025 session: {ratio:.2} (the target, ≤ 1.1, is on added latency: section 8)");
    println!("- 2025 session call through taskgate / through the stack alone: {over_stack:.2}");
    println!(
        "- the stack alone / the bare hyper proxy: {:.2} (what actix-web's front door costs over hyper's)",
        per_call[2].1 as f64 / per_call[3].1 as f64
    );
    let large = per_call[4].1 as f64 / per_call[5].1 as f64;
    println!("- with a 64 KiB result, through taskgate / through the stack alone: {large:.2}");
    // The same result, and the arguments too: what 64 KiB of params cost read into a tree and
    // written again.
    let arguments = per_call[6].1 as f64 - per_call[4].1 as f64;
    println!(
        "- 64 KiB of arguments on top of a 64 KiB result: {arguments:.0} instructions more ({:.1} a byte)",
        arguments / LARGE as f64
    );
    println!();
    Ok(())
}
