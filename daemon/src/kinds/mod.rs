//! The kinds of model the HTTP doors serve, in one list ([`KINDS`]): each kind's request
//! checks (the 400 paths of `/synth` and of a `/vae` upload's options), what its `/vae`
//! uploads are checked against, the boundary of its results, and its body for the doors
//! that take plain text (OpenAI's speech route, the MCP tool), its OpenAPI body. The routes ask a request's
//! kind and hold no arm per family; `/openapi.json` lists each served kind's body. Adding a
//! kind is a file here and its entry in [`KINDS`], beside its stage side in the actors'
//! `kinds`.
use crate::schema::Facts;
use crate::state::AppState;
use serde_json::Value;
use yued_protocol::{Family, Request};

mod mm3;
mod yue2;

/// A kind of model as the HTTP doors see it.
pub trait Kind: Sync {
    fn family(&self) -> Family;

    /// A parsed request of this kind checked against the daemon: its values and bounds, the
    /// files and adapters it names, whether its prompt fits; its seeds resolved. The error
    /// names the field.
    fn check(&self, req: Request, st: &AppState) -> Result<Request, String>;

    /// The options part of a `/vae` upload (no content rule): its values checked, the
    /// files it names fixed.
    fn check_options(&self, req: Request, st: &AppState) -> Result<Request, String>;

    /// What a `/vae` upload of this kind is checked against.
    fn vae_facts(&self, req: &Request, st: &AppState) -> Result<VaeFacts, String>;

    /// The multipart boundary of this kind's results (each family's clients read their own).
    fn boundary(&self) -> &'static str;

    /// The name of its request body among the document's schemas.
    fn schema_name(&self) -> &'static str;

    /// Its `POST /synth` body as this daemon checks it (`/openapi.json`).
    fn body_schema(&self, f: &Facts) -> Value;

    /// Its options in a `/vae` upload, from its body stripped of rules and requirements.
    fn options_schema(&self, stripped: Value) -> Value;

    /// A native body for a song asked in plain text: the lyrics, a style, the format.
    fn text_body(&self, lyrics: &str, style: &str, output_format: &str, st: &AppState) -> Value;
}

/// What a `/vae` upload is checked against: the kind's VAE (its latent width and rates,
/// whether it can encode) and the longest audio a job may carry.
pub struct VaeFacts {
    pub audio: yued_engine::models::AudioSpec,
    pub has_encoder: bool,
    pub max_seconds: f64,
    /// What the bound is called in an error.
    pub limit: &'static str,
}

/// Every kind this build knows, served or not.
pub static KINDS: [&dyn Kind; 2] = [&yue2::Yue2, &mm3::Mm3];

/// The kind of a family.
pub fn of(family: Family) -> &'static dyn Kind {
    *KINDS.iter().find(|k| k.family() == family).expect("every family has its kind")
}
