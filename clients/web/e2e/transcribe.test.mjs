// Transcriptions in the WebUI, end to end in Debian's Chromium against `yued serve` on the
// embedded demo (its SheetSage2 head has random weights: most transcriptions fail with
// "no score: ..."). An uploaded WAV goes to "Transcribe melody"; its card follows the job
// to its end and shows either the score as notation (an SVG, the ABC text, "Sing this
// score" and "Continue this score", which fill the form) or the daemon's reason for none,
// without those buttons. The card comes back after a reload, and from GET /jobs when the
// page's storage is gone. A finished song's "Transcribe score" sends its audio the same
// way. The form's "Continue this score" box goes into the request and keeps cot on. A
// screenshot of each step goes to $SCREENSHOTS. Exits non-zero on any failure.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const YUED = process.env.YUED_BIN;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOTS || join(tmpdir(), "yued-webui-transcribe-screenshots");
if (!YUED) throw new Error("YUED_BIN is not set");
mkdirSync(SHOTS, { recursive: true });

const freePort = () =>
  new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => ok(p));
    });
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
const TERMINAL = ["done", "failed", "cancelled"];

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

/** axe-core over the page as it is: no serious or critical accessibility violation. */
async function axeCheck(page, what) {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations
      .filter((v) => ["serious", "critical"].includes(v.impact))
      .map((v) => `${v.id} ×${v.nodes.length} (${v.nodes[0].target.join(" ")}: ${v.help})`);
  });
  check(found.length === 0, `axe-core on ${what}: ${found.join("; ")}`);
}

/** A short mono WAV (16-bit, 24 kHz): a scale of sine tones, two a second. */
function scaleWav(seconds) {
  const rate = 24000, n = Math.round(seconds * rate);
  const notes = [262, 294, 330, 349, 392, 440, 494, 523];
  const b = Buffer.alloc(44 + 2 * n);
  b.write("RIFF", 0);
  b.writeUInt32LE(36 + 2 * n, 4);
  b.write("WAVEfmt ", 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(2 * rate, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write("data", 36);
  b.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const f = notes[Math.floor(t * 2) % notes.length];
    b.writeInt16LE(Math.round(0.4 * 32767 * Math.sin(2 * Math.PI * f * t)), 44 + 2 * i);
  }
  return b;
}

const port = await freePort();
const data = process.env.YUED_DATA || mkdtempSync(join(tmpdir(), "yued-webui-transcribe-"));
const args = ["serve", "--port", String(port), "--data-dir", data, "--device", "CPU", "--threads", "1"];
const daemon = spawn(YUED, [...args, "--vae-core", "32"], {
  stdio: ["ignore", "ignore", "pipe"],
  env: { ...process.env, NO_COLOR: "1" },
});
let log = "";
daemon.stderr.on("data", (d) => (log += d));
const base = `http://127.0.0.1:${port}`;
let browser;
let step = 0;
try {
  for (let i = 0; ; i++) {
    try {
      const h = await (await fetch(`${base}/health`)).json();
      if (h.ready) break;
    } catch {}
    check(i < 600, `yued did not come up: ${log}`);
    await sleep(100);
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const shot = async (name) =>
    page.screenshot({ path: join(SHOTS, `${String(++step).padStart(2, "0")}-${name}.png`), fullPage: true });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));

  const props = await (await fetch(`${base}/props`)).json();
  check(typeof props.transcriber === "string", `the demo serves a transcriber (${JSON.stringify(props.transcriber)})`);
  await page.goto(base + "/");
  await page.waitForFunction(() => document.getElementById("health").dataset.status === "ok", null, { timeout: 30000 });
  await page.locator("#transcribe-melody").waitFor({ state: "visible", timeout: 10000 });
  check(await page.locator("#transcribe-score").isVisible(), "the upload offers Transcribe score");
  check(await page.locator("#cover-submit").isVisible(), "tokenizing stays beside it");
  check(await page.locator("#transcribe-about").isVisible(), "the section says what transcribing does");
  check(!(await page.locator("#abc_continue").isChecked()), "Continue this score starts unticked");
  // No recording chosen: said, no job.
  await page.click("#transcribe-melody");
  const said = await page.locator("#cover-error").textContent();
  check(said === "choose a recording first", `a missing recording is said (${said})`);
  check((await page.locator("li.job").count()) === 0, "no job without a recording");
  await shot("transcribe-upload");

  /** The card of transcription `tid` at its end, as GET /job?id= reports the job: a done one
   * shows the notation, the ABC text and the two buttons (which fill the form); a failed one
   * the daemon's reason and neither button. Returns the status. */
  const checkEnded = async (tid, melodyOnly) => {
    const card = page.locator(`li.transcribe-job[data-id="${tid}"]`);
    await page.waitForFunction(
      ([id, t]) => t.includes(document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status),
      [tid, TERMINAL],
      { timeout: 240000 },
    );
    const s = await (await fetch(`${base}/job?id=${tid}`)).json();
    check(s.status === (await card.locator(".status").getAttribute("data-status")), `the card's status is the job's`);
    const sing = card.locator("button.sing-score"), cont = card.locator("button.continue-score");
    if (s.status === "done") {
      const r = await fetch(`${base}/job?id=${tid}&result=1`);
      const { abc } = await r.json();
      await card.locator(".notation svg").first().waitFor({ timeout: 10000 });
      check((await card.locator(".abc-raw").textContent()) === abc, "the ABC text is the result's");
      check((await sing.isVisible()) && (await cont.isVisible()), "a done card offers to sing and to continue");
      check(await card.locator(".why").isHidden(), "a done card shows no failure");
      await sing.click();
      check((await page.inputValue("#abc")) === abc, "Sing this score fills the form's score");
      check(!(await page.isChecked("#abc_continue")), "Sing this score: abc_continue unticked");
      check((await page.inputValue("#cot")) === (melodyOnly ? "melody" : "full"), "cot follows the score's kind");
      await cont.click();
      check((await page.inputValue("#abc")) === abc && (await page.isChecked("#abc_continue")), "Continue ticks it");
      check((await page.inputValue("#cot")) === (melodyOnly ? "melody" : "full"), "continuing keeps cot on");
    } else {
      check(s.status === "failed", `the transcription ended ${s.status}`);
      const why = card.locator(".why");
      check(await why.isVisible(), "a failed card shows why");
      const text = await why.textContent();
      check(text.startsWith(s.error), `the card's reason is the daemon's (${text} vs ${s.error})`);
      if (s.error.startsWith("no score: ")) check(/make no score/.test(text), "a missing score is explained");
      check(await card.locator(".transcription").isHidden(), "no score view on a failed card");
      check(!(await sing.isVisible()) && !(await cont.isVisible()), "a failed card offers neither Sing nor Continue");
    }
    check(await card.locator("button.cancel").isDisabled(), "Cancel is disabled on an ended transcription");
    return s;
  };

  // Transcribe melody on an uploaded WAV.
  const wav = join(data, "melody.wav");
  writeFileSync(wav, scaleWav(4));
  await page.setInputFiles("#cover-file", wav);
  await page.click("#transcribe-melody");
  const card = page.locator("li.transcribe-job").first();
  await card.waitFor({ timeout: 15000 });
  const tid = await card.getAttribute("data-id");
  check(/^[0-9a-f]{16}$/.test(tid), `job id ${tid}`);
  check((await card.getAttribute("data-melody-only")) === "true", "a melody transcription");
  check((await card.locator(".family").textContent()) === "Melody transcription", "the card names its kind");
  check((await card.locator(".title").textContent()) === "melody.wav", "the card names the recording");
  const listed = (await (await fetch(`${base}/jobs`)).json()).jobs.find((j) => j.id === tid);
  check(listed?.upload === "transcribe_melody", `GET /jobs lists it as transcribe_melody (${JSON.stringify(listed)})`);
  // While it runs: no Sing/Continue (the score is not there yet).
  const early = await card.locator(".status").getAttribute("data-status");
  if (!TERMINAL.includes(early)) {
    check(!(await card.locator("button.sing-score").isVisible()), "no Sing this score before the job is done");
    await shot("transcribe-running");
  }
  const first = await checkEnded(tid, true);
  const info = await page.evaluate((id) => window.__yued.jobs[id], tid);
  console.log(`melody transcription ${tid}: ${first.status} ${first.error || ""} (stages seen ${info.stages})`);
  await shot(`transcribe-${first.status}`);
  await axeCheck(page, "a transcription's card");

  // A reload finds it again (the page's storage); without the storage, GET /jobs does.
  await page.reload();
  await page.locator(`li.transcribe-job[data-id="${tid}"]`).waitFor({ timeout: 15000 });
  check((await checkEnded(tid, true)).status === first.status, "the same outcome after a reload");
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  const restored = page.locator(`li.transcribe-job[data-id="${tid}"]`);
  await restored.waitFor({ timeout: 15000 });
  check((await restored.getAttribute("data-melody-only")) === "true", "GET /jobs's transcribe_melody: a melody card");
  check((await checkEnded(tid, true)).status === first.status, "the same outcome from GET /jobs");
  await shot("transcribe-restored");

  // A finished song's "Transcribe score": its audio, chords and all.
  await page.fill("#style", "folk, acoustic guitar");
  await page.fill("#lyrics", "[verse]\nLa la la\n");
  await page.selectOption("#cot", "off");
  await page.fill("#duration", "4");
  await page.fill("#steps", "2");
  await page.click("#submit");
  const song = page.locator("li.job[data-family=yue2]").first();
  await song.waitFor({ timeout: 10000 });
  const sid = await song.getAttribute("data-id");
  await page.waitForFunction(
    (id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "done",
    sid,
    { timeout: 240000 },
  );
  const button = song.locator("button.transcribe-score").first();
  await button.waitFor({ timeout: 15000 });
  check(await song.locator("button.transcribe-melody").first().isVisible(), "a finished song offers Transcribe melody");
  await button.click();
  await page.waitForFunction(
    (known) => [...document.querySelectorAll("li.transcribe-job")].some((l) => l.dataset.id !== known),
    tid,
    { timeout: 15000 },
  );
  const sCard = page.locator("li.transcribe-job").first();
  const stid = await sCard.getAttribute("data-id");
  check((await sCard.getAttribute("data-melody-only")) === "false", "Transcribe score: the whole score");
  check((await sCard.locator(".family").textContent()) === "Transcription", "the card names its kind");
  const title = await sCard.locator(".title").textContent();
  check(title.startsWith(`Score of ${sid.slice(-6)}: track00.`), `the card names the song and its track (${title})`);
  const sListed = (await (await fetch(`${base}/jobs`)).json()).jobs.find((j) => j.id === stid);
  check(sListed?.upload === "transcribe", `GET /jobs lists it as transcribe (${JSON.stringify(sListed)})`);
  const second = await checkEnded(stid, false);
  console.log(`song transcription ${stid}: ${second.status} ${second.error || ""}`);
  // Sing/Continue on done cards only.
  const offers = await page.locator("li.transcribe-job").evaluateAll((ls) =>
    ls.map((l) => ({
      status: l.querySelector(".status").dataset.status,
      offered: [".sing-score", ".continue-score"].some((b) => !!l.querySelector(b)?.checkVisibility()),
    })),
  );
  const onlyDone = offers.every((o) => o.offered === (o.status === "done"));
  check(onlyDone, `Sing/Continue only on done cards (${JSON.stringify(offers)})`);
  await shot("transcribe-song");

  // The form's box: ticked under cot off it turns cot on, and the request carries it.
  await page.fill("#abc", "X:1\nT:Opening\nM:4/4\nL:1/8\nK:C\nC2 D2 E2 F2 | G8 |\n");
  await page.selectOption("#cot", "off");
  await page.check("#abc_continue");
  check((await page.inputValue("#cot")) === "full", "ticking Continue under cot off turns cot full");
  const before = await page.locator("li.job").count();
  await page.click("#submit");
  await page.waitForFunction((n) => document.querySelectorAll("li.job").length > n, before, { timeout: 15000 });
  const cid = await page.locator("li.job").first().getAttribute("data-id");
  const stored = JSON.parse(await page.evaluate(() => localStorage.getItem("yued.jobs")));
  const req = stored.find((j) => j.id === cid)?.request || {};
  const carried = req.abc_continue === true && req.abc.startsWith("X:1") && req.cot === "full";
  check(carried, `the request carries abc_continue with the score and cot full (${JSON.stringify(req)})`);
  await fetch(`${base}/job?id=${cid}&cancel=1`, { method: "POST" });
  await page.uncheck("#abc_continue");
  await shot("transcribe-form");

  // A phone: nothing wider than the screen, the reason wrapped.
  await page.setViewportSize({ width: 390, height: 844 });
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 390, `the page fits a 390 px screen (${wide} px wide)`);
  await shot("transcribe-phone");
  await axeCheck(page, "the transcriptions on a phone");
  check(errors.length === 0, `no page errors (${errors.join("; ")})`);
  console.log(`webui transcribe e2e: ok (melody ${tid} ${first.status}, score ${stid} ${second.status}; ${SHOTS})`);
} catch (e) {
  console.error(e.stack || e.message);
  console.error("--- daemon log (tail) ---\n" + log.slice(-4000));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  daemon.kill("SIGKILL");
  if (!process.env.YUED_DATA) rmSync(data, { recursive: true, force: true });
}
