//! Reply of `GET /props`: what a client needs to build a request for this server.

use serde::{Deserialize, Serialize};

use crate::request::{OutputFormat, Yue2Request, DEFAULT_CONTEXT};
use crate::{FRAME_RATE, SAMPLE_RATE};

/// One export format as `/props` lists it, so clients never hardcode MIME types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFormatInfo {
    pub name: String,
    pub extension: String,
    pub mime: String,
}

impl From<OutputFormat> for OutputFormatInfo {
    fn from(f: OutputFormat) -> Self {
        Self { name: f.name().into(), extension: f.extension().into(), mime: f.mime().into() }
    }
}

/// An adapter of the `--adapters` directory and the backbone halves it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AdapterInfo {
    pub name: String,
    pub ar: bool,
    pub nar: bool,
    /// Why the adapter cannot be used (the key at fault); absent for a usable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A request with the fields it leaves out at their defaults (to serialize as yue2.cpp's
/// reference body) written in too.
fn every_default<S: serde::Serializer>(r: &Yue2Request, s: S) -> Result<S::Ok, S::Error> {
    let mut v = serde_json::to_value(r).map_err(serde::ser::Error::custom)?;
    if let Some(m) = v.as_object_mut() {
        let left_out = [
            ("abc_continue", serde_json::json!(r.abc_continue)),
            ("solver", serde_json::to_value(r.solver).map_err(serde::ser::Error::custom)?),
            ("companion_scale", serde_json::json!(r.companion_scale)),
            ("stream_chunk_seconds", serde_json::json!(r.stream_chunk_seconds)),
        ];
        for (k, value) in left_out {
            m.entry(k).or_insert(value);
        }
    }
    v.serialize(s)
}

/// Server description. `defaults` is the full default request: the single source of the
/// WebUI placeholders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Props {
    pub version: String,
    pub model: String,
    pub vae: String,
    pub sample_rate: u32,
    pub frame_rate: u32,
    /// KV cache length in tokens.
    pub context: u32,
    /// `--max-batch`, the bound of `lm_batch_size`.
    pub max_batch: u32,
    /// `--parallel`: the most rows of the AR half's shared decode step, where songs of
    /// different jobs decode together (a song takes two under guidance).
    #[serde(default)]
    pub parallel: u32,
    /// The KV cache those rows take at most: `parallel` sequences of `context` positions (a
    /// MiniMax Music 3 row at its LM's context, 1.5 streams a row, when that is larger).
    #[serde(default)]
    pub batch_kv_bytes: u64,
    /// `keep-loaded` (every group resident) or `strict` (one coexistence group at a time).
    #[serde(default)]
    pub residency: String,
    /// Why: the flag that forced it, or the memory figures it was chosen by.
    #[serde(default)]
    pub residency_reason: String,
    pub output_formats: Vec<OutputFormatInfo>,
    pub adapters: Vec<AdapterInfo>,
    /// Every field's default, those a request at its default leaves out included.
    #[serde(serialize_with = "every_default")]
    pub defaults: Yue2Request,
    /// The families served, when more than YuE2 (a YuE2-only daemon answers without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Vec<crate::Family>>,
    /// The `--companion` adapter merged under every YuE2 render (at `companion_scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub companion: Option<String>,
    /// The audio tokenizer head, when `POST /tokenize` is served (its MERT-v2 beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// The SheetSage2 transcriber head, when `POST /transcribe` is served (its MERT-v2
    /// beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcriber: Option<String>,
    /// MiniMax Music 3, when it is served: its model files by bucket and its default request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mm3: Option<Mm3Props>,
}

/// What a MiniMax Music 3 client reads from `/props`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Mm3Props {
    /// The files of each bucket (`mm3-lm`, `mm3-depth`, `mm3-cond`, `mm3-dit`, `mm3-vae`), in
    /// name order: a request's `*_model` field names one; empty takes the first.
    pub models: std::collections::BTreeMap<String, Vec<String>>,
    pub sample_rate: u32,
    /// Codes per second the LM writes.
    pub frame_rate: f64,
    /// The full default request.
    pub defaults: crate::Mm3Request,
}

impl Props {
    /// Props with the fixed rates, every output format, no adapters and the default request.
    pub fn new(version: impl Into<String>, model: impl Into<String>, vae: impl Into<String>, max_batch: u32) -> Self {
        Self {
            version: version.into(),
            model: model.into(),
            vae: vae.into(),
            sample_rate: SAMPLE_RATE,
            frame_rate: FRAME_RATE,
            context: DEFAULT_CONTEXT,
            max_batch,
            parallel: 1,
            batch_kv_bytes: 0,
            residency: "strict".into(),
            residency_reason: String::new(),
            output_formats: OutputFormat::all().iter().map(|&f| f.into()).collect(),
            adapters: Vec::new(),
            families: None,
            tokenizer: None,
            transcriber: None,
            companion: None,
            mm3: None,
            defaults: Yue2Request::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn props_shape() {
        let mut props = Props::new("0.1.0", "data/models/YuE2-3B-Q8_0.gguf", "data/models/YuE2-Vae-F32.gguf", 1);
        props.adapters.push(AdapterInfo { name: "lorn.safetensors".into(), ar: true, nar: false, error: None });
        let v: Value = serde_json::from_str(&serde_json::to_string(&props).unwrap()).unwrap();
        assert_eq!(v["sample_rate"], 48000);
        assert_eq!(v["frame_rate"], 25);
        assert_eq!(v["context"], 24576);
        assert_eq!(v["max_batch"], 1);
        assert_eq!(v["output_formats"].as_array().unwrap().len(), 9);
        assert_eq!(v["output_formats"][0], json!({"name":"mp3","extension":"mp3","mime":"audio/mpeg"}));
        assert_eq!(v["output_formats"][8], json!({"name":"wav32","extension":"wav","mime":"audio/wav"}));
        assert_eq!(v["adapters"], json!([{"name":"lorn.safetensors","ar":true,"nar":false}]));
        assert_eq!(v["defaults"]["cot"], "full");
        assert_eq!(v["defaults"]["steps"], 8);
        assert_eq!(v["defaults"]["abc_sampling"]["top_p"], 0.9);
        assert_eq!(v["defaults"]["semantic_sampling"]["min_tokens"], 200);
        // Those a default request leaves out too.
        assert_eq!(v["defaults"]["solver"], "midpoint");
        assert_eq!(v["defaults"]["stream_chunk_seconds"], 0.0);
        assert_eq!(v["defaults"]["companion_scale"], 1.0);
        assert_eq!(v["defaults"]["abc_continue"], false);
        let back: Props = serde_json::from_value(v).unwrap();
        assert_eq!(back, props);
    }
}
