//! Raw FFI bindings to the ggml C API (ggml, ggml-alloc, ggml-backend, ggml-cpu, gguf).
//!
//! The library itself is compiled and linked by `llama-cpp-sys-2`; this crate only runs
//! bindgen over the headers it installs so that every `ggml_*`/`gguf_*` item and every
//! `GGML_*`/`GGUF_*` constant is available. Nothing here is safe to call directly: the
//! `engine::ggml` module is the one safe layer over it.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]
#![allow(clippy::all)]
// bindgen with libclang 19 (Debian 13) writes bitfield accessors through `transmute`, which
// rustc's own lint flags under `-D warnings`; the file is generated, not ours to change.
#![allow(unknown_lints, unnecessary_transmutes)]

// Force the link of the static ggml libraries built by llama-cpp-sys-2.
extern crate llama_cpp_sys_2;

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
