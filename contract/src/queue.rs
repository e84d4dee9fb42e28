//! The queue's figures, as `/health`, `/status` and `/system/queue` show them.

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct QueueSnapshot {
    pub queued: usize,
    /// Jobs in the compute stages (several overlap under --keep-loaded).
    /// Without an admin key: only the caller's own.
    pub running: Vec<String>,
    pub cap: usize,
    /// The most jobs one principal may have queued or running at once.
    pub share: usize,
    pub worker_ready: bool,
    pub accepting: bool,
    pub clients_waiting: usize,
    /// The box's stores: the jobs the journal knows, the results kept and their bytes. An
    /// admin's (anyone's on a box without keys): a user's key sees its own jobs in `/jobs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs_known: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results_stored: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results_bytes: Option<u64>,
    /// Why the last journal write failed, while writes fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
}
