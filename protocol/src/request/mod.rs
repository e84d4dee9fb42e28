//! The generation request (`POST /synth` body), its defaults and its bounds.
//!
//! The request is the whole content of a song: a replay request carries the same type with
//! the exact seeds, score and codes of a track. Parsing and validation are split on purpose:
//! [`Yue2Request::from_json`] only checks JSON types, [`Yue2Request::validate`] checks values
//! against the server's [`Limits`], so a client can build a request in code and still get
//! the server's verdict before sending it.
//!
//! One file per concern: [`limits`] (bounds and the error naming a field), [`format`]
//! (output formats), [`sampling`] (stage presets), [`codes`] (code lists), and one per
//! family's request ([`yue2`], [`mm3`]).

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub mod codes;
pub mod format;
pub mod limits;
pub mod mm3;
pub mod sampling;
pub mod yue2;

use codes::check_codes;
pub use codes::{parse_codes, CODES_PATTERN, NOT_BLANK};
pub use format::OutputFormat;
pub use limits::*;
pub use mm3::{Mm3Codebooks, Mm3Request};
pub use sampling::SamplingPreset;
use sampling::{fields_of, parse_body, take_fields};
pub use yue2::{AdapterRef, CotMode, Solver, Yue2Request};

/// The model families a daemon may serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// YuE2 (yue2.cpp's architecture reference).
    Yue2,
    /// MiniMax Music 3 (minimaxmusic.cpp's architecture reference).
    Mm3,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Yue2, Family::Mm3];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Yue2 => "yue2",
            Family::Mm3 => "mm3",
        }
    }

    /// The fields of a request body that only this family's request has.
    pub fn own_fields(self) -> &'static [&'static str] {
        match self {
            Family::Yue2 => &["style", "cot", "abc", "semantic_tokens", "source_tokens"],
            Family::Mm3 => &["caption", "lm_model", "depth_model", "cond_model", "dit_model", "vae_model"],
        }
    }
}

impl FromStr for Family {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Family::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| format!("unknown family '{s}' (yue2 or mm3)"))
    }
}

/// The fields of `body` that `family`'s request does not read, in name order, nested ones
/// by their path (`semantic_sampling.temprature`, `adapters[0].scael`): the request's fields
/// are its JSON schema's properties (and `family`, at the top).
pub fn ignored_fields(body: &Value, family: Family) -> Vec<String> {
    fn schema_of<T: schemars::JsonSchema>() -> Value {
        schemars::schema_for!(T).as_value().clone()
    }
    /// `s` with its `$ref` followed, and of an `anyOf`/`oneOf` (an optional field) the
    /// branch that describes an object or an array.
    fn resolve<'a>(s: &'a Value, root: &'a Value) -> &'a Value {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let mut path = r.trim_start_matches("#/").split('/');
            return path.try_fold(root, |at, k| at.get(k)).map_or(s, |t| resolve(t, root));
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = s.get(key).and_then(Value::as_array) {
                for b in branches {
                    let b = resolve(b, root);
                    if b.get("properties").is_some() || b.get("items").is_some() {
                        return b;
                    }
                }
            }
        }
        s
    }
    fn walk(value: &Value, schema: &Value, root: &Value, path: &str, out: &mut Vec<String>) {
        let schema = resolve(schema, root);
        match (value, schema.get("properties").and_then(Value::as_object), schema.get("items")) {
            (Value::Object(obj), Some(props), _) => {
                for (k, v) in obj {
                    let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    match props.get(k) {
                        Some(s) => walk(v, s, root, &at, out),
                        None if path.is_empty() && k == "family" => {}
                        None => out.push(at),
                    }
                }
            }
            (Value::Array(items), _, Some(s)) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, s, root, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    // The schemas are the types': derived once, not for every submission.
    static YUE2: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    static MM3: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let root = match family {
        Family::Yue2 => YUE2.get_or_init(schema_of::<Yue2Request>),
        Family::Mm3 => MM3.get_or_init(schema_of::<Mm3Request>),
    };
    let mut out = Vec::new();
    walk(body, root, root, "", &mut out);
    out
}

/// Which family a `POST /synth` body is for, among the `served` ones: its `"family"` when
/// given; else the only family served; else the family whose own fields it has (`caption`
/// or a `*_model` component: MiniMax Music 3; `style`, `cot`, `abc`, `semantic_tokens`,
/// `source_tokens`: YuE2); with neither, YuE2 (a MiniMax request cannot be valid without
/// its caption). Both kinds, or a family not served, is an error naming the fields.
pub fn route(body: &Value, served: &[Family]) -> Result<Family, RequestError> {
    let obj = body.as_object().ok_or_else(|| RequestError::new("body", "must be a JSON object"))?;
    let serving = || served.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ");
    let family = match obj.get("family") {
        Some(Value::String(s)) => s.parse::<Family>().map_err(|e| RequestError::new("family", e))?,
        Some(Value::Null) | None => {
            if let [only] = served {
                return Ok(*only);
            }
            let present = |f: Family| {
                f.own_fields().iter().copied().filter(|k| obj.get(*k).is_some_and(|v| !v.is_null())).collect::<Vec<_>>()
            };
            let hits: Vec<(Family, Vec<&str>)> =
                served.iter().map(|&f| (f, present(f))).filter(|(_, h)| !h.is_empty()).collect();
            match hits.as_slice() {
                [(f, _)] => *f,
                // Nothing only MiniMax has: YuE2's (a MiniMax request needs its caption).
                [] if served.contains(&Family::Yue2) => Family::Yue2,
                [] => {
                    return Err(RequestError::new(
                        "family",
                        format!(
                            "the body has no field only one family has: name the family (\"family\": {})",
                            serving()
                        ),
                    ))
                }
                many => {
                    let fields: Vec<String> = many.iter().map(|(f, h)| format!("{} ({})", h.join(", "), f)).collect();
                    return Err(RequestError::new(
                        "family",
                        format!("fields of two families: {}; name the family", fields.join(" and ")),
                    ));
                }
            }
        }
        Some(_) => return Err(RequestError::new("family", "must be a string")),
    };
    if !served.contains(&family) {
        return Err(RequestError::new(
            "family",
            format!("'{family}' is not served by this daemon (it serves {})", serving()),
        ));
    }
    Ok(family)
}

#[cfg(test)]
mod route_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_a_request_does_not_read_are_named() {
        let body = json!({"family": "yue2", "style": "x", "duraton": 3, "cot": "off", "zzz": null});
        assert_eq!(ignored_fields(&body, Family::Yue2), vec!["duraton", "zzz"]);
        // A MiniMax field in a YuE2 request is not YuE2's, and the other way round.
        assert_eq!(ignored_fields(&json!({"caption": "x", "style": "y"}), Family::Mm3), vec!["style"]);
        // Inside objects too: a misspelt sampling field or adapter strength took its default
        // unseen.
        let body = json!({"style": "x", "semantic_sampling": {"temprature": 0.5, "top_k": 3},
            "adapters": [{"name": "a", "scale": 2}, {"name": "b", "scael": 2}]});
        assert_eq!(ignored_fields(&body, Family::Yue2), vec!["adapters[1].scael", "semantic_sampling.temprature"]);
        // Every field a request writes is one it reads (the replay requests go back as bodies).
        let yue2 = serde_json::to_value(Yue2Request::from_json(br#"{"style": "x"}"#).unwrap()).unwrap();
        assert_eq!(ignored_fields(&yue2, Family::Yue2), Vec::<String>::new(), "{yue2}");
        let mm3 = serde_json::to_value(Mm3Request::from_json(br#"{"caption": "x", "lyrics": "l"}"#).unwrap()).unwrap();
        assert_eq!(ignored_fields(&mm3, Family::Mm3), Vec::<String>::new(), "{mm3}");
    }

    #[test]
    fn the_family_is_named_or_follows_from_the_fields() {
        let both = [Family::Yue2, Family::Mm3];
        let yue2 = [Family::Yue2];
        // One family served: every request is its (unknown fields are the family's business).
        assert_eq!(route(&json!({"caption": "x"}), &yue2), Ok(Family::Yue2));
        assert_eq!(route(&json!({}), &yue2), Ok(Family::Yue2));
        // Named.
        assert_eq!(route(&json!({"family": "mm3", "style": "x"}), &both), Ok(Family::Mm3));
        let e = route(&json!({"family": "mm3"}), &yue2).unwrap_err();
        assert_eq!(e.field, "family");
        assert!(e.message.contains("not served") && e.message.contains("yue2"), "{e}");
        assert!(route(&json!({"family": "opera"}), &both).unwrap_err().message.contains("unknown family 'opera'"));
        assert_eq!(route(&json!({"family": 3}), &both).unwrap_err().field, "family");
        // Both served: the fields decide.
        assert_eq!(route(&json!({"style": "pop", "lyrics": "la"}), &both), Ok(Family::Yue2));
        assert_eq!(route(&json!({"caption": "pop", "lyrics": "la"}), &both), Ok(Family::Mm3));
        assert_eq!(route(&json!({"dit_model": "d.gguf"}), &both), Ok(Family::Mm3));
        let e = route(&json!({"caption": "a", "cot": "off"}), &both).unwrap_err();
        assert!(e.message.contains("caption (mm3)") && e.message.contains("cot (yue2)"), "{e}");
        // Neither: YuE2, the family a body of style/lyrics-like fields alone can be valid for.
        assert_eq!(route(&json!({"lyrics": "la"}), &both), Ok(Family::Yue2));
        assert_eq!(route(&json!({}), &both), Ok(Family::Yue2));
        // A null counts as absent.
        assert_eq!(route(&json!({"caption": null, "style": "x"}), &both), Ok(Family::Yue2));
        assert_eq!(route(&json!([1]), &both).unwrap_err().field, "body");
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request of any family, as a job holds it and the journal stores it: the family's
/// own request body with a `"family"` key beside its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "lowercase")]
pub enum Request {
    Yue2(Yue2Request),
    Mm3(Mm3Request),
}

impl Request {
    /// The family of a request body among the `served` ones ([`route`]), parsed as its
    /// family's request (type errors name the field).
    pub fn from_json(body: &[u8], served: &[Family]) -> Result<Request, RequestError> {
        let value = parse_body(body)?;
        match route(&value, served)? {
            Family::Yue2 => Ok(Request::Yue2(Yue2Request::from_value(value)?)),
            Family::Mm3 => Ok(Request::Mm3(Mm3Request::from_value(value)?)),
        }
    }

    pub fn family(&self) -> Family {
        match self {
            Request::Yue2(_) => Family::Yue2,
            Request::Mm3(_) => Family::Mm3,
        }
    }

    /// The container the tracks are written in.
    pub fn output_format(&self) -> OutputFormat {
        match self {
            Request::Yue2(r) => r.output_format,
            Request::Mm3(r) => r.output_format,
        }
    }
    /// The normalisation's percentile control (see the requests).
    pub fn peak_clip(&self) -> i64 {
        match self {
            Request::Yue2(r) => r.peak_clip,
            Request::Mm3(r) => r.peak_clip,
        }
    }
    pub fn mp3_bitrate(&self) -> u32 {
        match self {
            Request::Yue2(r) => r.mp3_bitrate,
            Request::Mm3(r) => r.mp3_bitrate,
        }
    }
    /// Flow-matching steps (per chunk or window).
    pub fn steps(&self) -> u32 {
        match self {
            Request::Yue2(r) => r.steps,
            Request::Mm3(r) => r.steps,
        }
    }

    /// The YuE2 request, if it is one.
    pub fn as_yue2(&self) -> Option<&Yue2Request> {
        match self {
            Request::Yue2(r) => Some(r),
            Request::Mm3(_) => None,
        }
    }

    /// The MiniMax Music 3 request, if it is one.
    pub fn as_mm3(&self) -> Option<&Mm3Request> {
        match self {
            Request::Mm3(r) => Some(r),
            Request::Yue2(_) => None,
        }
    }
}

impl From<Yue2Request> for Request {
    fn from(r: Yue2Request) -> Self {
        Request::Yue2(r)
    }
}

impl From<Mm3Request> for Request {
    fn from(r: Mm3Request) -> Self {
        Request::Mm3(r)
    }
}
