//! Prometheus metrics, all prefixed `yued_` with their unit in the name. The registry is
//! the process's only global-ish state and is passed around explicitly.
use prometheus::core::Collector;
use prometheus::{
    Counter, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// 1, labelled with what this daemon is: its version, device, residency, and whether its
    /// models are the demo's random weights (a production node started without a model shows).
    pub build_info: IntGaugeVec,
    /// 1 while the journal takes writes, 0 while it refuses them (submissions are then 503s).
    pub journal_healthy: IntGauge,
    pub jobs_submitted_total: IntCounter,
    pub jobs_finished_total: IntCounterVec,
    pub admission_rejections_total: IntCounter,
    pub queue_depth: IntGauge,
    pub jobs_running: IntGauge,
    pub queue_wait_seconds: Histogram,
    /// Submission to a job's first audio tile (what a listener waits for), by family.
    pub first_audio_seconds: HistogramVec,
    /// Each stage's wall time, by family and stage.
    pub stage_seconds: HistogramVec,
    pub ar_tokens_total: IntCounterVec,
    pub ar_tokens_per_second: HistogramVec,
    pub real_time_factor: Histogram,
    pub audio_seconds_total: Counter,
    pub module_loads_total: IntCounter,
    pub resident_weight_bytes: IntGauge,
    pub kv_sets_in_use: IntGauge,
    pub ws_listeners: IntGauge,
    /// Jobs whose live stream the hub holds (queued to their end).
    pub ws_streams: IntGauge,
    pub ws_bytes_total: IntCounter,
    /// Bytes of the running jobs' tiles the hub keeps for late joiners, in memory and in its
    /// spool files.
    pub ws_kept_memory_bytes: IntGauge,
    pub ws_kept_spooled_bytes: IntGauge,
    pub ws_dropped_listeners_total: IntCounter,
    pub cpu_turn_wait_seconds_total: Counter,
    /// HTTP answers by route pattern (`unmatched` for none) and status code: bounded labels.
    pub http_requests_total: IntCounterVec,
    /// Time to each HTTP answer's head, by route pattern (a stream's: its handshake).
    pub http_request_seconds: HistogramVec,
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registrar(Registry::new());
        // Round bounds, from a tenth of a second to eight hours (a full-length song on a few
        // CPU cores takes hours; a bound a rule names must be what the exposition says).
        let seconds = || {
            vec![
                0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
                14400.0, 28800.0,
            ]
        };
        let m = Metrics {
            jobs_submitted_total: r.counter(
                "yued_jobs_submitted_total",
                "Jobs accepted by the admission check, and those restored from the journal at the start",
            ),
            build_info: r.add(
                IntGaugeVec::new(
                    Opts::new("yued_build_info", "1, labelled with the version, device, residency and demo weights"),
                    &["version", "device", "residency", "demo_weights"],
                )
                .expect("a valid metric"),
            ),
            journal_healthy: r
                .gauge("yued_journal_healthy", "1 while the journal takes writes, 0 while it refuses them"),
            http_requests_total: r.counter_vec_of(
                "yued_http_requests_total",
                "HTTP answers by route pattern and status code (a WebSocket counts at its handshake)",
                &["route", "status"],
            ),
            http_request_seconds: r.histogram_vec(
                "yued_http_request_duration_seconds",
                "Time from an HTTP request to its answer's head, by route pattern (a WebSocket or an event \
                stream: to its handshake; a body streamed after the head is not timed)",
                // Up to an hour: the synchronous OpenAI routes answer when the song is rendered.
                vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                    900.0, 3600.0,
                ],
                &["route"],
            ),
            jobs_finished_total: r.counter_vec("yued_jobs_finished_total", "Jobs by final status", "status"),
            admission_rejections_total: r.counter(
                "yued_admission_rejections_total",
                "Submissions refused for room: the admission cap or a key's share of it (429), and uploads the \
                upload memory had no room for (429 or 503)",
            ),
            queue_depth: r.gauge("yued_queue_depth_jobs", "Jobs waiting in the queue"),
            jobs_running: r.gauge("yued_jobs_running", "Jobs being computed"),
            queue_wait_seconds: r.histogram(
                "yued_queue_wait_seconds",
                "Time from submission to start of work",
                seconds(),
            ),
            first_audio_seconds: r.histogram_vec(
                "yued_first_audio_seconds",
                "Time from a job's submission to its first audio tile (a listener's wait for sound), by family",
                seconds(),
                &["family"],
            ),
            stage_seconds: r.histogram_vec(
                "yued_stage_duration_seconds",
                "Wall time of each pipeline stage, by family and stage",
                seconds(),
                &["family", "stage"],
            ),
            ar_tokens_total: r.counter_vec_of(
                "yued_ar_tokens_total",
                "Tokens sampled by the autoregressive stages (a MiniMax Music 3 song's frame counts as one)",
                &["family", "stage"],
            ),
            ar_tokens_per_second: r.histogram_vec(
                "yued_ar_tokens_per_second",
                "Autoregressive decode speed per job and stage, tokens (MiniMax Music 3: frames) a second",
                prometheus::exponential_buckets(1.0, 2.0, 14).unwrap(),
                &["family", "stage"],
            ),
            real_time_factor: r.histogram(
                "yued_real_time_factor_ratio",
                "Seconds of audio per second of pipeline work (a speed: above 1 is faster than real time)",
                prometheus::exponential_buckets(0.01, 2.0, 14).unwrap(),
            ),
            audio_seconds_total: r.float_counter("yued_audio_produced_seconds_total", "Seconds of audio rendered"),
            module_loads_total: r.counter("yued_module_loads_total", "Model modules loaded onto the device"),
            resident_weight_bytes: r
                .gauge("yued_resident_weight_bytes", "Bytes of model weights resident on the device"),
            kv_sets_in_use: r.gauge(
                "yued_kv_sets_in_use",
                "KV cache sets handed from the AR half to the synthesis half and not yet released",
            ),
            ws_listeners: r.gauge("yued_stream_listeners", "WebSocket listeners connected"),
            ws_streams: r.gauge("yued_stream_jobs", "Jobs whose live stream the hub holds (from queued to their end)"),
            ws_bytes_total: r.counter("yued_stream_sent_bytes_total", "Bytes sent to WebSocket listeners"),
            ws_kept_memory_bytes: r.gauge(
                "yued_stream_kept_memory_bytes",
                "Bytes of the running jobs' tiles the hub keeps in memory for late joiners",
            ),
            ws_kept_spooled_bytes: r.gauge(
                "yued_stream_kept_spooled_bytes",
                "Bytes of the running jobs' tiles the hub keeps in its spool files (its memory budget spent)",
            ),
            ws_dropped_listeners_total: r
                .counter("yued_stream_dropped_listeners_total", "Listeners closed for falling too far behind"),
            cpu_turn_wait_seconds_total: r.float_counter(
                "yued_cpu_turn_wait_seconds_total",
                "Seconds the compute stages waited for the CPU while another stage's graph ran",
            ),
            registry: r.0,
        };
        // The standard process_* series (resident memory, CPU seconds, open descriptors).
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())).unwrap();
        for s in ["done", "failed", "cancelled"] {
            m.jobs_finished_total.with_label_values(&[s]);
        }
        // Every family's series from the start: a dashboard shows 0, not "no data".
        for f in yued_protocol::Family::ALL {
            m.first_audio_seconds.with_label_values(&[f.as_str()]);
        }
        m.journal_healthy.set(1);
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

/// Makes each metric and registers it (a name is registered once: a clash is a bug, so it panics).
struct Registrar(Registry);

impl Registrar {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        self.0.register(Box::new(c.clone())).expect("a metric registers once");
        c
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::new(name, help).expect("a valid metric"))
    }

    fn float_counter(&self, name: &str, help: &str) -> Counter {
        self.add(Counter::new(name, help).expect("a valid metric"))
    }

    fn counter_vec(&self, name: &str, help: &str, label: &str) -> IntCounterVec {
        self.counter_vec_of(name, help, &[label])
    }

    fn counter_vec_of(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric"))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::new(name, help).expect("a valid metric"))
    }

    fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.add(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("a valid metric"))
    }

    fn histogram_vec(&self, name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets);
        self.add(HistogramVec::new(opts, labels).expect("a valid metric"))
    }
}
