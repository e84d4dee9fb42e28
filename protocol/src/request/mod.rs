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
//! family's request ([`yue2`]).

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub mod codes;
pub mod format;
pub mod limits;
pub mod sampling;
pub mod yue2;

pub use codes::parse_codes;
use codes::check_codes;
pub use format::OutputFormat;
pub use limits::*;
pub use sampling::SamplingPreset;
use sampling::take;
pub use yue2::{AdapterRef, CotMode, Yue2Request};

/// The model families a daemon may serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// YuE2 (seed 000).
    Yue2,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Yue2 => "yue2",
        }
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
}

impl Request {
    pub fn family(&self) -> Family {
        match self {
            Request::Yue2(_) => Family::Yue2,
        }
    }

    /// The YuE2 request, if it is one.
    pub fn as_yue2(&self) -> Option<&Yue2Request> {
        match self {
            Request::Yue2(r) => Some(r),
        }
    }
}

impl From<Yue2Request> for Request {
    fn from(r: Yue2Request) -> Self {
        Request::Yue2(r)
    }
}
