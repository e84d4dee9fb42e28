//! `yued adapters list DIR`: the adapters of a directory as the daemon sees them against a
//! backbone: layout, rank, alpha, the halves each changes, and why an unusable one is.
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum AdaptersCommand {
    /// Scan a directory of LoRA adapters against a YuE2 backbone and print each.
    List(ListArgs),
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// The adapter directory (every .safetensors file, every folder holding one).
    pub dir: PathBuf,
    /// The YuE2 backbone GGUF the adapters must fit (its tensor names and shapes).
    #[arg(long)]
    pub model: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: AdaptersCommand) -> anyhow::Result<()> {
    let AdaptersCommand::List(a) = c;
    let f = yued_engine::gguf::GgufFile::open(&a.model)?;
    // Adapters are YuE2's: matching tensor names of another model would list them usable.
    f.expect_arch(yued_engine::models::yue2::config::ARCH).map_err(|e| anyhow::anyhow!("--model: {e}"))?;
    let d = yued_engine::models::yue2::adapter::AdapterDir::scan(
        &a.dir,
        &yued_engine::models::yue2::adapter::shapes_of(&f),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", a.dir.display()))?;
    let layouts = |x: &yued_engine::models::yue2::adapter::Adapter| {
        x.layouts.iter().map(|l| l.name()).collect::<Vec<_>>().join("+")
    };
    let halves = |x: &yued_engine::models::yue2::adapter::Adapter| {
        [(x.ar, "AR"), (x.nar, "NAR")].iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect::<Vec<_>>().join("+")
    };
    if a.json {
        let usable: Vec<serde_json::Value> = d
            .adapters
            .iter()
            .map(|x| {
                serde_json::json!({"name": x.name, "layout": layouts(x), "rank": x.rank,
                "alpha": x.alpha, "ar": x.ar, "nar": x.nar, "tensors": x.tensors})
            })
            .collect();
        let unusable: Vec<serde_json::Value> =
            d.unusable.iter().map(|u| serde_json::json!({"name": u.name, "error": u.reason})).collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"adapters": usable, "unusable": unusable}))?);
        return Ok(());
    }
    println!("{:<32} {:<16} {:>5} {:>7} {:<7} {:>7}", "adapter", "layout", "rank", "alpha", "halves", "tensors");
    for x in &d.adapters {
        let alpha = x.alpha.map(|v| format!("{v}")).unwrap_or_else(|| "-".into());
        println!("{:<32} {:<16} {:>5} {:>7} {:<7} {:>7}", x.name, layouts(x), x.rank, alpha, halves(x), x.tensors);
    }
    for u in &d.unusable {
        println!("{:<32} unusable: {}", u.name, u.reason);
    }
    Ok(())
}
