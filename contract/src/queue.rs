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

/// Whether a principal holding `held` jobs is refused the cap's last free place (with `active`
/// jobs in all, fewer than `cap`): kept for one that holds none, so two principals at their
/// share never lock a third out. A share as large as the cap (one user) keeps nothing. The
/// single node's scheduler and a cluster's API nodes both ask it.
pub fn keeps_last_place(held: usize, share: usize, cap: usize, active: usize) -> bool {
    held > 0 && share < cap && cap.saturating_sub(active) == 1
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_place_goes_to_a_principal_holding_none() {
        use super::keeps_last_place;
        // Cap 8, share 4: seven taken, one left.
        assert!(keeps_last_place(3, 4, 8, 7), "a principal holding jobs does not take it");
        assert!(!keeps_last_place(0, 4, 8, 7), "a newcomer does");
        assert!(!keeps_last_place(3, 4, 8, 6), "two places left: either goes");
        assert!(!keeps_last_place(3, 8, 8, 7), "one user (share = cap) keeps nothing back");
    }
}
