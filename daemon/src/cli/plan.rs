use super::common::{random_u64, read_request, Backbone, DeviceArgs};
use std::path::PathBuf;
use yued_engine::cancel::CancelToken;
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::generate::{ArStages, GenError};
use yued_protocol::Limits;

/// Runs the planning stage alone and writes the score the model intends to play.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Backbone GGUF.
    #[arg(long)]
    pub model: PathBuf,
    /// Request JSON (style, lyrics, cot, abc_sampling, plan_retries, ...).
    #[arg(long)]
    pub request: PathBuf,
    /// Output score.
    #[arg(long, default_value = "score.abc")]
    pub out: PathBuf,
    /// Token sampling seed (overrides the request's lm_seed; default random).
    #[arg(long)]
    pub lm_seed: Option<i64>,
    /// KV cache size in tokens (default: the model context).
    #[arg(long, default_value_t = 0)]
    pub max_seq: usize,
    /// Also write the prefix token ids (CSV).
    #[arg(long)]
    pub dump_tokens: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

pub fn run(a: PlanArgs) -> anyhow::Result<()> {
    let mut req = read_request(&a.request)?;
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    let req = req.with_resolved_seeds(random_u64);
    let bb = Backbone::open(&a.model)?;
    let limits = Limits {
        context: bb.max_seq(a.max_seq) as u32,
        codebook_size: bb.info.tokens.codebook_size,
        max_batch: req.lm_batch_size.max(1),
        ..Limits::default()
    };
    let fault = |e: yued_protocol::RequestError| anyhow::anyhow!("{}: {e}", a.request.display());
    req.validate(&limits).map_err(fault)?;
    anyhow::ensure!(
        req.cot != yued_protocol::CotMode::Off,
        "{}: cot is off, so there is no score to plan (set \"cot\": \"full\" or \"melody\")",
        a.request.display()
    );
    let settings = yued_actors::settings::yue2(&req).map_err(fault)?;
    let backend = a.device.open()?;
    let mut model = ArModel::load(&bb.file, &bb.info, &backend)?;
    let mut st = ArStages {
        model: &mut model,
        backend: &backend,
        tokenizer: &bb.tokenizer,
        tokens: bb.info.tokens,
        instructions: &bb.instructions,
        max_seq: bb.max_seq(a.max_seq),
        prefill_chunk: yued_engine::nn::batch::PREFILL_CHUNK,
    };
    // What does not fit the cache is refused by name before any compute.
    st.check_fits(&settings).map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    if let Some(p) = &a.dump_tokens {
        let prefix = yued_engine::models::yue2::prompt::PromptBuilder {
            tokenizer: &bb.tokenizer,
            tokens: bb.info.tokens,
            instructions: &bb.instructions,
        }
        .conditional(
            settings.cot,
            &settings.style,
            &settings.lyrics,
            &yued_engine::models::yue2::prompt::Score::Open,
        );
        super::common::write_file(p, prefix.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","))?;
    }
    let pb = super::progress_bar(req.abc_sampling.max_tokens as u64, "plan");
    let r = st.plan(&settings, 0, &CancelToken::new(), &mut |p| pb.set_position(p.done as u64));
    pb.finish_and_clear();
    match r {
        Ok(plan) => {
            super::common::write_file(&a.out, &plan.abc)?;
            println!(
                "score: {} ({} tokens, seed {}, attempt {}{})",
                a.out.display(),
                plan.ids.len(),
                plan.seed,
                plan.attempts,
                if plan.truncated { ", cut by the budget" } else { "" }
            );
        }
        Err(GenError::PlanExhausted { attempts, reason, last_abc }) => {
            super::common::write_file(&a.out, &last_abc)?;
            eprintln!(
                "warning: the score looks malformed after {attempts} attempt(s) ({reason}); saved for inspection: {}",
                a.out.display()
            );
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
