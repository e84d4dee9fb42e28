//! The sampling parameters of an autoregressive stage, and the field-by-field JSON reader
//! that completes a partial object from the stage's defaults.
use super::*;

/// Sampling parameters of one autoregressive stage.
///
/// Standalone deserialization needs every field; inside a request a partial object is
/// completed from that stage's checkpoint preset.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SamplingPreset {
    #[schemars(range(min = 0, max = 5))]
    pub temperature: f64,
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 1))]
    pub top_p: f64,
    #[schemars(range(min = 1))]
    pub top_k: u32,
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub repetition_penalty: f64,
    /// Tokens looked back over by the repetition penalty.
    #[schemars(range(min = 1, max = 100))]
    pub penalty_window: u32,
    /// The end token is blocked until this many tokens were sampled (at most `max_tokens`).
    pub min_tokens: u32,
    /// Token budget of the stage.
    #[schemars(range(min = 1))]
    pub max_tokens: u32,
}

impl SamplingPreset {
    /// Checkpoint preset of the score (ABC) stage.
    pub fn abc_default() -> Self {
        Self {
            temperature: 0.7,
            top_p: 0.9,
            top_k: 30,
            repetition_penalty: 1.005,
            penalty_window: 100,
            min_tokens: 32,
            max_tokens: 4096,
        }
    }

    /// Checkpoint preset of the semantic stage (9000 frames is six minutes at 25 Hz).
    pub fn semantic_default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 0.95,
            top_k: 100,
            repetition_penalty: 1.2,
            penalty_window: 50,
            min_tokens: 200,
            max_tokens: 9000,
        }
    }

    /// Checks the protocol bounds; `prefix` is the request field holding this preset.
    pub fn validate(&self, prefix: &str) -> Result<(), RequestError> {
        let err = |name: &str, msg: String| Err(RequestError::new(format!("{prefix}.{name}"), msg));
        if !(0.0..=5.0).contains(&self.temperature) {
            return err("temperature", format!("must be in [0, 5], got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return err("top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        if self.top_k < 1 {
            return err("top_k", "must be at least 1, got 0".into());
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return err("repetition_penalty", format!("must be positive, got {}", self.repetition_penalty));
        }
        if !(1..=100).contains(&self.penalty_window) {
            return err("penalty_window", format!("must be in [1, 100], got {}", self.penalty_window));
        }
        if self.max_tokens < 1 {
            return err("max_tokens", "must be at least 1, got 0".into());
        }
        if self.min_tokens > self.max_tokens {
            return err(
                "min_tokens",
                format!("must not exceed max_tokens ({}), got {}", self.max_tokens, self.min_tokens),
            );
        }
        Ok(())
    }

    /// Overlays the keys present in `value` on `self`.
    pub(crate) fn overlay(mut self, value: Value, prefix: &str) -> Result<Self, RequestError> {
        let Value::Object(mut obj) = value else {
            return Err(RequestError::new(prefix, "must be an object"));
        };
        let path = |key: &str| format!("{prefix}.{key}");
        take(&mut obj, &path("temperature"), "temperature", &mut self.temperature)?;
        take(&mut obj, &path("top_p"), "top_p", &mut self.top_p)?;
        take(&mut obj, &path("top_k"), "top_k", &mut self.top_k)?;
        take(&mut obj, &path("repetition_penalty"), "repetition_penalty", &mut self.repetition_penalty)?;
        take(&mut obj, &path("penalty_window"), "penalty_window", &mut self.penalty_window)?;
        take(&mut obj, &path("min_tokens"), "min_tokens", &mut self.min_tokens)?;
        take(&mut obj, &path("max_tokens"), "max_tokens", &mut self.max_tokens)?;
        Ok(self)
    }
}

/// Parses a request body; malformed JSON is reported on the pseudo field `body`.
pub(crate) fn parse_body(bytes: &[u8]) -> Result<Value, RequestError> {
    serde_json::from_slice(bytes).map_err(|e| RequestError::new("body", format!("malformed JSON: {e}")))
}

/// The fields of a request body, which must be a JSON object.
pub(crate) fn fields_of(value: Value) -> Result<Map<String, Value>, RequestError> {
    match value {
        Value::Object(obj) => Ok(obj),
        _ => Err(RequestError::new("body", "request must be a JSON object")),
    }
}

/// Moves each named key of `obj` into the field of `r` of the same name ([`take`]).
macro_rules! take_fields {
    ($obj:ident, $r:ident, $($name:ident),* $(,)?) => {
        $( crate::request::sampling::take(&mut $obj, stringify!($name), stringify!($name), &mut $r.$name)?; )*
    };
}
pub(crate) use take_fields;

/// Moves `obj[key]` into `slot` when present and not null; type errors name `field`. An
/// integer field takes an integral number written with a fraction (`6.0`): JSON Schema
/// counts it as an integer, and so do the SDKs that send one.
pub(crate) fn take<T: DeserializeOwned>(
    obj: &mut Map<String, Value>,
    field: &str,
    key: &str,
    slot: &mut T,
) -> Result<(), RequestError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => {
            let integral = integral(&v);
            *slot = match serde_json::from_value(v) {
                Ok(x) => x,
                Err(e) => match integral.map(serde_json::from_value) {
                    Some(Ok(x)) => x,
                    _ => return Err(RequestError::new(field, e.to_string())),
                },
            };
            Ok(())
        }
    }
}

/// The integer a JSON number with a zero fraction stands for (`6.0` → `6`), within the
/// range a double holds exactly.
pub(crate) fn integral(v: &Value) -> Option<Value> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let f = v.as_f64().filter(|_| v.is_f64())?;
    (f.fract() == 0.0 && f.abs() <= EXACT).then(|| if f < 0.0 { Value::from(f as i64) } else { Value::from(f as u64) })
}
