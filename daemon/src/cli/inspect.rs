use std::path::PathBuf;
use yued_engine::gguf::GgufFile;

#[derive(clap::Subcommand)]
pub enum GgufCommand {
    /// Print the architecture, the metadata and the tensor table of a GGUF file.
    Inspect {
        /// The GGUF file.
        file: PathBuf,
        /// Print at most this many tensors (0 = all).
        #[arg(long, default_value_t = 0)]
        max_tensors: usize,
    },
}

pub fn run(c: GgufCommand) -> anyhow::Result<()> {
    let GgufCommand::Inspect { file, max_tensors } = c;
    let f = GgufFile::open(&file)?;
    println!("file:         {}", file.display());
    println!("size:         {} bytes", f.file_size());
    println!("version:      {}", f.version);
    println!("architecture: {}", f.get_str("general.architecture").unwrap_or("(none)"));
    println!("\nmetadata ({} keys):", f.metadata().len());
    for (k, v) in f.metadata_ordered() {
        println!("  {k:<40} {:<7} {}", v.type_name(), v.summary());
    }
    let total: usize = f.tensors().iter().map(|t| t.nbytes).sum();
    println!("\ntensors ({}, {} bytes):", f.tensors().len(), total);
    println!("  {:<56} {:<6} {:>24} {:>12}", "name", "type", "shape (ne)", "bytes");
    let limit = if max_tensors == 0 { usize::MAX } else { max_tensors };
    for t in f.tensors().iter().take(limit) {
        let shape = format!("{:?}", t.ne);
        println!("  {:<56} {:<6} {:>24} {:>12}", t.name, t.ty.name(), shape, t.nbytes);
    }
    if f.tensors().len() > limit {
        println!("  ... {} more", f.tensors().len() - limit);
    }
    Ok(())
}
