// The yued WebUI: a form driven by /props (YuE2, and MiniMax Music 3 when the daemon serves
// it: a family switch picks the form), a job list kept in localStorage, live playback of
// the rendering song over the job's WebSocket (raw s16le tiles scheduled on an
// AudioContext, at the rate the stream's `format` event names), a waveform that grows with
// each tile, the score as notation (abcjs, YuE2 only), the result's files per track with
// their replay requests, covers (the audio tokenizer), transcriptions (a recording's score,
// sung or continued from the form), and the daemon log.
import abcjs from "abcjs";
import "./style.css";
import { EXAMPLES, MM3_EXAMPLES } from "./examples.js";
import { parseMultipart } from "./multipart.js";

const $ = (id) => document.getElementById(id);
const STORE = "yued.jobs";
const KEY = "yued.apiKey";
const FAMILY = "yued.family";
const FAMILY_NAMES = { yue2: "YuE2", mm3: "MiniMax" };
const TERMINAL = new Set(["done", "failed", "cancelled"]);

/** A queue position as people count it: the daemon's 0 is the next job to run. */
function queueText(position) {
  return position === 0 ? "next in the queue" : `queue position ${position + 1}`;
}

// What a test (or a curious user in the console) can read about playback; `jobs` per job:
// its family, the stages seen (WebSocket and polling), the most progress, the tiles
// scheduled, the stream's sample rate, and when the first tile and the stream's `done` came.
const state = (window.__yued = { firstAudioAt: null, doneAt: {}, scheduled: 0, ctx: null, jobs: {} });

let props = null;
/** The daemon runs the embedded demo's random weights (GET /health). */
let demoWeights = false;

// ---------------------------------------------------------------- HTTP
function apiKey() {
  return localStorage.getItem(KEY) || "";
}
/** The URL of a stream (a WebSocket or an EventSource, which cannot set a header): with a key,
 * a one-time ticket from POST /tickets rides in the query, never the key (URLs end up in proxy
 * logs and browser history). */
async function streamUrl(path, query = {}) {
  const q = new URLSearchParams(query);
  if (apiKey()) {
    const body = { path };
    if (query.id) body.id = query.id;
    try {
      const { ticket } = await json("/tickets", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      q.set("ticket", ticket);
    } catch (e) {
      // A key kept from another daemon, on one without keys: its streams need no ticket.
      if (!/no API keys/.test(e.message)) throw e;
    }
  }
  return `${path}?${q}`;
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
  jobs.unshift({ id: job.id, request: job.request, created: job.created, label: job.label });
  localStorage.setItem(STORE, JSON.stringify(jobs.slice(0, 50)));
}
function forgetJob(id) {
  localStorage.setItem(STORE, JSON.stringify(loadJobs().filter((j) => j.id !== id)));
  // The daemon still lists it (GET /jobs): remember not to bring it back.
  const gone = forgotten();
  gone.push(id);
  localStorage.setItem(`${STORE}.forgotten`, JSON.stringify(gone.slice(-200)));
}
function forgotten() {
  try {
    return JSON.parse(localStorage.getItem(`${STORE}.forgotten`) || "[]");
  } catch {
    return [];
  }
}

/** The uploads of GET /jobs that get a card, as the request the page saves for them (the
 * recording's name is not listed). */
const UPLOADS = {
  tokenize: { tokenize: "a recording" },
  transcribe: { transcribe: "a recording", melody_only: false },
  transcribe_melody: { transcribe: "a recording", melody_only: true },
};

/** The daemon's list of this client's jobs (GET /jobs: its API key, else its address):
 * those this browser did not submit, or whose storage was cleared, join the list (below
 * the ones it knows). */
async function daemonJobs(known) {
  try {
    const { jobs } = await json("/jobs");
    const skip = new Set([...known, ...forgotten()]);
    return jobs
      .filter((j) => (j.request || UPLOADS[j.upload]) && !skip.has(j.id))
      .map((j) => ({ id: j.id, request: j.request || UPLOADS[j.upload], created: j.submitted_ms }));
  } catch {
    return [];
  }
}

// ---------------------------------------------------------------- the form
const NUMBERS = ["duration", "seed", "lm_seed", "steps", "lm_batch_size", "synth_batch_size"];
/** Live listening: the page asks for streaming chunks of this many seconds unless told otherwise. */
const STREAM_SECONDS = 3;
const SAMPLING = ["temperature", "top_p", "top_k", "repetition_penalty", "penalty_window", "min_tokens", "max_tokens"];

// MiniMax Music 3: its numeric fields, and the registry bucket each model field names a file of.
const MM3_NUMBERS = ["duration", "steps", "seed", "lm_seed", "lm_cfg", "lm_top_k", "lm_batch_size", "synth_batch_size", "dit_cfg", "peak_clip", "mp3_bitrate"];
const MM3_MODELS = [
  ["lm_model", "mm3-lm", "LM"],
  ["depth_model", "mm3-depth", "Depth decoder"],
  ["cond_model", "mm3-cond", "Condition encoder"],
  ["dit_model", "mm3-dit", "DiT"],
  ["vae_model", "mm3-vae", "VAE"],
];

/** The family of a request: named, else told by its own fields (as the daemon routes it). */
function familyOf(req) {
  if (req?.family) return req.family;
  return req && ("caption" in req || MM3_MODELS.some(([k]) => k in req)) ? "mm3" : "yue2";
}
function multiFamily() {
  return (props?.families?.length || 0) > 1;
}
function currentFamily() {
  return $("family").value || "yue2";
}

/** Shows the form of `family` (the other one hidden and disabled, so it is neither read nor validated). */
function setFamily(family) {
  if (family === "mm3" && !props.mm3) family = "yue2";
  $("family").value = family;
  document.body.dataset.family = family;
  for (const fs of document.querySelectorAll(".family-fields")) {
    const off = fs.dataset.family !== family;
    fs.hidden = off;
    fs.disabled = off;
  }
  const ex = $("example");
  while (ex.options.length > 1) ex.remove(1);
  ex.value = "";
  for (const [i, e] of (family === "mm3" ? MM3_EXAMPLES : EXAMPLES).entries()) {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = e.name;
    ex.append(o);
  }
  if (multiFamily()) localStorage.setItem(FAMILY, family);
}

function fillForm(req) {
  if (familyOf(req) === "mm3") return fillMm3Form(req);
  if (currentFamily() !== "yue2") setFamily("yue2");
  for (const k of ["style", "lyrics", "abc"]) $(k).value = req[k] || "";
  $("abc_continue").checked = !!req.abc_continue;
  $("abc-source").textContent = "";
  // On the demo's random weights no score can be planned: without one, cot stays off.
  if (req.cot) $("cot").value = demoWeights && !req.abc ? "off" : req.cot;
  for (const k of NUMBERS) $(k).value = req[k] ?? "";
  // A request made elsewhere keeps its own chunking (absent: one piece); an example streams.
  $("stream_chunk_seconds").value = req.stream_chunk_seconds ?? (req.semantic_tokens || req.lm_seed !== undefined ? 0 : STREAM_SECONDS);
  if (req.output_format) $("output_format").value = req.output_format;
  // A solver this page does not list (a newer daemon's) falls back to the default.
  $("solver").value = [...$("solver").options].some((o) => o.value === req.solver) ? req.solver : "midpoint";
  // The sampling of both stages (a replay's, resolved, or an example's few), shown when set.
  let sampled = false;
  for (const stage of ["abc_sampling", "semantic_sampling"]) {
    for (const k of SAMPLING) {
      const input = $(`${stage}.${k}`);
      if (!input) continue;
      input.value = req[stage]?.[k] ?? "";
      sampled ||= input.value !== "";
    }
  }
  if (sampled) $("sampling-box").open = true;
  if (props.companion) {
    $("companion_scale").value = String(req.companion_scale ?? 1);
    $("companion_scale").dispatchEvent(new Event("input"));
  }
  fillAdapters(req);
}

function fillMm3Form(req) {
  if (!props.mm3) return;
  if (currentFamily() !== "mm3") setFamily("mm3");
  for (const k of ["caption", "lyrics", "audio_codes"]) $(`mm3-${k}`).value = req[k] || "";
  for (const k of MM3_NUMBERS) $(`mm3-${k}`).value = req[k] ?? "";
  for (const [k] of MM3_MODELS) $(`mm3-${k}`).value = req[k] || "";
  if (req.output_format) $("mm3-output_format").value = req.output_format;
  // A replay's codes replace the LM sampling: show them rather than leave them folded away.
  if (req.audio_codes) $("mm3-advanced").open = true;
}

function setupMm3Form() {
  const m = props.mm3;
  if (!m) return;
  const d = m.defaults;
  $("model").textContent += ` · MiniMax Music 3 (${(m.models["mm3-lm"] || [])[0] || "no LM"})`;
  for (const f of props.output_formats) {
    const o = document.createElement("option");
    o.value = f.name;
    o.textContent = f.name;
    o.title = f.mime;
    $("mm3-output_format").append(o);
  }
  $("mm3-output_format").value = "opus";
  for (const k of MM3_NUMBERS) $(`mm3-${k}`).placeholder = defaultText(d[k]);
  // Required: the placeholder says so, and that it is an example, not a value.
  $("mm3-caption").placeholder = `required, e.g.\n${d.caption || "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright female vocals"}`;
  $("mm3-lyrics").placeholder = d.lyrics || "[verse]\n…\n[chorus]\n…";
  $("mm3-audio_codes").placeholder = d.audio_codes || "(empty: the LM samples the codes)";
  for (const [field, bucket, name] of MM3_MODELS) {
    const label = document.createElement("label");
    label.textContent = `${name} `;
    const select = document.createElement("select");
    select.id = `mm3-${field}`;
    select.name = field;
    const files = m.models[bucket] || [];
    // The first entry sends nothing: the daemon keeps the loaded file, or takes its first.
    const first = document.createElement("option");
    first.value = "";
    first.textContent = d[field] || (files[0] ? `default (${files[0]})` : "default");
    select.append(first);
    for (const f of files) {
      const o = document.createElement("option");
      o.value = f;
      o.textContent = f;
      select.append(o);
    }
    label.append(select);
    $("mm3-model-selects").append(label);
  }
}

/** A field's placeholder: the daemon's default, said as one (a bare number read as a
 * value already filled in); -1 is a seed drawn at random. */
function defaultText(v) {
  return v === -1 ? "random" : `default ${v}`;
}

/** The lyric-structure helper: a tag button inserts its tag on a line of its own at the
 * cursor of its textarea. */
function setupTags() {
  // Style suggestions: a click adds the tag to the comma-separated list (again: removes it).
  for (const group of document.querySelectorAll(".style-tags")) {
    const field = $(group.dataset.for);
    for (const b of group.querySelectorAll("button")) {
      b.onclick = () => {
        const tags = field.value.split(",").map((t) => t.trim()).filter(Boolean);
        const at = tags.indexOf(b.textContent);
        if (at >= 0) tags.splice(at, 1);
        else tags.push(b.textContent);
        field.value = tags.join(", ");
        field.dispatchEvent(new Event("input", { bubbles: true }));
      };
    }
  }
  for (const group of document.querySelectorAll(".tags")) {
    const area = $(group.dataset.for);
    for (const b of group.querySelectorAll("button")) {
      b.onclick = () => {
        const at = area.selectionStart ?? area.value.length;
        const before = area.value.slice(0, at), after = area.value.slice(area.selectionEnd ?? at);
        const lead = before && !before.endsWith("\n") ? "\n" : "";
        const insert = `${lead}${b.textContent}\n`;
        area.value = before + insert + after;
        area.selectionStart = area.selectionEnd = before.length + insert.length;
        area.focus();
      };
    }
  }
}

function setupForm() {
  const d = props.defaults;
  $("model").textContent = `${props.model.split("/").pop()} · v${props.version}`;
  for (const f of props.output_formats) {
    const o = document.createElement("option");
    o.value = f.name;
    o.textContent = f.name;
    o.title = f.mime;
    $("output_format").append(o);
  }
  $("output_format").value = "opus";
  for (const k of NUMBERS) $(k).placeholder = defaultText(d[k]);
  // The daemon's batch cap bounds the Songs fields (a larger value would be refused).
  for (const id of ["lm_batch_size", "mm3-lm_batch_size"]) if (props.max_batch) $(id).max = String(props.max_batch);
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
      input.placeholder = defaultText(d[stage][k]);
      label.append(input);
      $("sampling").append(label);
    }
  }
  setupMm3Form();
  setupAdapters();
  setupCover();
  setupTags();
  const served = props.families || ["yue2"];
  $("family-row").hidden = !(multiFamily() && props.mm3);
  const saved = localStorage.getItem(FAMILY);
  setFamily(!served.includes("yue2") ? "mm3" : multiFamily() && served.includes(saved) ? saved : "yue2");
  $("family").addEventListener("change", () => setFamily($("family").value));
  $("example").addEventListener("change", () => {
    if ($("example").value === "") return;
    const mm3 = currentFamily() === "mm3";
    const ex = (mm3 ? MM3_EXAMPLES : EXAMPLES)[Number($("example").value)];
    if (ex) (mm3 ? fillMm3Form : fillForm)(ex.request);
  });
  $("form").addEventListener("input", () => ($("form-error").textContent = ""));
  // Continuing a score needs the planner: ticked under cot off, cot becomes full.
  $("abc_continue").addEventListener("change", () => {
    if ($("abc_continue").checked && $("cot").value === "off") $("cot").value = "full";
  });
  $("abc").addEventListener("input", () => ($("abc-source").textContent = ""));
  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    submit(readForm());
  });
}

/** The adapters of /props: a tick box and a strength slider each; unusable ones say why. */
function setupAdapters() {
  const list = props.adapters || [];
  $("adapters-box").hidden = list.length === 0;
  list.forEach((a, i) => {
    const row = document.createElement("div");
    row.className = "adapter";
    row.dataset.name = a.name;
    if (a.error) {
      row.classList.add("unusable");
      row.textContent = `${a.name}: unusable (${a.error})`;
      $("adapters").append(row);
      return;
    }
    const on = document.createElement("input");
    on.type = "checkbox";
    on.id = `adapter-${i}`;
    const label = document.createElement("label");
    label.htmlFor = on.id;
    label.textContent = `${a.name} (${[a.ar && "AR", a.nar && "NAR"].filter(Boolean).join(" + ")})`;
    const strength = document.createElement("input");
    strength.type = "range";
    strength.min = "-2";
    strength.max = "2";
    strength.step = "0.05";
    strength.value = "1";
    strength.setAttribute("aria-label", `${a.name} strength`);
    const shown = document.createElement("output");
    shown.textContent = "1.00";
    strength.addEventListener("input", () => {
      shown.textContent = Number(strength.value).toFixed(2);
      on.checked = true;
    });
    row.append(on, label, strength, shown);
    $("adapters").append(row);
  });
}

/** The ticked adapters as the request's `adapters`. */
function readAdapters() {
  return [...document.querySelectorAll("#adapters .adapter:not(.unusable)")]
    .filter((r) => r.querySelector("input[type=checkbox]").checked)
    .map((r) => ({ name: r.dataset.name, scale: Number(r.querySelector("input[type=range]").value) }));
}

/** A request's adapters onto the rows (an edited past request keeps its set). */
function fillAdapters(req) {
  for (const row of document.querySelectorAll("#adapters .adapter:not(.unusable)")) {
    const a = (req.adapters || []).find((x) => x.name === row.dataset.name);
    row.querySelector("input[type=checkbox]").checked = !!a;
    row.querySelector("input[type=range]").value = String(a ? a.scale : 1);
    row.querySelector("output").textContent = Number(a ? a.scale : 1).toFixed(2);
  }
}

function readForm() {
  return currentFamily() === "mm3" ? readMm3Form() : readYue2Form();
}

function readMm3Form() {
  const req = { family: "mm3" };
  for (const k of ["caption", "lyrics", "audio_codes"]) if ($(`mm3-${k}`).value.trim()) req[k] = $(`mm3-${k}`).value;
  req.output_format = $("mm3-output_format").value;
  for (const k of MM3_NUMBERS) if ($(`mm3-${k}`).value !== "") req[k] = Number($(`mm3-${k}`).value);
  for (const [k] of MM3_MODELS) if ($(`mm3-${k}`).value) req[k] = $(`mm3-${k}`).value;
  return req;
}

function readYue2Form() {
  const req = multiFamily() ? { family: "yue2" } : {};
  for (const k of ["style", "lyrics", "abc"]) if ($(k).value.trim()) req[k] = $(k).value;
  // Sent only when ticked (a daemon that predates it ignores the field; an empty score or
  // cot off with it is the daemon's to refuse, naming the field).
  if ($("abc_continue").checked) req.abc_continue = true;
  req.cot = $("cot").value;
  req.output_format = $("output_format").value;
  for (const k of NUMBERS) if ($(k).value !== "") req[k] = Number($(k).value);
  // Sent only when not the default, as the daemon writes it in a replay.
  if ($("solver").value !== "midpoint") req.solver = $("solver").value;
  if ($("stream_chunk_seconds").value !== "") req.stream_chunk_seconds = Number($("stream_chunk_seconds").value);
  const adapters = readAdapters();
  if (adapters.length) req.adapters = adapters;
  if (props.companion && Number($("companion_scale").value) !== 1) req.companion_scale = Number($("companion_scale").value);
  for (const stage of ["abc_sampling", "semantic_sampling"]) {
    for (const k of SAMPLING) {
      const v = $(`${stage}.${k}`).value;
      if (v !== "") (req[stage] ||= {})[k] = Number(v);
    }
  }
  return req;
}

// ---------------------------------------------------------------- audio
/** Live playback goes through one gain, the header's volume. */
function master() {
  const ctx = audioContext();
  if (!state.master) {
    state.master = ctx.createGain();
    state.master.gain.value = Number($("volume").value);
    state.master.connect(ctx.destination);
  }
  return state.master;
}

function setVolume(v) {
  if (state.master) state.master.gain.value = v;
  for (const a of document.querySelectorAll(".files audio")) a.volume = v;
}

function size(n) {
  return n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(0)} kB` : `${(n / 1048576).toFixed(1)} MB`;
}

/** What a result file is, for its tooltip. */
function fileKind(name, type) {
  if (name.endsWith(".json")) return "The replay request: submit it again (Replay) for the same song, bit for bit, or edit it";
  if (name.endsWith(".vae")) return "The raw latents (f32, time-major): POST /vae decodes them to audio again";
  if (type.startsWith("audio/")) return `The audio (${type})`;
  return type;
}

/** A finished job's waveform (after a reload, or when it was not heard live), from the
 * result's first audio file. */
async function waveFromResult(li, bytes) {
  li.dataset.waved = "1";
  try {
    const buf = await new OfflineAudioContext(1, 1, 44100).decodeAudioData(bytes.slice().buffer);
    const l = buf.getChannelData(0);
    const peaks = [];
    for (let i = 0; i < l.length; i += 1024) {
      let lo = 0, hi = 0;
      for (let k = i; k < Math.min(l.length, i + 1024); k++) {
        lo = Math.min(lo, l[k]);
        hi = Math.max(hi, l[k]);
      }
      peaks.push([lo, hi]);
    }
    drawWave(li, peaks);
  } catch (e) {
    // a format this browser cannot decode: no waveform
  }
}

/** Stops a job's live playback: its scheduled tiles and its stream. */
function stopLive(jobId) {
  const info = state.jobs[jobId];
  if (!info?.live) return;
  for (const src of info.live.sources) {
    try {
      src.stop();
    } catch (e) {
      // not started yet or already ended
    }
  }
  info.live.sources = [];
  info.live.stopped = true;
  info.live.ws?.close();
  const li = document.querySelector(`li.job[data-id="${jobId}"]`);
  li?.classList.remove("playing");
  const b = li?.querySelector(".stop-live");
  if (b) b.hidden = true;
}

function audioContext() {
  if (!state.ctx) state.ctx = new AudioContext({ sampleRate: props?.sample_rate || 48000 });
  if (state.ctx.state === "suspended") state.ctx.resume();
  return state.ctx;
}

async function submit(request, label) {
  $("form-error").textContent = "";
  audioContext(); // created inside the click: browsers allow sound from here on
  try {
    const { id } = await json("/synth", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request) });
    const job = { id, request, created: Date.now(), label };
    saveJob(job);
    track(job, true);
    // The new card may be far below the button (a phone, a long form): show it.
    document.querySelector(`li.job[data-id="${id}"]`)?.scrollIntoView({ block: "nearest", behavior: "smooth" });
  } catch (e) {
    $("form-error").textContent = labelled(e.message);
  }
}

/** An error that starts with a request field (`lm_batch_size: ...`) named as the form
 * labels that field ("Songs (lm_batch_size): ..."). */
function labelled(message) {
  const m = /^([a-z_]+)(\.[a-z_]+)?: /.exec(message);
  if (!m) return message;
  const family = $("family")?.value === "mm3" ? "mm3-" : "";
  const input = document.getElementById(family + m[1]) || document.getElementById(m[1]);
  const label = input?.closest("label")?.firstChild?.textContent?.split(" (")[0].trim();
  return label ? `${label} (${m[1]}${m[2] || ""})${message.slice(m[0].length - 2)}` : message;
}

// ---------------------------------------------------------------- a job card
/** A caption's prose: its metadata block (the heading and the `<|tag value|>` lines) left out. */
function captionTitle(caption) {
  const prose = (caption || "")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !/^global metadata$/i.test(l) && !/^(<\|[^|]*\|>\s*)+$/.test(l));
  return prose.join(" ") || caption || "";
}

function card(job) {
  const family = familyOf(job.request);
  const li = document.createElement("li");
  li.className = "job";
  li.dataset.id = job.id;
  li.dataset.family = family;
  // The score (notation, re-render with an edited one) is YuE2's alone.
  const extra =
    family === "mm3"
      ? `<div class="actions"><button class="variation">New variation</button></div>`
      : `<details class="score-box"><summary>Score</summary>
      <div class="score"></div>
      <textarea class="abc" rows="6" spellcheck="false"></textarea>
      <button class="rerender">Render again with this score</button>
      <button class="variation">New variation</button>
    </details>`;
  li.innerHTML = `
    <div class="head"><b class="id"></b> <span class="family pill"></span> <span class="title"></span> <span class="status pill"></span>
      <button class="stop-live" hidden title="Stop listening (the job goes on)">Stop playback</button>
      <button class="cancel">Cancel</button> <button class="forget">Forget</button></div>
    <progress max="1" value="0"></progress> <span class="stage muted"></span>
    <canvas class="wave" width="800" height="80"></canvas>
    <div class="files"></div>
    ${extra}`;
  li.querySelector(".id").textContent = job.id;
  const badge = li.querySelector(".family");
  badge.textContent = FAMILY_NAMES[family] || family;
  badge.dataset.family = family;
  badge.title = family === "mm3" ? "MiniMax Music 3" : "YuE2";
  const title = (family === "mm3" ? captionTitle(job.request.caption) : job.request.style) || (job.request.lyrics || "").slice(0, 40);
  li.querySelector(".title").textContent = job.label ? `${job.label}: ${title}` : title;
  li.querySelector(".title").title = li.querySelector(".title").textContent;
  // Accessible names that say which job a control belongs to; status changes are announced.
  const named = `job ${job.id.slice(-6)} (${title || "untitled"})`;
  li.querySelector(".cancel").setAttribute("aria-label", `Cancel ${named}`);
  li.querySelector(".forget").setAttribute("aria-label", `Forget ${named}`);
  li.querySelector(".stop-live").setAttribute("aria-label", `Stop playback of ${named}`);
  li.querySelector("progress").setAttribute("aria-label", `Progress of ${named}`);
  li.querySelector(".wave").setAttribute("aria-label", `Waveform of ${named}`);
  li.querySelector(".wave").setAttribute("role", "img");
  li.querySelector(".status").setAttribute("role", "status");
  // The stage line changes every poll (its clock): not announced; the status pill is.
  li.querySelector(".stage").setAttribute("aria-live", "off");
  li.querySelector(".abc")?.setAttribute("aria-label", `Score (ABC) of ${named}`);
  li.querySelector(".cancel").onclick = async () => {
    const stage = li.querySelector(".stage");
    try {
      const r = await api(`/job?id=${job.id}&cancel=1`, { method: "POST" });
      if (!r.ok && r.status !== 409) stage.textContent = `could not cancel: HTTP ${r.status}`;
    } catch (e) {
      stage.textContent = `could not cancel (${e.message}): the daemon is unreachable; try again`;
    }
  };
  li.querySelector(".stop-live").onclick = () => stopLive(job.id);
  li.querySelector(".forget").onclick = async () => {
    // A job still queued or running is not forgotten silently: it would go on with no
    // card to cancel it from.
    const now = li.querySelector(".status").dataset.status;
    if (now && !TERMINAL.has(now)) {
      if (!confirm(`This job is still ${now}. Forget it and cancel it on the daemon? (Cancel keeps it.)`)) return;
      await api(`/job?id=${job.id}&cancel=1`, { method: "POST" });
    }
    forgetJob(job.id);
    li.remove();
  };
  if (family !== "mm3") {
    // The edited score is sung as it is (a request that continued one: its whole score now).
    li.querySelector(".rerender").onclick = () => {
      const { abc_continue: _, ...req } = job.replay || job.request;
      submit({ ...req, abc: li.querySelector(".abc").value, semantic_tokens: "" });
    };
  }
  li.querySelector(".variation").onclick = () => submit({ ...(job.replay || job.request), seed: Math.floor(Math.random() * 2 ** 31) }, `Variation of ${job.id.slice(-6)}`);
  $("jobs").prepend(li);
  return li;
}

function showScore(li, abc) {
  if (!abc || !li.querySelector(".score-box")) return;
  li.querySelector(".abc").value = abc;
  li.querySelector(".score-box").open = true;
  abcjs.renderAbc(li.querySelector(".score"), abc, { responsive: "resize" });
}

/** Min/max per column of the audio received so far. */
function drawWave(li, peaks, totalHint) {
  li.dataset.waved = "1";
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
  if (job.request?.tokenize) return trackCover(job);
  if (job.request?.transcribe) return trackTranscription(job);
  const li = card(job);
  const family = li.dataset.family;
  const status = li.querySelector(".status");
  const bar = li.querySelector("progress");
  const stage = li.querySelector(".stage");
  if (job.request.abc) showScore(li, job.request.abc);
  const info = (state.jobs[job.id] = { family, stages: [], progress: 0, scheduled: 0, sampleRate: null, firstAudioAt: null, streamDoneAt: null, live: null });
  const mm3 = family === "mm3" ? props.mm3 : null;
  // The tiles' rate until the stream's `format` event says (MiniMax: 44.1 kHz).
  let rate = mm3?.sample_rate || props.sample_rate;
  const frameRate = mm3?.frame_rate || props.frame_rate || 25;
  let seconds = job.request.duration || (mm3 ? mm3.defaults.duration : 30);
  const peaks = [];
  let nextTime = 0;
  let header = null;
  let finished = false;
  let ended = false;
  // The bar shows the whole job (each stage an equal share, never going back); the text
  // the running stage, the whole, and the time since submission.
  const order = family === "mm3" ? ["semantic", "synth", "encode"] : ["plan", "semantic", "synth", "decode", "encode"];
  let overall = 0;
  const running = (name, progress) => {
    const at = order.indexOf(name);
    overall = Math.max(overall, at < 0 ? progress || 0 : Math.min(1, (at + (progress || 0)) / order.length));
    const elapsed = job.created ? ` · ${Math.round((Date.now() - job.created) / 1000)} s` : "";
    stage.textContent = `${name || "starting"} ${Math.round((progress || 0) * 100)}% · overall ${Math.round(overall * 100)}%${elapsed}`;
    bar.value = overall;
    li.dataset.stage = name || "";
    if (name && !info.stages.includes(name)) info.stages.push(name);
    info.progress = Math.max(info.progress, progress || 0);
  };

  // Live audio and events over the WebSocket. `play` false (a job found running after a
  // reload, when the page may not start sound on its own): the waveform and the score
  // follow the stream, the audio is the result's once it is done.
  const connect = async (play) => {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    // Set before the ticket is asked for, so that the polling does not connect twice.
    const live = (info.live = { ws: null, sources: [], stopped: false, play });
    peaks.length = 0; // a stream (again) from the first tile
    let url;
    try {
      url = await streamUrl("/stream", { id: job.id, format: "pcm16" });
    } catch {
      info.live = null; // the polling tries again
      return;
    }
    if (live.stopped) return;
    const ws = (live.ws = new WebSocket(`${proto}://${location.host}${url}`));
    ws.binaryType = "arraybuffer";
    // A stream that drops before its end (the daemon restarted, the network) is opened again
    // by the polling: it starts over from the song's first tile, so the waveform is drawn
    // again and the sound is the result's once it is done (not played twice).
    ws.onclose = () => {
      if (info.live === live && !ended && !live.stopped && !live.ended) {
        info.live = null;
        li.querySelector(".stop-live").hidden = true;
      }
    };
    ws.onmessage = (m) => {
      if (typeof m.data === "string") {
        const e = JSON.parse(m.data);
        if (e.event === "tile") header = e;
        else if (e.event === "format") rate = info.sampleRate = e.sample_rate;
        else if (e.event === "codes") seconds = e.frames / frameRate;
        else if (e.event === "stage" && !ended) running(e.stage, e.progress);
        else if (e.event === "score") showScore(li, e.abc);
        else if (e.event === "done") info.streamDoneAt = performance.now();
        else if (e.event === "queued" && !ended && status.dataset.status !== "running") stage.textContent = queueText(e.position);
        if (["done", "failed", "cancelled"].includes(e.event)) live.ended = true;
        return;
      }
      if (header && header.track !== 0) return; // play the first track live
      if (info.live.stopped) return;
      const pcm = new Int16Array(m.data);
      const frames = pcm.length / 2;
      if (!play) {
        for (let i = 0; i < frames; i += 1024) {
          let lo = 0, hi = 0;
          for (let k = i; k < Math.min(frames, i + 1024); k++) {
            lo = Math.min(lo, pcm[2 * k] / 32768);
            hi = Math.max(hi, pcm[2 * k] / 32768);
          }
          peaks.push([lo, hi]);
        }
        drawWave(li, peaks, (seconds * rate) / 1024);
        return;
      }
      const ctx = audioContext();
      const buf = ctx.createBuffer(2, frames, rate);
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
      drawWave(li, peaks, (seconds * rate) / 1024);
      const src = ctx.createBufferSource();
      src.buffer = buf;
      src.connect(master());
      const at = Math.max(ctx.currentTime + 0.05, nextTime);
      src.start(at);
      info.live.sources.push(src);
      src.onended = () => {
        info.live.sources = info.live.sources.filter((x) => x !== src);
        if (!info.live.sources.length && ended) {
          li.classList.remove("playing");
          li.querySelector(".stop-live").hidden = true;
        }
      };
      li.querySelector(".stop-live").hidden = false;
      nextTime = at + buf.duration;
      state.scheduled += 1;
      info.scheduled += 1;
      if (state.firstAudioAt === null) state.firstAudioAt = performance.now();
      if (info.firstAudioAt === null) info.firstAudioAt = performance.now();
      li.classList.add("playing");
    };
  };
  if (live) connect(true);

  // Status by polling (the WebSocket may be refused, the page may reload).
  pollJob(job, status, async (s) => {
    if (!info.live && !TERMINAL.has(s.status)) connect(false);
    if (s.status === "queued") {
      stage.textContent = queueText(s.queue_position);
      bar.removeAttribute("value");
    } else if (s.status === "running") {
      running(s.stage, s.progress);
    } else if (s.status === "failed") {
      stage.textContent = s.error || "failed";
      bar.value = 0;
    } else if (s.status === "cancelled") {
      stage.textContent = "cancelled";
      bar.value = 0;
    } else {
      stage.textContent = s.status === "done" && s.metrics ? `${s.metrics.audio_seconds.toFixed(1)} s of audio in ${s.metrics.worker_seconds.toFixed(1)} s` : "";
      bar.value = 1;
    }
    if (!TERMINAL.has(s.status)) return;
    ended = true;
    li.querySelector(".cancel").disabled = true;
    if (!finished && s.status === "done") {
      finished = true;
      state.doneAt[job.id] = performance.now();
      li.querySelector(".cancel").disabled = true;
      await showResult(job, li);
    }
  });
}

/** Polls a job's status into its card's `status` pill, calling `onStatus` with each answer
 * until the job is terminal (an unknown job stops it; an unreachable daemon is asked again). */
function pollJob(job, status, onStatus) {
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
    await onStatus(s);
    if (!TERMINAL.has(s.status)) setTimeout(poll, 250);
  };
  poll();
}

/** The result's files, grouped per track (`trackNN.*`): each track's audio, its downloads,
 * and its replay request, which "Replay" submits again as it is (the same song: its codes
 * and seeds) and "Edit" loads into the form. */
async function showResult(job, li) {
  const r = await api(`/job?id=${job.id}&result=1`);
  if (!r.ok) return;
  const parts = parseMultipart(await r.arrayBuffer(), r.headers.get("content-type"));
  const files = li.querySelector(".files");
  files.textContent = "";
  const groups = new Map();
  for (const p of parts) {
    const key = (/^(track\d+)\./.exec(p.name) || [])[1] || p.name;
    if (!groups.has(key)) {
      const div = document.createElement("div");
      div.className = "track";
      div.dataset.track = key;
      files.append(div);
      groups.set(key, div);
    }
    const box = groups.get(key);
    const url = URL.createObjectURL(new Blob([p.bytes], { type: p.type }));
    if (p.type.startsWith("audio/")) {
      const audio = document.createElement("audio");
      audio.controls = true;
      audio.src = url;
      audio.volume = Number($("volume").value);
      // One player per job: the result's takes over from the live stream.
      audio.addEventListener("play", () => stopLive(job.id));
      if (!li.dataset.waved) waveFromResult(li, p.bytes);
      box.prepend(audio);
      if (props.tokenizer) {
        const cover = document.createElement("button");
        cover.className = "cover-this";
        cover.type = "button";
        cover.textContent = "Cover this";
        cover.title = `Tokenize ${p.name} into semantic codes, to render again or continue`;
        cover.onclick = () => tokenize(new Blob([p.bytes], { type: p.type }), p.name, `Cover of ${job.id.slice(-6)}`);
        box.append(cover);
      }
      if (props.transcriber) {
        for (const melodyOnly of [false, true]) {
          const b = document.createElement("button");
          b.className = melodyOnly ? "transcribe-melody" : "transcribe-score";
          b.type = "button";
          b.textContent = melodyOnly ? "Transcribe melody" : "Transcribe score";
          const what = melodyOnly ? "its melodies alone" : "melodies and chords";
          b.title = `Write the ABC score heard in ${p.name}: ${what}`;
          const label = `${melodyOnly ? "Melody" : "Score"} of ${job.id.slice(-6)}`;
          b.onclick = () => transcribe(new Blob([p.bytes], { type: p.type }), p.name, melodyOnly, label);
          box.append(b);
        }
      }
    }
    if (p.type === "application/json") {
      let replay = null;
      try {
        replay = JSON.parse(new TextDecoder().decode(p.bytes));
      } catch {}
      if (replay && !li.querySelector(".seeds")) {
        // The seeds that make this track again (Edit loads them, with everything else).
        const seeds = document.createElement("span");
        seeds.className = "seeds muted";
        seeds.textContent = `seed ${replay.seed} · lm_seed ${replay.lm_seed}`;
        li.querySelector(".stage").after(" ", seeds);
      }
      if (replay && !job.replay) {
        job.replay = replay;
        if (job.replay.abc) showScore(li, job.replay.abc);
      }
      if (replay) {
        const again = document.createElement("button");
        again.className = "replay";
        again.type = "button";
        again.textContent = "Replay";
        again.title = `Submit ${p.name} again: the same song`;
        again.onclick = () => submit(replay);
        const edit = document.createElement("button");
        edit.className = "edit";
        edit.type = "button";
        edit.textContent = "Edit";
        edit.title = `Load ${p.name} into the form`;
        edit.onclick = () => {
          fillForm(replay);
          $("compose").scrollIntoView({ behavior: "smooth" });
        };
        box.append(again, edit);
      }
    }
    const a = document.createElement("a");
    a.href = url;
    a.download = `${job.id}-${p.name}`;
    a.textContent = `${p.name} (${size(p.bytes.length)})`;
    a.title = fileKind(p.name, p.type);
    a.className = "download";
    box.append(a);
  }
}

// ---------------------------------------------------------------- covers
/** The cover section, when the daemon serves an audio tokenizer (and the companion slider). */
function setupCover() {
  $("cover").hidden = !props.tokenizer && !props.transcriber;
  $("cover-submit").hidden = !props.tokenizer;
  $("cover-about").hidden = !props.tokenizer;
  $("transcribe-about").hidden = !props.transcriber;
  $("cover-title").textContent = !props.transcriber
    ? "Cover a recording"
    : props.tokenizer
      ? "Cover or transcribe a recording"
      : "Transcribe a recording";
  for (const melodyOnly of [false, true]) {
    const b = $(melodyOnly ? "transcribe-melody" : "transcribe-score");
    b.hidden = !props.transcriber;
    b.addEventListener("click", () => {
      const f = $("cover-file").files[0];
      if (!f) return ($("cover-error").textContent = "choose a recording first");
      transcribe(f, f.name, melodyOnly);
    });
  }
  $("companion-row").hidden = !props.companion;
  $("companion_scale").addEventListener("input", () => ($("companion-shown").textContent = Number($("companion_scale").value).toFixed(2)));
  $("cover-submit").addEventListener("click", () => {
    const f = $("cover-file").files[0];
    if (!f) return ($("cover-error").textContent = "choose a recording first");
    tokenize(f, f.name);
  });
}

/** Uploads a recording to `route` with the form's `fields`; its job (described by `request`)
 * joins the list through `track`. */
async function uploadRecording(route, blob, name, fields, request, label, track) {
  $("cover-error").textContent = "";
  const form = new FormData();
  form.append("audio", blob, name);
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  try {
    const { id } = await json(route, { method: "POST", body: form });
    const job = { id, request, created: Date.now(), label };
    saveJob(job);
    track(job);
  } catch (e) {
    $("cover-error").textContent = e.message;
    $("cover").scrollIntoView({ behavior: "smooth" });
  }
}

/** Submits a recording to POST /tokenize; its job joins the list. */
function tokenize(blob, name, label) {
  return uploadRecording("/tokenize", blob, name, {}, { tokenize: name }, label, trackCover);
}

/** An upload job's card (a tokenization, a transcription): its head (family `pill`, the
 * recording's name), progress, Cancel and Forget, then `body`. Listed first; its parts. */
function uploadCard(job, { className, family, pill, kind, name, body }) {
  const li = document.createElement("li");
  li.className = `job ${className}`;
  li.dataset.id = job.id;
  li.dataset.family = family;
  li.innerHTML = `
    <div class="head"><b class="id"></b> <span class="family pill"></span> <span class="title"></span>
      <span class="status pill" role="status"></span>
      <button class="cancel">Cancel</button> <button class="forget">Forget</button></div>
    <progress max="1" value="0"></progress> <span class="stage muted" aria-live="off"></span>${body}`;
  const title = job.label ? `${job.label}: ${name}` : name;
  li.querySelector(".id").textContent = job.id;
  li.querySelector(".family").textContent = pill;
  li.querySelector(".title").textContent = title;
  li.querySelector(".title").title = title;
  const named = `${kind} ${job.id.slice(-6)} (${title})`;
  li.querySelector(".cancel").setAttribute("aria-label", `Cancel ${named}`);
  li.querySelector(".forget").setAttribute("aria-label", `Forget ${named}`);
  li.querySelector("progress").setAttribute("aria-label", `Progress of ${named}`);
  li.querySelector(".cancel").onclick = () => api(`/job?id=${job.id}&cancel=1`, { method: "POST" });
  li.querySelector(".forget").onclick = () => {
    forgetJob(job.id);
    li.remove();
  };
  $("jobs").prepend(li);
  return { li, named, status: li.querySelector(".status"), bar: li.querySelector("progress"), stage: li.querySelector(".stage") };
}

/** Follows an upload job: its queue position, stage and progress on `card` and in `info`;
 * `ended(s)` once it is done, failed or cancelled (Cancel disabled by then). */
function followUpload(job, card, info, ended) {
  const { li, status, bar, stage } = card;
  pollJob(job, status, async (s) => {
    if (s.status === "queued") stage.textContent = queueText(s.queue_position);
    else if (s.status === "running") {
      bar.value = s.progress || 0;
      stage.textContent = `${s.stage || "starting"} ${Math.round((s.progress || 0) * 100)}%`;
      if (s.stage && !info.stages.includes(s.stage)) info.stages.push(s.stage);
      info.progress = Math.max(info.progress, s.progress || 0);
    } else if (s.status === "cancelled") stage.textContent = "cancelled";
    if (!TERMINAL.has(s.status)) return;
    li.querySelector(".cancel").disabled = true;
    await ended(s);
  });
}

/** A tokenization's card: its progress, then its codes with the two ways to use them. */
function trackCover(job) {
  const card = uploadCard(job, {
    className: "cover-job",
    family: "tokenize",
    pill: "Tokenize",
    kind: "tokenization",
    name: job.request.tokenize,
    body: `
    <div class="codes" hidden>
      <p class="muted codes-info"></p>
      <button type="button" class="rerender-codes">Re-render these codes</button>
      <span class="row">
        <label>From (s) <input type="number" class="source-start" min="0" step="any" value="0" /></label>
        <label>To (s, -1: the end) <input type="number" class="source-end" min="-1" step="any" value="-1" /></label>
        <button type="button" class="continue-codes">Continue from a section</button>
      </span>
    </div>`,
  });
  const { li, bar, stage } = card;
  const info = (state.jobs[job.id] = { family: "tokenize", stages: [], progress: 0, codes: null });
  followUpload(job, card, info, async (s) => {
    if (s.status === "failed") stage.textContent = s.error || "failed";
    if (s.status !== "done") return;
    bar.value = 1;
    stage.textContent = "";
    const r = await api(`/job?id=${job.id}&result=1`);
    if (!r.ok) return (stage.textContent = "the codes have expired");
    const { codes } = await r.json();
    info.codes = codes;
    const n = codes ? codes.split(",").length : 0;
    const rate = props.frame_rate || 25;
    li.querySelector(".codes").hidden = false;
    li.querySelector(".codes-info").textContent = `${n} codes (${(n / rate).toFixed(1)} s at ${rate} a second).`;
    // Either way the form gives the style, lyrics, seeds and steps; no score: the codes decide.
    const base = () => {
      if (currentFamily() !== "yue2") setFamily("yue2");
      const req = readYue2Form();
      delete req.abc;
      delete req.abc_continue;
      return req;
    };
    li.querySelector(".rerender-codes").onclick = () => submit({ ...base(), semantic_tokens: codes }, `Re-render of ${job.id.slice(-6)}`);
    li.querySelector(".continue-codes").onclick = () =>
      submit(
        { ...base(), source_tokens: codes, source_start: Number(li.querySelector(".source-start").value || 0), source_end: Number(li.querySelector(".source-end").value || -1) },
        `Continuation of ${job.id.slice(-6)}`,
      );
  });
}

// ---------------------------------------------------------------- transcriptions
/** Submits a recording to POST /transcribe (its score, or `melodyOnly` its melodies alone);
 * its job joins the list. */
function transcribe(blob, name, melodyOnly, label) {
  const request = { transcribe: name, melody_only: melodyOnly };
  return uploadRecording("/transcribe", blob, name, { melody_only: String(melodyOnly) }, request, label, trackTranscription);
}

/** A transcription's card: its progress, then the score as notation (and as ABC text, to
 * copy) with the two ways to sing it, or the reason there is none. */
function trackTranscription(job) {
  const melodyOnly = !!job.request.melody_only;
  const card = uploadCard(job, {
    className: "transcribe-job",
    family: "transcribe",
    pill: melodyOnly ? "Melody transcription" : "Transcription",
    kind: "transcription",
    name: job.request.transcribe,
    body: `
    <p class="why error" hidden></p>
    <div class="transcription" hidden>
      <div class="notation"></div>
      <div class="actions">
        <button type="button" class="sing-score">Sing this score</button>
        <button type="button" class="continue-score">Continue this score</button>
        <button type="button" class="copy-abc">Copy ABC</button> <span class="copied muted" aria-live="polite"></span>
      </div>
      <details class="abc-text"><summary>ABC text</summary><pre class="abc-raw"></pre></details>
    </div>`,
  });
  const { li, bar, stage } = card;
  li.dataset.melodyOnly = String(melodyOnly);
  li.querySelector(".notation").setAttribute("aria-label", `Score of ${card.named}`);
  const why = li.querySelector(".why");
  const info = { family: "transcribe", melodyOnly, stages: [], progress: 0, abc: null, error: null };
  state.jobs[job.id] = info;
  followUpload(job, card, info, async (s) => {
    if (s.status === "failed") {
      // The daemon's reason as it gives it ("no score: ..." when the recording's events
      // make none), and what that means.
      info.error = s.error || "failed";
      bar.value = 0;
      stage.textContent = "";
      why.hidden = false;
      why.textContent = info.error;
      // What the two reasons a recording gives no score mean (the notation's, the windows').
      let meaning = null;
      if (info.error.startsWith("no score: "))
        meaning = demoWeights
          ? " (the notes heard make no score: the demo's random weights seldom write one)"
          : " (the notes the transcriber heard in this recording make no score)";
      else if (info.error.includes("Overlap prefix fills the context"))
        meaning = demoWeights
          ? " (the demo's random weights write each window full, so a recording longer than one window stops at its next)"
          : " (a window's events left the next one no room to continue them)";
      if (meaning) {
        const hint = document.createElement("span");
        hint.className = "muted hint";
        hint.textContent = meaning;
        why.append(hint);
      }
    }
    if (s.status !== "done") return;
    bar.value = 1;
    stage.textContent = "";
    const r = await api(`/job?id=${job.id}&result=1`);
    if (!r.ok) return (stage.textContent = "the score has expired");
    const { abc } = await r.json();
    info.abc = abc;
    li.querySelector(".transcription").hidden = false;
    li.querySelector(".abc-raw").textContent = abc;
    abcjs.renderAbc(li.querySelector(".notation"), abc, { responsive: "resize" });
    const yue2 = (props.families || ["yue2"]).includes("yue2");
    li.querySelector(".sing-score").hidden = li.querySelector(".continue-score").hidden = !yue2;
    li.querySelector(".sing-score").onclick = () => useScore(job, abc, false);
    li.querySelector(".continue-score").onclick = () => useScore(job, abc, true);
    const raw = li.querySelector(".abc-raw"), said = li.querySelector(".copied");
    li.querySelector(".copy-abc").onclick = () => copyText(abc, raw, said);
  });
}

/** A transcription's score into the song form (not submitted: the form is the user's to
 * finish): sung as it is, or (`cont`) opening a song the planner writes the rest of. Cot
 * follows the score (melody for a melody-only one): the prompt says which kind it is, and
 * continuing needs the planner. */
function useScore(job, abc, cont) {
  if (currentFamily() !== "yue2") setFamily("yue2");
  const melodyOnly = !!job.request.melody_only;
  $("abc").value = abc;
  $("abc_continue").checked = cont;
  $("cot").value = melodyOnly ? "melody" : "full";
  $("form-error").textContent = "";
  const kind = melodyOnly ? "melody" : "melody and chords";
  $("abc-source").textContent = `The score of transcription ${job.id.slice(-6)} (${kind}): Render ${
    cont ? "sings it and the model writes the rest of the song" : "sings it"
  }.`;
  $("compose").scrollIntoView({ behavior: "smooth" });
  $("abc").focus({ preventScroll: true });
}

/** Copies `text` (the clipboard API where the page may use it, else the selected `pre`). */
async function copyText(text, pre, said) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    pre.closest("details").open = true;
    const range = document.createRange();
    range.selectNodeContents(pre);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    if (!document.execCommand("copy")) return (said.textContent = "selected: press Ctrl+C to copy");
  }
  said.textContent = "copied";
  setTimeout(() => (said.textContent = ""), 2000);
}

// ---------------------------------------------------------------- header and logs
async function health() {
  try {
    // /status needs the key where keys are configured (/health tells anyone only liveness).
    const h = await json("/status");
    $("health").textContent = `${h.status}${h.demo_weights ? " · demo weights" : ""} · ${h.queue.queued} queued · ${h.queue.running.length} running`;
    $("health").dataset.status = h.status;
  } catch (e) {
    // A key the daemon refuses is not the daemon down.
    const refused = /API key/.test(e.message);
    $("health").textContent = refused ? `key refused: ${e.message}` : `down: ${e.message}`;
    $("health").dataset.status = refused ? "key" : "down";
  }
  setTimeout(health, 2000);
}

function logs() {
  // The open EventSource, or a marker while its ticket is on its way, or null.
  let source = null;
  const close = () => {
    if (source instanceof EventSource) source.close();
    source = null;
  };
  // A ticket is taken once: after a drop, the browser's own retry would present it again, so
  // the page opens a new source with a new ticket instead.
  const open = async () => {
    const marker = {};
    source = marker;
    let url;
    try {
      url = await streamUrl("/logs");
    } catch (e) {
      $("logs").textContent += `cannot open the log: ${e.message}\n`;
      if (source === marker) source = null;
      return;
    }
    if (source !== marker) return; // closed while the ticket was on its way
    const es = (source = new EventSource(url));
    es.onerror = () => {
      if (source !== es) return;
      close();
      setTimeout(() => $("logs-panel").open && !source && open(), 2000);
    };
    es.onmessage = (m) => {
      const pre = $("logs");
      pre.textContent += m.data + "\n";
      if (pre.textContent.length > 200000) pre.textContent = pre.textContent.slice(-150000);
      pre.scrollTop = pre.scrollHeight;
    };
  };
  $("logs-panel").addEventListener("toggle", () => {
    if ($("logs-panel").open && !source) open();
    else if (!$("logs-panel").open && source) close();
  });
}

async function main() {
  // Until /props has set the form up, Render must not fall back to the browser's own submit
  // (a reload with the lyrics in the URL).
  $("form").addEventListener("submit", (e) => {
    if (props) return;
    e.preventDefault();
    $("form-error").textContent = "The daemon's settings have not loaded yet (see above): nothing was sent.";
  });
  // The key first: on a daemon with keys, nothing else loads without it. A new key loads the
  // page again with it.
  $("api-key").value = apiKey();
  $("api-key").addEventListener("change", () => {
    localStorage.setItem(KEY, $("api-key").value.trim());
    location.reload();
  });
  $("volume").addEventListener("input", (e) => setVolume(Number(e.target.value)));
  health();
  logs();
  try {
    props = await json("/props");
  } catch (e) {
    const hint = /API key/.test(e.message) ? " (enter this daemon's API key at the top)" : "";
    $("form-error").textContent = `cannot read /props: ${e.message}${hint}`;
    return;
  }
  setupForm();
  // Before the cards: a failed transcription's card says what the demo's weights mean.
  await demoDefaults();
  const local = loadJobs();
  // Oldest first, each card on top of the last: the daemon's extra jobs end up below.
  for (const job of await daemonJobs(local.map((j) => j.id))) {
    track(job, false);
    saveJob(job);
  }
  for (const job of local.reverse()) track(job, false);
}

/** On the demo's random weights a score cannot be written: the form starts with cot off
 * and says why (a render with cot full would fail after its retries). */
async function demoDefaults() {
  try {
    const h = await json("/health");
    if (!h.demo_weights) return;
    demoWeights = true;
    $("cot").value = "off";
    $("demo-note").hidden = false;
  } catch (e) {
    // the header's health line reports the daemon unreachable
  }
}

main();
