//! `yued`: the daemon (`serve`) and the model and audio tools (`demo-model`, `gguf`,
//! `tokenize`, `transcribe`, `notation`, `quantize`, `plan`, `lm-eval`, `synth`, `codec`,
//! `audio-convert`, `convert`, `adapters`).
#![forbid(unsafe_code)]
use clap::{Parser, Subcommand};

mod auth;
mod cli;
mod http;
mod kinds;
mod links;
mod logs;
mod mcp;
mod mcp_sessions;
mod openai;
mod openapi;
mod peer;
mod reply;
mod schema;
mod serve;
mod state;
mod tickets;
mod upload_room;
mod webui;
mod ws;

#[derive(Parser)]
/// Song generation daemon (YuE2, MiniMax Music 3) and its model tools.
#[command(name = "yued", version, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at the start: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the HTTP daemon (on the tiny demo model when no --model is given).
    Serve(serve::ServeArgs),
    /// Write demo models of the exact architectures with random weights (YuE2, MiniMax Music 3,
    /// the listening tools).
    DemoModel(cli::demo::DemoArgs),
    /// Inspect GGUF files.
    Gguf {
        #[command(subcommand)]
        command: cli::inspect::GgufCommand,
    },
    /// Print the token ids of a text, or (--audio) the 25 Hz semantic codes of a recording.
    Tokenize(cli::tokenize::TokenizeArgs),
    /// Write the ABC score of a song's SheetSage2 events (JSON with the song's duration).
    Notation(cli::notation::NotationArgs),
    /// Write the ABC score SheetSage2 hears in a recording (MERT-v2 beside the head).
    Transcribe(cli::transcribe::TranscribeArgs),
    /// Quantize a GGUF: a YuE2 backbone, MiniMax Music 3's LM, depth decoder or DiT, a listening
    /// model (Q8_0, Q6_K, Q5_K_M, Q4_K_M as each takes); VAEs are refused.
    Quantize(cli::quantize::QuantizeArgs),
    /// Run the planning stage alone and write the ABC score.
    Plan(cli::plan::PlanArgs),
    /// Run the autoregressive half alone: one replayable request (score, codes, seeds) per song.
    Compose(cli::compose::ComposeArgs),
    /// Write the full-vocabulary logits of a token sequence (prefill or decode).
    LmEval(cli::lm_eval::LmEvalArgs),
    /// Render a request to audio (YuE2: plan, semantic codes, flow matching, VAE; MiniMax Music
    /// 3: codes, DiT, flow VAE).
    Synth(cli::synth_args::SynthArgs),
    /// The neural codec: audio to VAE latents (.vae, .nac8, .nac4) and back.
    Codec {
        #[command(subcommand)]
        command: cli::codec::CodecCommand,
    },
    /// Measure the speed of a model pair (default: the full-size demo) and print a table.
    Bench(cli::bench_common::BenchArgs),
    /// Convert audio between containers (by output extension), resampling on request.
    AudioConvert(cli::audio_convert::AudioConvertArgs),
    /// LoRA adapter directories: what each adapter is and which halves it changes.
    Adapters {
        #[command(subcommand)]
        command: cli::adapters::AdaptersCommand,
    },
    /// Convert checkpoint folders (safetensors) to GGUF.
    Convert {
        #[command(subcommand)]
        command: cli::convert::ConvertCommand,
    },
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        quiet_broken_pipe();
    }
    let result = match cli.command {
        Command::Serve(a) => serve::run(a),
        Command::DemoModel(a) => cli::demo::run(a),
        Command::Gguf { command } => cli::inspect::run(command),
        Command::Tokenize(a) => cli::tokenize::run(a),
        Command::Notation(a) => cli::notation::run(a),
        Command::Transcribe(a) => cli::transcribe::run(a),
        Command::Quantize(a) => cli::quantize::run(a),
        Command::Plan(a) => cli::plan::run(a),
        Command::Compose(a) => cli::compose::run(a),
        Command::LmEval(a) => cli::lm_eval::run(a),
        Command::Synth(a) => cli::synth::run(a),
        Command::Convert { command } => cli::convert::run(command),
        Command::Adapters { command } => cli::adapters::run(command),
        Command::Codec { command } => cli::codec::run(command),
        Command::AudioConvert(a) => cli::audio_convert::run(a),
        Command::Bench(a) => cli::bench::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// A tool whose reader stops early (`yued gguf inspect m.gguf | head`) ends quietly with the
/// status a shell gives a program SIGPIPE ended (141), as C tools do, not with a panic's
/// report: Rust ignores SIGPIPE, so the write fails and `println!` panics.
fn quiet_broken_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload.downcast_ref::<String>().map(String::as_str).or(payload.downcast_ref::<&str>().copied());
        if msg.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("Broken pipe")) {
            std::process::exit(141);
        }
        report(info)
    }));
}
