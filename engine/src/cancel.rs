//! A job's cancel flag, shared by the thread that runs a model and whoever owns the job:
//! generation checks it at every step boundary.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared flag a job's owner sets to stop it at the next step boundary.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// Whether both are the same token (clones of one): one run of a job, not another.
    pub fn same(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
