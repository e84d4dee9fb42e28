//! The model families, one folder each: config, prompt, each module, the pipeline.
pub mod yue2;
