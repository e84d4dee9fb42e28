//! The fair queue: one FIFO per client, served round-robin, so one client's burst cannot
//! starve another's single job. It knows nothing of jobs but their ids and whose they are;
//! the admission cap is the scheduler's (it counts [`FairQueue::len`] with the running jobs).
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Round-robin over clients, FIFO within a client.
#[derive(Debug)]
pub struct FairQueue<T> {
    queues: HashMap<String, VecDeque<T>>,
    /// Clients with queued items, in serving order.
    rr: VecDeque<String>,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue { queues: HashMap::new(), rr: VecDeque::new() }
    }
}

impl<T: Clone + PartialEq + Eq + Hash> FairQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `item` behind `client`'s earlier ones.
    pub fn push(&mut self, client: &str, item: T) {
        let q = self.queues.entry(client.to_string()).or_default();
        if q.is_empty() && !self.rr.iter().any(|c| c == client) {
            self.rr.push_back(client.to_string());
        }
        q.push_back(item);
    }

    /// Puts `item` back at the head of the queue: served next, before every client's.
    pub fn push_front(&mut self, client: &str, item: T) {
        self.queues.entry(client.to_string()).or_default().push_front(item);
        self.rr.retain(|c| c != client);
        self.rr.push_front(client.to_string());
    }

    /// Items queued, every client together.
    pub fn len(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rr.is_empty()
    }

    /// Clients with something queued.
    pub fn clients(&self) -> usize {
        self.queues.len()
    }

    /// The serving order of everything queued (the positions a client is told).
    pub fn order(&self) -> Vec<T> {
        let mut qs: Vec<VecDeque<T>> = self.rr.iter().filter_map(|c| self.queues.get(c).cloned()).collect();
        let mut out = Vec::new();
        while qs.iter().any(|q| !q.is_empty()) {
            for q in qs.iter_mut() {
                if let Some(j) = q.pop_front() {
                    out.push(j);
                }
            }
        }
        out
    }

    /// The item served next, without taking it.
    pub fn peek(&self) -> Option<&T> {
        self.rr.front().and_then(|c| self.queues.get(c)).and_then(|q| q.front())
    }

    /// `item`'s place in the serving order (0 = next).
    pub fn position(&self, item: &T) -> Option<usize> {
        self.order().iter().position(|j| j == item)
    }

    /// Takes the next item: the front of the next client's queue; that client goes to the
    /// back of the round if it has more.
    pub fn pop(&mut self) -> Option<T> {
        while let Some(client) = self.rr.pop_front() {
            if let Some(q) = self.queues.get_mut(&client) {
                if let Some(j) = q.pop_front() {
                    if q.is_empty() {
                        self.queues.remove(&client);
                    } else {
                        self.rr.push_back(client);
                    }
                    return Some(j);
                }
            }
            self.queues.remove(&client);
        }
        None
    }

    /// Removes `item` wherever it waits; whether it was queued.
    pub fn remove(&mut self, item: &T) -> bool {
        let before = self.len();
        for q in self.queues.values_mut() {
            q.retain(|j| j != item);
        }
        self.queues.retain(|_, q| !q.is_empty());
        let queues = &self.queues;
        self.rr.retain(|c| queues.contains_key(c));
        self.len() < before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_does_not_starve_another_client() {
        let mut q = FairQueue::new();
        for i in 0..5 {
            q.push("burst", i);
        }
        q.push("single", 100);
        assert_eq!(q.order(), vec![0, 100, 1, 2, 3, 4], "the single job goes second, not sixth");
        assert_eq!(q.position(&100), Some(1));
        assert_eq!(q.peek(), Some(&0));
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(0), Some(100), Some(1)));
        // A client that comes back joins the end of the round.
        q.push("single", 101);
        assert_eq!(q.order(), vec![2, 101, 3, 4]);
        assert_eq!(q.len(), 4);
        assert_eq!(q.clients(), 2);
    }

    #[test]
    fn fifo_within_a_client_and_three_clients_take_turns() {
        let mut q = FairQueue::new();
        for (c, j) in [("a", 1), ("a", 2), ("b", 10), ("c", 20), ("b", 11), ("c", 21), ("a", 3)] {
            q.push(c, j);
        }
        let mut served = Vec::new();
        while let Some(j) = q.pop() {
            served.push(j);
        }
        assert_eq!(served, vec![1, 10, 20, 2, 11, 21, 3]);
        assert!(q.is_empty() && q.clients() == 0);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn removal_keeps_the_round_and_the_counts() {
        let mut q = FairQueue::new();
        q.push("a", 1);
        q.push("b", 2);
        q.push("b", 3);
        assert!(q.remove(&1));
        assert!(!q.remove(&1), "already gone");
        assert_eq!((q.len(), q.clients()), (2, 1));
        assert_eq!(q.order(), vec![2, 3]);
        assert!(q.remove(&2) && q.remove(&3));
        assert!(q.is_empty() && q.pop().is_none());
        // Counts follow every push and pop (the scheduler's admission cap counts them).
        for i in 0..8 {
            q.push(if i % 2 == 0 { "x" } else { "y" }, i);
            assert_eq!(q.len(), i + 1);
        }
        for i in 0..8 {
            q.pop();
            assert_eq!(q.len(), 7 - i);
        }
    }
}
