//! The cluster's own figures, on the node's registry beside the per-node `yued_` metrics:
//! every node reports what it sees of the whole (queue depth, workers alive), so any one
//! node's `/metrics` answers for the cluster.
use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge};
use yued_contract::metrics::Metrics;

#[derive(Clone)]
pub struct ClusterMetrics {
    /// Jobs in the jobs stream not yet taken by a worker.
    pub queue_depth: IntGauge,
    /// Jobs the live workers report running.
    pub jobs_running: IntGauge,
    /// Workers that reported within their heartbeat's expiry.
    pub workers_alive: IntGauge,
    /// Jobs this worker started again after the worker that ran them went silent.
    pub redeliveries_total: IntCounter,
    /// Jobs this worker took and lost to another (it stopped writing them).
    pub jobs_lost_total: IntCounter,
    /// From a tile leaving its worker's hub to its listener's task on this API node.
    pub tile_latency_seconds: Histogram,
}

impl ClusterMetrics {
    pub fn register(m: &Metrics) -> Self {
        let c = ClusterMetrics {
            queue_depth: IntGauge::new(
                "yued_cluster_queue_depth_jobs",
                "Jobs queued in the cluster, not yet taken by a worker",
            )
            .unwrap(),
            jobs_running: IntGauge::new("yued_cluster_jobs_running", "Jobs the cluster's live workers are running")
                .unwrap(),
            workers_alive: IntGauge::new(
                "yued_cluster_workers_alive",
                "Workers that reported within their heartbeat expiry",
            )
            .unwrap(),
            redeliveries_total: IntCounter::new(
                "yued_cluster_redeliveries_total",
                "Jobs this worker resumed after another worker went silent on them",
            )
            .unwrap(),
            jobs_lost_total: IntCounter::new(
                "yued_cluster_jobs_lost_total",
                "Jobs this worker stopped because another worker had taken them over",
            )
            .unwrap(),
            tile_latency_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "yued_cluster_tile_latency_seconds",
                    "From a tile leaving its worker's pipeline to a listener on this API node, through JetStream",
                )
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).unwrap()),
            )
            .unwrap(),
        };
        m.registry.register(Box::new(c.tile_latency_seconds.clone())).expect("a cluster histogram registers once");
        for g in [&c.queue_depth, &c.jobs_running, &c.workers_alive] {
            m.registry.register(Box::new(g.clone())).expect("a cluster gauge registers once");
        }
        for k in [&c.redeliveries_total, &c.jobs_lost_total] {
            m.registry.register(Box::new(k.clone())).expect("a cluster counter registers once");
        }
        c
    }
}
