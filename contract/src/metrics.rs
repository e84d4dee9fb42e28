//! Prometheus metrics, all prefixed `yued_` with their unit in the name. The registry is
//! the process's only global-ish state and is passed around explicitly.
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub jobs_submitted_total: IntCounter,
    pub jobs_finished_total: IntCounterVec,
    pub admission_rejections_total: IntCounter,
    pub queue_depth: IntGauge,
    pub jobs_running: IntGauge,
    pub queue_wait_seconds: Histogram,
    pub stage_seconds: HistogramVec,
    pub ar_tokens_total: IntCounterVec,
    pub ar_tokens_per_second: HistogramVec,
    pub real_time_factor: Histogram,
    pub audio_seconds_total: prometheus::Counter,
    pub module_loads_total: IntCounter,
    pub resident_weight_bytes: IntGauge,
    pub kv_sets_in_use: IntGauge,
    pub ws_listeners: IntGauge,
    /// Jobs whose live stream the hub holds (queued to their end).
    pub ws_streams: IntGauge,
    pub ws_bytes_total: IntCounter,
    pub ws_dropped_listeners_total: IntCounter,
    pub cpu_turn_wait_seconds_total: prometheus::Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let m = Metrics {
            jobs_submitted_total: IntCounter::new("yued_jobs_submitted_total", "Jobs accepted by the admission check")
                .unwrap(),
            jobs_finished_total: IntCounterVec::new(
                Opts::new("yued_jobs_finished_total", "Jobs by final status"),
                &["status"],
            )
            .unwrap(),
            admission_rejections_total: IntCounter::new(
                "yued_admission_rejections_total",
                "Submissions refused at the admission cap (HTTP 429)",
            )
            .unwrap(),
            queue_depth: IntGauge::new("yued_queue_depth_jobs", "Jobs waiting in the queue").unwrap(),
            jobs_running: IntGauge::new("yued_jobs_running", "Jobs being computed").unwrap(),
            queue_wait_seconds: Histogram::with_opts(
                HistogramOpts::new("yued_queue_wait_seconds", "Time from submission to start of work")
                    .buckets(prometheus::exponential_buckets(0.01, 3.0, 12).unwrap()),
            )
            .unwrap(),
            stage_seconds: HistogramVec::new(
                HistogramOpts::new("yued_stage_duration_seconds", "Wall time of each pipeline stage")
                    .buckets(prometheus::exponential_buckets(0.01, 3.0, 12).unwrap()),
                &["stage"],
            )
            .unwrap(),
            ar_tokens_total: IntCounterVec::new(
                Opts::new("yued_ar_tokens_total", "Tokens sampled by the autoregressive stages"),
                &["stage"],
            )
            .unwrap(),
            ar_tokens_per_second: HistogramVec::new(
                HistogramOpts::new("yued_ar_tokens_per_second", "Autoregressive decode speed per job and stage")
                    .buckets(prometheus::exponential_buckets(1.0, 2.0, 14).unwrap()),
                &["stage"],
            )
            .unwrap(),
            real_time_factor: Histogram::with_opts(
                HistogramOpts::new("yued_real_time_factor_ratio", "Seconds of audio per second of pipeline work")
                    .buckets(prometheus::exponential_buckets(0.01, 2.0, 14).unwrap()),
            )
            .unwrap(),
            audio_seconds_total: prometheus::Counter::new(
                "yued_audio_produced_seconds_total",
                "Seconds of audio rendered",
            )
            .unwrap(),
            module_loads_total: IntCounter::new("yued_module_loads_total", "Model modules loaded onto the device")
                .unwrap(),
            resident_weight_bytes: IntGauge::new(
                "yued_resident_weight_bytes",
                "Bytes of model weights resident on the device",
            )
            .unwrap(),
            kv_sets_in_use: IntGauge::new("yued_kv_sets_in_use", "KV cache sets allocated").unwrap(),
            ws_listeners: IntGauge::new("yued_stream_listeners", "WebSocket listeners connected").unwrap(),
            ws_streams: IntGauge::new(
                "yued_stream_jobs",
                "Jobs whose live stream the hub holds (from queued to their end)",
            )
            .unwrap(),
            ws_bytes_total: IntCounter::new("yued_stream_sent_bytes_total", "Bytes sent to WebSocket listeners")
                .unwrap(),
            ws_dropped_listeners_total: IntCounter::new(
                "yued_stream_dropped_listeners_total",
                "Listeners closed for falling too far behind",
            )
            .unwrap(),
            cpu_turn_wait_seconds_total: prometheus::Counter::new(
                "yued_cpu_turn_wait_seconds_total",
                "Seconds the compute stages waited for the CPU while another stage's graph ran",
            )
            .unwrap(),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.jobs_submitted_total.clone())).unwrap();
        r.register(Box::new(m.jobs_finished_total.clone())).unwrap();
        r.register(Box::new(m.admission_rejections_total.clone())).unwrap();
        r.register(Box::new(m.queue_depth.clone())).unwrap();
        r.register(Box::new(m.jobs_running.clone())).unwrap();
        r.register(Box::new(m.queue_wait_seconds.clone())).unwrap();
        r.register(Box::new(m.stage_seconds.clone())).unwrap();
        r.register(Box::new(m.ar_tokens_total.clone())).unwrap();
        r.register(Box::new(m.ar_tokens_per_second.clone())).unwrap();
        r.register(Box::new(m.real_time_factor.clone())).unwrap();
        r.register(Box::new(m.audio_seconds_total.clone())).unwrap();
        r.register(Box::new(m.module_loads_total.clone())).unwrap();
        r.register(Box::new(m.resident_weight_bytes.clone())).unwrap();
        r.register(Box::new(m.kv_sets_in_use.clone())).unwrap();
        r.register(Box::new(m.ws_listeners.clone())).unwrap();
        r.register(Box::new(m.ws_streams.clone())).unwrap();
        r.register(Box::new(m.ws_bytes_total.clone())).unwrap();
        r.register(Box::new(m.ws_dropped_listeners_total.clone())).unwrap();
        r.register(Box::new(m.cpu_turn_wait_seconds_total.clone())).unwrap();
        // The standard process_* series (resident memory, CPU seconds, open descriptors).
        #[cfg(target_os = "linux")]
        r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())).unwrap();
        for s in ["done", "failed", "cancelled"] {
            m.jobs_finished_total.with_label_values(&[s]);
        }
        m
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding");
        String::from_utf8(buf).expect("utf8 exposition")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
