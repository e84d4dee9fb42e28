//! The kinds of model this node serves, in one list: each kind's stage driver (a
//! [`ModelFamily`]), its components' loader and what `--keep-loaded` loads before the
//! daemon reports ready. Adding a kind is its module and an entry in each of these.
use crate::family::{ModelFamily, StageError};
use crate::model_store::{ComponentKey, Loader};
use crate::stage::{Links, WorkerConfig};
use std::sync::Arc;
use yued_engine::models::yue2::adapter::{Adapter, AdapterDir};
use yued_engine::models::yue2::pipeline::Shared;
use yued_protocol::Family;

/// The families this daemon serves, keyed by [`Family`].
pub(crate) struct Families {
    served: Vec<Box<dyn ModelFamily>>,
}

impl Families {
    /// YuE2 always (`shared` is its backbone, `None` when it failed to open), MiniMax
    /// Music 3 when the registry holds its five components.
    pub fn new(links: &Links, shared: Option<Arc<Shared>>) -> Self {
        let mut served: Vec<Box<dyn ModelFamily>> = vec![Box::new(crate::yue2::Yue2::new(shared))];
        if let Some(reg) = links.cfg.mm3.clone() {
            served.push(Box::new(crate::mm3::Mm3::new(reg)));
        }
        Families { served }
    }

    pub fn get(&mut self, family: Family) -> Result<&mut dyn ModelFamily, StageError> {
        match self.served.iter_mut().find(|f| f.family() == family) {
            Some(f) => Ok(f.as_mut()),
            None => Err(StageError::Failed(format!("{family} is not served by this daemon"))),
        }
    }

    /// The synthesis group of a served family.
    pub fn group_of(&self, family: Family) -> Option<crate::model_store::Group> {
        self.served.iter().find(|f| f.family() == family).map(|f| f.synthesis_group())
    }
}

/// The store's loader: each family loads its own components.
pub(crate) fn loader(
    shared: Option<Arc<Shared>>,
    adapters: Option<Arc<AdapterDir>>,
    companion: Option<Arc<Adapter>>,
) -> Box<Loader> {
    Box::new(move |key, backend| match key.family {
        Family::Yue2 if key.group == crate::listen::GROUP => crate::listen::load(key, backend),
        Family::Yue2 => crate::yue2::load(
            key,
            backend,
            shared.as_ref().ok_or("the backbone file did not load; see the daemon log")?,
            adapters.as_deref(),
            companion.as_deref(),
        ),
        Family::Mm3 => crate::mm3::load(key, backend),
    })
}

/// The components `--keep-loaded` loads before the daemon reports ready, in load order.
pub(crate) fn warm_up(cfg: &WorkerConfig) -> Vec<ComponentKey> {
    crate::yue2::components(cfg)
}
