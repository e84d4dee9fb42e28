use std::path::PathBuf;
use yued_engine::gguf::GgufFile;
use yued_engine::tokenizer::BpeTokenizer;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Backbone GGUF carrying the tokenizer.
    #[arg(long)]
    pub model: PathBuf,
    /// Text to encode (NFC-normalised; special tokens are never matched inside it).
    #[arg(long)]
    pub text: String,
}

pub fn run(a: TokenizeArgs) -> anyhow::Result<()> {
    let f = GgufFile::open(&a.model)?;
    let tok = BpeTokenizer::from_gguf(&f)?;
    let ids: Vec<String> = tok.encode(&a.text).iter().map(|i| i.to_string()).collect();
    println!("{}", ids.join(","));
    Ok(())
}
