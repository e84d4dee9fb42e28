//! `yued notation`: a song's SheetSage2 events (JSON) to its ABC score, the last step of the
//! transcriber run alone ([`yued_engine::models::sheetsage2::notation`]).
use anyhow::{anyhow, Context};
use std::path::PathBuf;
use yued_engine::models::sheetsage2::notation::{to_abc, Events};

#[derive(clap::Args)]
pub struct NotationArgs {
    /// The events, as JSON: the original SheetSage2's `events.json` with a top-level
    /// `duration` (the song's length in seconds) added. Each of `events` has `time` (seconds)
    /// and `values` with any of `rhythm` (`meter` [num, den], `eighth_position`),
    /// `structure`, `key` (`"Eb:major"`), `chord` (`"C:maj/3"`, `"N"`) and `melody` (notes
    /// with `pitch`, `track` 0 vocal / 1 instrumental, `end_time` in seconds); other keys
    /// are ignored.
    #[arg(long, value_name = "FILE")]
    pub events: PathBuf,
    /// Both melody voices without chord symbols (the score a YuE2 cover takes).
    #[arg(long)]
    pub melody_only: bool,
    /// Write the score here instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(a: NotationArgs) -> anyhow::Result<()> {
    let path = a.events.display();
    let text = std::fs::read_to_string(&a.events).with_context(|| format!("reading {path}"))?;
    let events: Events = serde_json::from_str(&text).with_context(|| format!("{path}: not an events JSON"))?;
    let abc = to_abc(&events, a.melody_only).map_err(|reason| anyhow!("{path}: no score: {reason}"))?;
    match &a.out {
        Some(out) => std::fs::write(out, abc).with_context(|| format!("writing {}", out.display())),
        None => {
            print!("{abc}");
            Ok(())
        }
    }
}
