//! One module per model-tool subcommand.
pub mod adapters;
pub mod audio_convert;
pub mod audio_tokenize;
pub mod bench;
mod bench_batching;
pub mod bench_common;
mod bench_listen;
pub mod bench_mm3;
mod bench_stream;
mod bench_transcribe;
pub mod codec;
pub mod common;
pub mod compose;
pub mod convert;
pub mod demo;
pub mod inspect;
pub mod lm_eval;
pub mod notation;
pub mod npy;
pub mod plan;
pub mod quantize;
pub mod synth;
pub mod synth_args;
pub mod synth_mm3;
pub mod tokenize;
pub mod transcribe;

/// A progress bar for long CLI work (hidden when stderr is not a terminal).
/// A spinner with the elapsed time, for work that runs as one piece (one graph over a whole
/// recording, a checkpoint's conversion): it shows the run is alive and how long it has taken.
pub fn spinner(what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(indicatif::ProgressStyle::with_template("{msg:>12} {spinner} {elapsed_precise}").unwrap());
    pb.set_message(what.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {elapsed_precise}")
            .unwrap()
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
