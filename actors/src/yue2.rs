//! YuE2 as the ModelStore and the stages see it: its components (the AR half, the NAR half,
//! the VAE), their coexistence groups ({ AR } and the synthesis group { NAR, VAE }) and how
//! each loads.
use crate::model_store::{Component, ComponentKey, Group, Module};
use crate::worker::WorkerConfig;
use std::any::Any;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::pipeline::Shared;
use yued_engine::models::yue2::vae::VaeModel;
use yued_protocol::Family;

/// The AR half's group.
pub const AR_GROUP: &str = "ar";
/// The NAR half and the VAE: what renders a song once its codes are written.
pub const SYNTHESIS_GROUP: &str = "synthesis";

pub fn synthesis_group() -> Group {
    Group { family: Family::Yue2, name: SYNTHESIS_GROUP }
}

pub fn ar(cfg: &WorkerConfig) -> ComponentKey {
    ComponentKey { family: Family::Yue2, component: "ar", group: AR_GROUP, file: cfg.model.clone() }
}
pub fn nar(cfg: &WorkerConfig) -> ComponentKey {
    ComponentKey { family: Family::Yue2, component: "nar", group: SYNTHESIS_GROUP, file: cfg.model.clone() }
}
pub fn vae(cfg: &WorkerConfig) -> ComponentKey {
    ComponentKey { family: Family::Yue2, component: "vae", group: SYNTHESIS_GROUP, file: cfg.vae.clone() }
}

/// Every component, in load order (the warm-up under `--keep-loaded`).
pub fn components(cfg: &WorkerConfig) -> Vec<ComponentKey> {
    vec![ar(cfg), nar(cfg), vae(cfg)]
}

/// Loads a YuE2 component from its file; the backbone's config comes from `shared`.
pub fn load(key: &ComponentKey, backend: &Backend, shared: &Shared) -> Result<Module, String> {
    let f = GgufFile::open(&key.file).map_err(|e| e.to_string())?;
    Ok(match key.component {
        "ar" => Box::new(ArModel::load(&f, &shared.info, backend).map_err(|e| e.to_string())?),
        "nar" => Box::new(NarModel::load(&f, &shared.info, backend).map_err(|e| e.to_string())?),
        "vae" => Box::new(VaeModel::load(&f, backend).map_err(|e| e.to_string())?),
        other => return Err(format!("YuE2 has no component '{other}'")),
    })
}

macro_rules! component {
    ($t:ty) => {
        impl Component for $t {
            fn weight_bytes(&self) -> usize {
                <$t>::weight_bytes(self)
            }
            fn as_any_mut(&mut self) -> &mut dyn Any {
                self
            }
        }
    };
}
component!(ArModel);
component!(NarModel);
component!(VaeModel);
