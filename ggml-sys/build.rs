//! Generates Rust bindings for the ggml, ggml-backend, ggml-alloc, ggml-cpu and gguf headers
//! that `llama-cpp-sys-2` installs (its cmake install prefix reaches us as `DEP_LLAMA_ROOT`),
//! and for `llama.h`: the benchmark runs llama.cpp's own decode, from the same build, next
//! to ours.
use std::{env, path::PathBuf};

fn main() {
    let root = env::var("DEP_LLAMA_ROOT").expect("llama-cpp-sys-2 did not export its install root");
    let include = PathBuf::from(&root).join("include");
    let mut headers = vec!["ggml.h", "ggml-alloc.h", "ggml-backend.h", "ggml-cpu.h", "gguf.h", "llama.h"];
    if env::var_os("CARGO_FEATURE_CUDA").is_some() {
        headers.push("ggml-cuda.h");
    }
    if env::var_os("CARGO_FEATURE_VULKAN").is_some() {
        headers.push("ggml-vulkan.h");
    }
    if env::var_os("CARGO_FEATURE_METAL").is_some() {
        headers.push("ggml-metal.h");
    }
    let wrapper: String = headers.iter().map(|h| format!("#include \"{h}\"\n")).collect();
    let bindings = bindgen::Builder::default()
        .header_contents("yued_ggml_wrapper.h", &wrapper)
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_item("(ggml|gguf|GGML|GGUF|llama|LLAMA)_.*")
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on the ggml headers");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("cannot write bindings");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:include={}", include.display());
}
