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
