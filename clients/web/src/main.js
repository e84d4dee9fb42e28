// The yued WebUI: a form driven by /props, a job list kept in localStorage, live playback
// of the rendering song over the job's WebSocket (raw s16le tiles scheduled on an
// AudioContext), a waveform that grows with each tile, the score as notation (abcjs),
// the result's files, and the daemon log.
import abcjs from "abcjs";
import "./style.css";
import { EXAMPLES } from "./examples.js";
import { parseMultipart } from "./multipart.js";

const $ = (id) => document.getElementById(id);
const STORE = "yued.jobs";
const KEY = "yued.apiKey";
const TERMINAL = new Set(["done", "failed", "cancelled"]);

// What a test (or a curious user in the console) can read about playback.
const state = (window.__yued = { firstAudioAt: null, doneAt: {}, scheduled: 0, ctx: null });

let props = null;

// ---------------------------------------------------------------- HTTP
function apiKey() {
  return localStorage.getItem(KEY) || "";
}
function withKey(url) {
  const k = apiKey();
  return k ? `${url}${url.includes("?") ? "&" : "?"}api_key=${encodeURIComponent(k)}` : url;
}
async function api(path, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  if (apiKey()) headers["X-API-Key"] = apiKey();
  const r = await fetch(path, { ...opts, headers });
  return r;
}
async function json(path, opts) {
  const r = await api(path, opts);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

// ---------------------------------------------------------------- jobs in storage
function loadJobs() {
  try {
    return JSON.parse(localStorage.getItem(STORE) || "[]");
  } catch {
    return [];
  }
}
function saveJob(job) {
  const jobs = loadJobs().filter((j) => j.id !== job.id);
  jobs.unshift({ id: job.id, request: job.request, created: job.created });
  localStorage.setItem(STORE, JSON.stringify(jobs.slice(0, 50)));
}
function forgetJob(id) {
  localStorage.setItem(STORE, JSON.stringify(loadJobs().filter((j) => j.id !== id)));
}

// ---------------------------------------------------------------- the form
const NUMBERS = ["duration", "seed", "lm_seed", "steps", "lm_batch_size", "synth_batch_size"];
const SAMPLING = ["temperature", "top_p", "top_k", "repetition_penalty", "penalty_window", "min_tokens", "max_tokens"];

function fillForm(req) {
  for (const k of ["style", "lyrics", "abc"]) $(k).value = req[k] || "";
  if (req.cot) $("cot").value = req.cot;
  for (const k of NUMBERS) $(k).value = req[k] ?? "";
  if (req.output_format) $("output_format").value = req.output_format;
}

function setupForm() {
  const d = props.defaults;
  $("model").textContent = `${props.model.split("/").pop()} · v${props.version}`;
  for (const f of props.output_formats) {
    const o = document.createElement("option");
    o.value = f.name;
    o.textContent = `${f.name} (${f.mime})`;
    $("output_format").append(o);
  }
  $("output_format").value = "opus";
  for (const k of NUMBERS) $(k).placeholder = String(d[k]);
  $("cot").value = d.cot;
  $("style").placeholder = "genre, instruments, mood, tempo";
  $("lyrics").placeholder = "[verse]\n…\n[chorus]\n…";
  for (const stage of ["abc_sampling", "semantic_sampling"]) {
    for (const k of SAMPLING) {
      const label = document.createElement("label");
      label.textContent = `${stage.replace("_sampling", "")} ${k.replace("_", " ")} `;
      const input = document.createElement("input");
      input.type = "number";
      input.step = "any";
      input.id = `${stage}.${k}`;
      input.placeholder = String(d[stage][k]);
      label.append(input);
      $("sampling").append(label);
    }
  }
  for (const [i, ex] of EXAMPLES.entries()) {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = ex.name;
    $("example").append(o);
  }
  $("example").addEventListener("change", () => {
    const ex = EXAMPLES[Number($("example").value)];
    if (ex) fillForm(ex.request);
  });
  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    submit(readForm());
  });
  $("api-key").value = apiKey();
  $("api-key").addEventListener("change", () => localStorage.setItem(KEY, $("api-key").value.trim()));
}

function readForm() {
  const req = {};
  for (const k of ["style", "lyrics", "abc"]) if ($(k).value.trim()) req[k] = $(k).value;
  req.cot = $("cot").value;
  req.output_format = $("output_format").value;
  for (const k of NUMBERS) if ($(k).value !== "") req[k] = Number($(k).value);
  for (const stage of ["abc_sampling", "semantic_sampling"]) {
    for (const k of SAMPLING) {
      const v = $(`${stage}.${k}`).value;
      if (v !== "") (req[stage] ||= {})[k] = Number(v);
    }
  }
  return req;
}

// ---------------------------------------------------------------- audio
function audioContext() {
  if (!state.ctx) state.ctx = new AudioContext({ sampleRate: props?.sample_rate || 48000 });
  if (state.ctx.state === "suspended") state.ctx.resume();
  return state.ctx;
}

async function submit(request) {
  $("form-error").textContent = "";
  audioContext(); // created inside the click: browsers allow sound from here on
  try {
    const { id } = await json("/synth", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request) });
    const job = { id, request, created: Date.now() };
    saveJob(job);
    track(job, true);
  } catch (e) {
    $("form-error").textContent = e.message;
  }
}

// ---------------------------------------------------------------- a job card
function card(job) {
  const li = document.createElement("li");
  li.className = "job";
  li.dataset.id = job.id;
  li.innerHTML = `
    <div class="head"><b class="id"></b> <span class="title"></span> <span class="status pill"></span>
      <button class="cancel">Cancel</button> <button class="forget">Forget</button></div>
    <progress max="1" value="0"></progress> <span class="stage muted"></span>
    <canvas class="wave" width="800" height="80"></canvas>
    <div class="files"></div>
    <details class="score-box"><summary>Score</summary>
      <div class="score"></div>
      <textarea class="abc" rows="6" spellcheck="false"></textarea>
      <button class="rerender">Render again with this score</button>
      <button class="variation">New variation</button>
    </details>`;
  li.querySelector(".id").textContent = job.id;
  li.querySelector(".title").textContent = job.request.style || (job.request.lyrics || "").slice(0, 40);
  li.querySelector(".cancel").onclick = () => api(`/job?id=${job.id}&cancel=1`, { method: "POST" });
  li.querySelector(".forget").onclick = () => {
    forgetJob(job.id);
    li.remove();
  };
  li.querySelector(".rerender").onclick = () => submit({ ...(job.replay || job.request), abc: li.querySelector(".abc").value, semantic_tokens: "" });
  li.querySelector(".variation").onclick = () => submit({ ...(job.replay || job.request), seed: Math.floor(Math.random() * 2 ** 31) });
  $("jobs").prepend(li);
  return li;
}

function showScore(li, abc) {
  if (!abc) return;
  li.querySelector(".abc").value = abc;
  li.querySelector(".score-box").open = true;
  abcjs.renderAbc(li.querySelector(".score"), abc, { responsive: "resize" });
}

/** Min/max per column of the audio received so far. */
function drawWave(li, peaks, totalHint) {
  const c = li.querySelector(".wave");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const n = Math.max(peaks.length, totalHint || 0, 1);
  g.fillStyle = "#4a7";
  for (let x = 0; x < c.width; x++) {
    const a = Math.floor((x * n) / c.width), b = Math.max(a + 1, Math.floor(((x + 1) * n) / c.width));
    let lo = 0, hi = 0;
    for (let i = a; i < Math.min(b, peaks.length); i++) {
      lo = Math.min(lo, peaks[i][0]);
      hi = Math.max(hi, peaks[i][1]);
    }
    const mid = c.height / 2;
    g.fillRect(x, mid - hi * mid, 1, Math.max(1, (hi - lo) * mid));
  }
}

function track(job, live) {
  const li = card(job);
  const status = li.querySelector(".status");
  const bar = li.querySelector("progress");
  const stage = li.querySelector(".stage");
  if (job.request.abc) showScore(li, job.request.abc);
  const peaks = [];
  let nextTime = 0;
  let header = null;
  let finished = false;

  // Live audio and events over the WebSocket.
  if (live) {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(withKey(`${proto}://${location.host}/stream?id=${job.id}&format=pcm16`));
    ws.binaryType = "arraybuffer";
    ws.onmessage = (m) => {
      if (typeof m.data === "string") {
        const e = JSON.parse(m.data);
        if (e.event === "tile") header = e;
        else if (e.event === "score") showScore(li, e.abc);
        else if (e.event === "queued") stage.textContent = `queue position ${e.position}`;
        return;
      }
      if (header && header.track !== 0) return; // play the first track live
      const pcm = new Int16Array(m.data);
      const frames = pcm.length / 2;
      const ctx = audioContext();
      const buf = ctx.createBuffer(2, frames, props.sample_rate);
      const l = buf.getChannelData(0), r = buf.getChannelData(1);
      for (let i = 0; i < frames; i++) {
        l[i] = pcm[2 * i] / 32768;
        r[i] = pcm[2 * i + 1] / 32768;
      }
      for (let i = 0; i < frames; i += 1024) {
        let lo = 0, hi = 0;
        for (let k = i; k < Math.min(frames, i + 1024); k++) {
          lo = Math.min(lo, l[k]);
          hi = Math.max(hi, l[k]);
        }
        peaks.push([lo, hi]);
      }
      drawWave(li, peaks, ((job.request.duration || 30) * props.sample_rate) / 1024);
      const src = ctx.createBufferSource();
      src.buffer = buf;
      src.connect(ctx.destination);
      const at = Math.max(ctx.currentTime + 0.05, nextTime);
      src.start(at);
      nextTime = at + buf.duration;
      state.scheduled += 1;
      if (state.firstAudioAt === null) state.firstAudioAt = performance.now();
      li.classList.add("playing");
    };
  }

  // Status by polling (the WebSocket may be refused, the page may reload).
  const poll = async () => {
    let s;
    try {
      s = await json(`/job?id=${job.id}`);
    } catch (e) {
      status.textContent = e.message.includes("unknown") ? "unknown (expired)" : "unreachable";
      if (!e.message.includes("unknown")) setTimeout(poll, 1000);
      return;
    }
    status.textContent = s.status;
    status.dataset.status = s.status;
    if (s.status === "queued") {
      stage.textContent = `queue position ${s.queue_position}`;
      bar.removeAttribute("value");
    } else if (s.status === "running") {
      stage.textContent = `${s.stage || "starting"} ${Math.round((s.progress || 0) * 100)}%`;
      bar.value = s.progress || 0;
      li.dataset.stage = s.stage || "";
    } else if (s.status === "failed") {
      stage.textContent = s.error || "failed";
    } else {
      stage.textContent = s.status === "done" && s.metrics ? `${s.metrics.audio_seconds.toFixed(1)} s of audio in ${s.metrics.worker_seconds.toFixed(1)} s` : "";
      bar.value = 1;
    }
    if (!TERMINAL.has(s.status)) return setTimeout(poll, 250);
    if (!finished && s.status === "done") {
      finished = true;
      state.doneAt[job.id] = performance.now();
      li.querySelector(".cancel").disabled = true;
      await showResult(job, li);
    }
  };
  poll();
}

async function showResult(job, li) {
  const r = await api(`/job?id=${job.id}&result=1`);
  if (!r.ok) return;
  const parts = parseMultipart(await r.arrayBuffer(), r.headers.get("content-type"));
  const files = li.querySelector(".files");
  files.textContent = "";
  for (const p of parts) {
    const url = URL.createObjectURL(new Blob([p.bytes], { type: p.type }));
    if (p.type.startsWith("audio/")) {
      const audio = document.createElement("audio");
      audio.controls = true;
      audio.src = url;
      files.append(audio);
    }
    if (p.type === "application/json" && !job.replay) {
      job.replay = JSON.parse(new TextDecoder().decode(p.bytes));
      if (job.replay.abc) showScore(li, job.replay.abc);
    }
    const a = document.createElement("a");
    a.href = url;
    a.download = `${job.id}-${p.name}`;
    a.textContent = p.name;
    a.className = "download";
    files.append(a);
  }
}

// ---------------------------------------------------------------- header and logs
async function health() {
  try {
    const h = await json("/health");
    $("health").textContent = `${h.status}${h.demo_weights ? " · demo weights" : ""} · ${h.queue.queued} queued · ${h.queue.running.length} running`;
    $("health").dataset.status = h.status;
  } catch (e) {
    $("health").textContent = `down: ${e.message}`;
    $("health").dataset.status = "down";
  }
  setTimeout(health, 2000);
}

function logs() {
  let source = null;
  $("logs-panel").addEventListener("toggle", () => {
    if ($("logs-panel").open && !source) {
      source = new EventSource(withKey("/logs"));
      source.onmessage = (m) => {
        const pre = $("logs");
        pre.textContent += m.data + "\n";
        if (pre.textContent.length > 200000) pre.textContent = pre.textContent.slice(-150000);
        pre.scrollTop = pre.scrollHeight;
      };
    } else if (!$("logs-panel").open && source) {
      source.close();
      source = null;
    }
  });
}

async function main() {
  health();
  logs();
  try {
    props = await json("/props");
  } catch (e) {
    $("form-error").textContent = `cannot read /props: ${e.message}`;
    return;
  }
  setupForm();
  for (const job of loadJobs().reverse()) track(job, false);
}

main();
