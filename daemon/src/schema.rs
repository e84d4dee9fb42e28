//! The pieces the OpenAPI document is built from: what it depends on besides the types
//! ([`Facts`]) and the schema helpers each kind's body is made with (schemars' derive as the
//! daemon reads a body, this daemon's bounds, nullable fields, the routing of a body to its
//! kind).
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};
use yued_protocol::{Family, Limits, OutputFormat};

/// What the document depends on besides the types.
pub struct Facts {
    pub families: Vec<Family>,
    pub limits: Limits,
    /// The output formats this build encodes.
    pub formats: Vec<OutputFormat>,
    /// MiniMax Music 3's files per component field (`lm_model`, ...), when served.
    pub mm3_models: Vec<(&'static str, Vec<String>)>,
    /// The usable adapters of `--adapters` (none: a request may name none).
    pub adapters: Vec<String>,
    /// The ids `GET /v1/models` lists (families and files), each with the family it names.
    pub model_ids: Vec<(String, Family)>,
    pub api_keys: bool,
    pub max_body_bytes: usize,
    pub max_upload_bytes: usize,
    pub link_ttl_secs: u64,
    /// Whether `POST /tokenize` is served (an audio tokenizer).
    pub tokenize: bool,
    /// Whether `POST /transcribe` and `POST /v1/audio/transcriptions` are served.
    pub transcribe: bool,
}

/// The schema of `T` as the daemon reads it (a request body), self-contained.
pub(crate) fn body_schema<T: JsonSchema>() -> Value {
    let mut g = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).for_deserialize().into_generator();
    let mut s = g.root_schema_for::<T>().to_value();
    if let Some(o) = s.as_object_mut() {
        o.remove("$schema");
    }
    integer_bounds(&mut s);
    s
}

/// The range of each Rust integer type, where the derive only names its format (a larger
/// number does not parse, so it is outside the schema too).
pub(crate) fn integer_bounds(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let range = match o.get("format").and_then(Value::as_str) {
                Some("uint32") => Some((json!(0), json!(u32::MAX))),
                Some("int64") => Some((json!(i64::MIN), json!(i64::MAX))),
                Some("uint64") => Some((json!(0), json!(u64::MAX))),
                Some("int32") => Some((json!(i32::MIN), json!(i32::MAX))),
                _ => None,
            };
            if let Some((lo, hi)) = range {
                o.entry("minimum").or_insert(lo);
                o.entry("maximum").or_insert(hi);
            }
            o.values_mut().for_each(integer_bounds);
        }
        Value::Array(a) => a.iter_mut().for_each(integer_bounds),
        _ => {}
    }
}

/// Every property may also be `null` (a null field is an omitted one), and nested objects
/// (the sampling presets) complete from their defaults: nothing in them is required.
pub(crate) fn nullable_fields(schema: &mut Value, keep_required: &[&str]) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return };
    for (name, p) in props.iter_mut() {
        if p.get("type").and_then(Value::as_str) == Some("object") {
            if let Some(o) = p.as_object_mut() {
                o.remove("required");
            }
        }
        if keep_required.contains(&name.as_str()) {
            continue;
        }
        let mut inner = p.take();
        let mut wrapper = Map::new();
        if let Some(o) = inner.as_object_mut() {
            for k in ["description", "default", "title"] {
                if let Some(v) = o.remove(k) {
                    wrapper.insert(k.into(), v);
                }
            }
        }
        wrapper.insert("anyOf".into(), json!([inner, {"type": "null"}]));
        *p = Value::Object(wrapper);
    }
}

pub(crate) fn set(schema: &mut Value, field: &str, key: &str, value: Value) {
    if let Some(p) = schema.pointer_mut(&format!("/properties/{field}")).and_then(Value::as_object_mut) {
        p.insert(key.into(), value);
    }
}

/// Bounds of this daemon on a family's body (before the fields become nullable).
pub(crate) fn apply_limits(schema: &mut Value, f: &Facts, max_steps: u32) {
    let l = &f.limits;
    set(schema, "lm_batch_size", "maximum", l.max_batch.into());
    set(schema, "synth_batch_size", "maximum", l.max_synth_batch.into());
    if max_steps < u32::MAX {
        set(schema, "steps", "maximum", max_steps.into());
    }
    let formats: Vec<&str> = f.formats.iter().map(|x| x.name()).collect();
    set(schema, "output_format", "enum", json!(formats));
    if let Some(p) = schema.pointer_mut("/properties/output_format").and_then(Value::as_object_mut) {
        p.remove("oneOf");
        p.insert("type".into(), "string".into());
    }
}

/// "Some non-null value": what makes a field route a body to its family.
pub(crate) fn present(fields: &[&str]) -> Value {
    Value::Array(
        fields.iter().map(|k| json!({"required": [k], "properties": {*k: {"not": {"type": "null"}}}})).collect(),
    )
}

/// The clause that routes a body to `family` where other kinds are served: it names the
/// family, or holds no field of another served kind (`None` when it is served alone).
pub(crate) fn routing(f: &Facts, family: Family) -> Option<Value> {
    let others: Vec<&str> =
        f.families.iter().filter(|&&g| g != family).flat_map(|g| g.own_fields().iter().copied()).collect();
    if others.is_empty() {
        return None;
    }
    Some(json!({"anyOf": [{"required": ["family"], "properties": {"family": {"const": family.as_str()}}},
        {"not": {"anyOf": present(&others)}}]}))
}
