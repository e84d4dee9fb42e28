//! MiniMax Music 3 at the HTTP doors: its request checks (values, component files against
//! the registry, the prompt's length), the `/vae` facts of its flow VAE, its results'
//! boundary, its OpenAPI body and its body for plain text.
use super::{Kind, VaeFacts};
use crate::cli::common::random_u64;
use crate::schema::{apply_limits, body_schema, nullable_fields, routing, set, Facts};
use crate::state::{AppState, Mm3Check};
use serde_json::{json, Value};
use yued_engine::registry::Bucket;
use yued_protocol::request::mm3::{FRAME_RATE, MAX_FRAMES, MAX_STEPS as MM3_MAX_STEPS};
use yued_protocol::{Family, Limits, Mm3Request, Request, MM3_MULTIPART_BOUNDARY};

pub struct Mm3;

fn own(req: Request) -> Mm3Request {
    match req {
        Request::Mm3(r) => r,
        other => panic!("MiniMax Music 3's kind got a {} request", other.family()),
    }
}

fn served(st: &AppState) -> Result<&Mm3Check, String> {
    st.mm3.as_ref().ok_or_else(|| "family: mm3 is not served by this daemon".to_string())
}

impl Kind for Mm3 {
    fn family(&self) -> Family {
        Family::Mm3
    }

    fn check(&self, req: Request, st: &AppState) -> Result<Request, String> {
        let mut req = own(req);
        let m = served(st)?;
        let limits = Limits { mm3_codebooks: m.codebooks, ..st.limits };
        // The family's default steps under a lower --max-steps: the bound, not a refusal of
        // a request that never named them.
        if req.steps == Mm3Request::default().steps {
            req.steps = req.steps.min(limits.max_steps.max(yued_protocol::request::mm3::MIN_STEPS));
        }
        req.validate(&limits).map_err(|e| e.to_string())?;
        req.duration = st.cap_duration(req.duration);
        // The first frame only feeds the first feedback: the song is the frames after it.
        let values = req.audio_codes.split(',').filter(|c| !c.trim().is_empty()).count();
        let frames = (values / yued_protocol::request::mm3::CODES_PER_FRAME).saturating_sub(1);
        st.check_codes_length("audio_codes", frames as f64 / yued_protocol::request::mm3::FRAME_RATE)?;
        // Each component's file is fixed here (an empty field: the first of its kind by name),
        // so the job and its replays name the files they rendered with, and no other job's
        // choice changes this one's.
        for ((field, name), bucket) in req.models_mut().into_iter().zip(Bucket::MM3) {
            *name = m.registry.resolve(bucket, name).map_err(|e| format!("{field}: {e}"))?.name.clone();
        }
        yued_engine::models::mm3::prompt::build(&m.tokenizer, &m.tokens, &req.caption, &req.lyrics).map_err(|e| {
            // The longer of the prompt's two texts is the one to shorten.
            let longer = m.tokenizer.encode(&req.caption).len() > m.tokenizer.encode(&req.lyrics).len();
            format!("{}: {e}", if longer { "caption" } else { "lyrics" })
        })?;
        Ok(req.with_resolved_seeds(random_u64).into())
    }

    fn check_options(&self, req: Request, st: &AppState) -> Result<Request, String> {
        let mut r = own(req);
        let m = served(st)?;
        r.validate_options(&Limits { mm3_codebooks: m.codebooks, ..st.limits }).map_err(|e| e.to_string())?;
        // The file is fixed now, so the job decodes with the VAE that was checked here.
        r.vae_model =
            m.registry.resolve(Bucket::Mm3Vae, &r.vae_model).map_err(|e| format!("vae_model: {e}"))?.name.clone();
        Ok(Request::Mm3(r))
    }

    fn vae_facts(&self, req: &Request, st: &AppState) -> Result<VaeFacts, String> {
        let m = served(st)?;
        let vae_model = req.as_mm3().map_or("", |r| r.vae_model.as_str());
        let entry = m.registry.resolve(Bucket::Mm3Vae, vae_model).map_err(|e| format!("vae_model: {e}"))?;
        let f = yued_engine::gguf::GgufFile::open(&entry.path).map_err(|e| format!("vae_model: {e}"))?;
        let info = yued_engine::models::mm3::vae::VaeModel::info(&f).map_err(|e| format!("vae_model: {e}"))?;
        Ok(VaeFacts {
            audio: info.audio_spec(),
            has_encoder: f.tensor("encoder.conv_in.weight").is_some(),
            max_seconds: MAX_FRAMES as f64 / FRAME_RATE,
            limit: "song limit",
        })
    }

    fn boundary(&self) -> &'static str {
        MM3_MULTIPART_BOUNDARY
    }

    fn schema_name(&self) -> &'static str {
        "Mm3Body"
    }

    fn body_schema(&self, f: &Facts) -> Value {
        body(f)
    }

    /// Caption and lyrics may be left out; the family must be named.
    fn options_schema(&self, mut m: Value) -> Value {
        for field in ["caption", "lyrics"] {
            m["properties"][field] = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        }
        m["required"] = json!(["family"]);
        m["properties"]["family"] = json!({"const": "mm3"});
        m["description"] = "MiniMax Music 3's options (\"family\": \"mm3\")".into();
        m
    }

    /// A caption is required: the style, or "a song" without one.
    fn text_body(&self, lyrics: &str, style: &str, output_format: &str, _st: &AppState) -> Value {
        let caption = if style.is_empty() { "a song" } else { style };
        json!({"family": "mm3", "lyrics": lyrics, "caption": caption, "output_format": output_format})
    }
}

/// MiniMax Music 3's `POST /synth` body.
pub(super) fn body(f: &Facts) -> Value {
    let mut s = body_schema::<Mm3Request>();
    apply_limits(&mut s, f, f.limits.max_steps.min(MM3_MAX_STEPS));
    for (field, files) in &f.mm3_models {
        let mut names = vec![Value::from("")];
        names.extend(files.iter().map(|n| Value::from(n.as_str())));
        set(&mut s, field, "enum", Value::Array(names));
    }
    for field in ["caption", "lyrics"] {
        set(&mut s, field, "pattern", yued_protocol::request::NOT_BLANK.into());
    }
    nullable_fields(&mut s, &["caption", "lyrics"]);
    let o = s.as_object_mut().expect("an object schema");
    o.insert("required".into(), json!(["caption", "lyrics"]));
    o.get_mut("properties").and_then(Value::as_object_mut).expect("properties").insert(
        "family".into(),
        json!({"enum": ["mm3", null], "description": "mm3 (may be left out when the body has \
            a MiniMax field such as caption and no YuE2 one)"}),
    );
    o.insert("title".into(), "MiniMax Music 3 request".into());
    o.insert(
        "description".into(),
        "A MiniMax Music 3 song: a caption and lyrics (minimaxmusic.cpp's architecture reference), neither blank. \
            Every other field is optional (null is the same as left out); unknown fields are ignored. Rules beyond \
            this schema, each a 400 naming its field: audio_codes holds whole frames of 8 values (at least 2 frames, \
            at most 9001), each below its codebook's size; the prompt's tokens fit the LM's budget."
            .into(),
    );
    if let Some(r) = routing(f, Family::Mm3) {
        o.insert("anyOf".into(), r["anyOf"].clone());
    }
    s
}
