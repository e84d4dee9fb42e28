//! YuE2 at the HTTP doors: its request checks (values, adapters, the KV cache), the `/vae`
//! facts of its Oobleck VAE, its results' boundary, its OpenAPI body and its body for plain
//! text.
use super::{Kind, VaeFacts};
use crate::cli::common::random_u64;
use crate::schema::{apply_limits, body_schema, nullable_fields, routing, set, Facts};
use crate::state::AppState;
use serde_json::{json, Value};
use yued_protocol::{Family, Request, Yue2Request, MULTIPART_BOUNDARY};

pub struct Yue2;

fn own(req: Request) -> Yue2Request {
    match req {
        Request::Yue2(r) => r,
        other => panic!("YuE2's kind got a {} request", other.family()),
    }
}

impl Kind for Yue2 {
    fn family(&self) -> Family {
        Family::Yue2
    }

    fn check(&self, req: Request, st: &AppState) -> Result<Request, String> {
        let mut req = own(req);
        // The family's default steps under a lower --max-steps: the bound, not a refusal of
        // a request that never named them.
        if req.steps == Yue2Request::default().steps {
            req.steps = req.steps.min(st.limits.max_steps.max(1));
        }
        req.validate(&st.limits).map_err(|e| e.to_string())?;
        req.duration = st.cap_duration(req.duration);
        let codes = req.semantic_tokens.split(',').filter(|c| !c.trim().is_empty()).count();
        st.check_codes_length("semantic_tokens", codes as f64 / f64::from(yued_protocol::FRAME_RATE))?;
        check_adapters(&req, st)?;
        let p = &st.prompt;
        let builder = yued_engine::models::yue2::prompt::PromptBuilder {
            tokenizer: &p.tokenizer,
            tokens: p.tokens,
            instructions: &p.instructions,
        };
        let req = req.with_resolved_seeds(random_u64);
        let s = yued_actors::settings::yue2(&req).map_err(|e| e.to_string())?;
        yued_engine::models::yue2::generate::check_fits(&builder, st.limits.context as usize, &s)
            .map_err(|e| yued_actors::settings::invalid(e).to_string())?;
        Ok(req.into())
    }

    fn check_options(&self, req: Request, st: &AppState) -> Result<Request, String> {
        let r = own(req);
        r.validate_options(&st.limits).map_err(|e| e.to_string())?;
        Ok(Request::Yue2(r))
    }

    fn vae_facts(&self, _req: &Request, st: &AppState) -> Result<VaeFacts, String> {
        let audio = st.vae.audio;
        Ok(VaeFacts {
            audio,
            has_encoder: st.vae.has_encoder,
            max_seconds: st.limits.context as f64 / audio.latent_rate(),
            limit: "context",
        })
    }

    fn boundary(&self) -> &'static str {
        MULTIPART_BOUNDARY
    }

    /// On the demo's random weights the model cannot write a score: straight to the codes.
    fn schema_name(&self) -> &'static str {
        "Yue2Body"
    }

    fn body_schema(&self, f: &Facts) -> Value {
        body(f)
    }

    fn options_schema(&self, mut stripped: Value) -> Value {
        stripped["description"] = "YuE2's options (no family, or \"family\": \"yue2\")".into();
        stripped
    }

    fn text_body(&self, lyrics: &str, style: &str, output_format: &str, st: &AppState) -> Value {
        let mut v = json!({"family": "yue2", "lyrics": lyrics, "style": style, "output_format": output_format});
        if st.demo_weights {
            v["cot"] = "off".into();
        }
        v
    }
}

/// Each of a YuE2 request's adapters names a usable adapter of the `--adapters` directory.
fn check_adapters(req: &Yue2Request, st: &AppState) -> Result<(), String> {
    for (i, a) in req.adapters.iter().enumerate() {
        match &st.adapters {
            None => return Err(format!("adapters[{i}].name: '{}': this daemon has no --adapters directory", a.name)),
            Some(d) => {
                d.get(&a.name).map_err(|e| format!("adapters[{i}].name: {e}"))?;
            }
        }
    }
    Ok(())
}

/// YuE2's `POST /synth` body.
pub(super) fn body(f: &Facts) -> Value {
    let mut s = body_schema::<Yue2Request>();
    apply_limits(&mut s, f, f.limits.max_steps);
    if f.adapters.is_empty() {
        set(&mut s, "adapters", "maxItems", 0.into());
    } else if let Some(items) =
        s.pointer_mut("/properties/adapters/items/properties/name").and_then(Value::as_object_mut)
    {
        items.insert("enum".into(), json!(f.adapters));
    }
    nullable_fields(&mut s, &[]);
    let o = s.as_object_mut().expect("an object schema");
    o.remove("required");
    o.get_mut("properties")
        .and_then(Value::as_object_mut)
        .expect("properties")
        .insert("family".into(), json!({"enum": ["yue2", null], "description": "yue2 (may be left out)"}));
    o.insert("title".into(), "YuE2 request".into());
    o.insert(
        "description".into(),
        "A YuE2 song: style tags and lyrics (yue2.cpp's architecture reference). Every field is optional (null is the \
            same as left out) but the body needs some content: a style, lyrics, an abc score, semantic_tokens or \
            source_tokens. Unknown fields are ignored. Rules beyond this schema, each a 400 naming its field: codes \
            must be below the model's codebook size and fit its context; source_tokens excludes semantic_tokens; \
            source_start must lie inside the source and source_end (unless -1) at or after it; min_tokens of a \
            sampling preset must not exceed its max_tokens; the prompt, score budget and codes must fit the KV cache \
            (\"do not fit\")."
            .into(),
    );
    let content = json!([
        {"required": ["style"], "properties": {"style": {"type": "string", "minLength": 1}}},
        {"required": ["lyrics"], "properties": {"lyrics": {"type": "string", "minLength": 1}}},
        {"required": ["abc"], "properties": {"abc": {"type": "string", "minLength": 1}}},
        {"required": ["semantic_tokens"], "properties": {"semantic_tokens": {"type": "string",
            "pattern": "[^ \\t\\n\\f\\r]"}}},
        {"required": ["source_tokens"], "properties": {"source_tokens": {"type": "string",
            "pattern": "[^ \\t\\n\\f\\r]"}}},
    ]);
    let mut all = vec![json!({"anyOf": content})];
    // Left unnamed, a body with a field of another served kind is that kind's.
    all.extend(routing(f, Family::Yue2));
    o.insert("allOf".into(), Value::Array(all));
    s
}
