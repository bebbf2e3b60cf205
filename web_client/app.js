// The page: buttons, source picker with consent, prompt (and what it was understood as), edit sliders,
// strength, stats overlay, and a clear message for every failure.
import { LiveFuseConnection, RefusedError, UnreachableError } from "./connection.js";
import { formatEdits, sourceRefusalText } from "./words.js";

const $ = (id) => document.getElementById(id);
const state = {
  connected: false, session: null, stats: null, errors: [], messages: 0, sourceBlob: null, sourceName: "demo",
  source: null, consent: false, understood: null, promptRefused: null, edits: {},
  vocabulary: [], // the server's edits (GET /edits): one slider each
  sources: [],    // source ids this session holds (uploaded with consent)
  faces: [],      // the faces the server tracks now: {track_id, box, source_id}
  faceChoices: {}, // track id -> what the user picked ("" default, "keep", a source id)
};
window.livefuse = state; // read by the end-to-end test and handy in the console

let conn = null;

function setState(text, kind) {
  const pill = $("state");
  pill.textContent = text;
  pill.className = `pill ${kind}`;
}

function notice(text, kind = "error") {
  const box = $("notice");
  if (!text) { box.hidden = true; return; }
  box.textContent = text;
  box.className = `notice ${kind === "info" ? "info" : ""}`;
  box.hidden = false;
}

function explain(err) {
  if (err instanceof RefusedError) {
    if (err.status === 503) return `The server is full right now (${err.message}). Try again in ${err.retryAfter || "a few"} seconds.`;
    if (err.status === 401 || err.status === 403) return `The server refused this browser: ${err.message}.`;
    if (err.status === 422) return sourceRefusalText(err.code, err.message);
    return `The server refused the request (${err.status}): ${err.message}`;
  }
  if (err instanceof UnreachableError) return "Can't reach the LiveFuse server. Is `livefuse serve` running on this address?";
  switch (err && err.name) {
    case "NotFoundError":
    case "OverconstrainedError": return "No camera found. Plug in a webcam (or pick another one in the browser) and press Start again.";
    case "NotAllowedError": return "Camera permission was denied. Allow camera access for this page (the icon in the address bar) and press Start again.";
    case "NotReadableError": return "The camera is busy in another application. Close it there and press Start again.";
    case "SecurityError":
    case "TypeError": return "The camera needs a secure page: open it as http://localhost:… or serve it over https (livefuse serve --cert/--key).";
    default: return `Something went wrong: ${err && err.message ? err.message : err}`;
  }
}

async function demoBlob() {
  const resp = await fetch("/assets/demo_source.jpg");
  return resp.blob();
}

async function start() {
  notice("");
  $("start").disabled = true;
  setState("starting camera…", "busy");
  conn = new LiveFuseConnection();
  try {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) throw Object.assign(new Error("no mediaDevices"), { name: "SecurityError" });
    $("local").srcObject = await conn.openCamera();
    $("local-empty").hidden = true;
    setState("connecting…", "busy");
    conn.addEventListener("track", (e) => { $("remote").srcObject = e.detail; $("remote-empty").hidden = true; });
    conn.addEventListener("state", (e) => onConnectionState(e.detail));
    conn.addEventListener("stats", (e) => showStats(e.detail));
    conn.addEventListener("error", (e) => { state.errors.push(e.detail); notice(`Server: ${e.detail.message}`, "info"); });
    conn.addEventListener("draining", (e) => { if (!e.detail.closing) notice("This server is shutting down; the stream goes on for now."); });
    conn.addEventListener("bye", (e) => { notice(`The server ended the session: ${e.detail.reason}`); stop(false); });
    conn.addEventListener("message", () => { state.messages += 1; });
    conn.addEventListener("prompt", (e) => showUnderstood(e.detail));
    conn.addEventListener("prompt_refused", (e) => showRefused(e.detail.reason));
    const body = await conn.connect();
    state.session = body.session;
    $("stages-line").textContent = body.stages.length ? `Pipeline: ${body.stages.join(" → ")}` : "Pipeline: pass-through (no face stages installed yet)";
    $("fusion-box").hidden = !body.stages.includes("swap");   // the switch only where a swap model is loaded
    if ($("fusion").value) conn.setParams({ fusion: $("fusion").value });
    state.sourceBlob = state.sourceBlob || (await demoBlob());
    await sendSource();
    if (Object.values(state.edits).some((v) => v !== 0)) sendEdits();
    if ($("strength").value !== "100") conn.setParams({ strength: $("strength").value / 100 });
    $("stop").disabled = false;
  } catch (err) {
    console.error(err);
    notice(explain(err));
    setState("not connected", "error");
    stop(false);
  }
}

function stop(clearNotice = true) {
  if (conn) conn.close();
  conn = null;
  state.connected = false;
  state.session = null;
  state.source = null;
  state.sources = [];          // a new session starts with none
  state.faceChoices = {};
  showFaces([]);
  showSourceStatus();
  $("start").disabled = false;
  $("stop").disabled = true;
  $("stats").hidden = true;
  $("local").srcObject = null;
  $("remote").srcObject = null;
  $("local-empty").hidden = false;
  $("remote-empty").hidden = false;
  if (clearNotice) { notice(""); setState("not connected", "idle"); }
}

function onConnectionState(s) {
  if (s === "connected") { state.connected = true; setState("live", "live"); }
  else if (s === "failed") { notice("The connection to the server failed (network or firewall)."); stop(false); setState("disconnected", "error"); }
  else if (s === "disconnected") setState("reconnecting…", "busy");
}

async function showStats(s) {
  state.stats = s;
  const c = conn ? await conn.clientDelays() : {};
  // What can be measured from here: the server's own delay, one frame in the server's receive jitter buffer
  // (it releases a frame when the next one starts), the network round trip and this browser's jitter buffer.
  // Capture, encode and display are not visible to the page, so this is a lower bound.
  const server = s.server_delay_ms ?? 0;
  const serverBuffer = s.fps_in > 0 ? 1000 / s.fps_in : 0;
  const total = server + serverBuffer + (c.rttMs ?? 0) + (c.jitterMs ?? 0);
  state.clientDelays = c;
  state.delayLowerBoundMs = total;
  $("stats").hidden = false;
  $("s-fps").textContent = `${s.fps_in.toFixed(0)} / ${s.fps_out.toFixed(0)}`;
  $("s-delay").textContent = `≥ ${total.toFixed(0)} ms`;
  $("s-delay").parentElement.title = `lower bound: server ${server.toFixed(1)} ms + server receive buffer ${serverBuffer.toFixed(1)} ms` +
    ` + network ${(c.rttMs ?? 0).toFixed(1)} ms + browser jitter buffer ${(c.jitterMs ?? 0).toFixed(1)} ms`;
  $("s-drops").textContent = `${s.dropped}`;
  $("s-stages").innerHTML = Object.entries(s.stages_ms)
    .map(([name, ms]) => `<div><span>${escapeHtml(name)}</span><b>${ms.toFixed(1)} ms</b></div>`).join("");
  showFaces(s.faces || [], s.size);
}

// ---- faces in view: a thumbnail per tracked face (cut from the local preview by the server's box) ----
function faceOptions(selected) {
  const opts = [["", "the selected face"], ["keep", "leave unchanged"], ...state.sources.map((id) => [id, id])];
  return opts.map(([v, t]) => `<option value="${escapeHtml(v)}"${v === selected ? " selected" : ""}>${escapeHtml(t)}</option>`).join("");
}

function showFaces(faces, size) {
  state.faces = faces;
  const box = $("faces");
  $("faces-box").hidden = faces.length === 0;
  const seen = new Set();
  const video = $("local");
  for (const f of faces) {
    const key = String(f.track_id);
    seen.add(key);
    let card = box.querySelector(`[data-track="${key}"]`);
    if (!card) {
      card = document.createElement("div");
      card.className = "face";
      card.dataset.track = key;
      card.innerHTML = `<canvas width="64" height="64"></canvas><span class="small">face ${key}</span><select></select>`;
      card.querySelector("select").addEventListener("change", (e) => chooseFace(f.track_id, e.target.value, card));
      box.appendChild(card);
    }
    const select = card.querySelector("select");
    const want = faceOptions(state.faceChoices[key] ?? "");
    if (select._options !== want) { select.innerHTML = want; select._options = want; }
    card.title = f.source_id ? `fused with ${f.source_id}` : "unchanged";
    if (size && video.videoWidth) { // the server's frame may be scaled from the preview's
      const k = video.videoWidth / size[0];
      const [x0, y0, x1, y1] = f.box;
      const side = Math.max(x1 - x0, y1 - y0) * 1.2 * k;
      const cx = (x0 + x1) / 2 * k, cy = (y0 + y1) / 2 * k;
      card.querySelector("canvas").getContext("2d").drawImage(video, cx - side / 2, cy - side / 2, side, side, 0, 0, 64, 64);
    }
  }
  box.querySelectorAll(".face").forEach((el) => { if (!seen.has(el.dataset.track)) el.remove(); });
}

function chooseFace(trackId, value, card) {
  if (!conn) return;
  const id = conn.mapFace(trackId, value === "" ? null : value);
  const onReply = (ev) => {
    if (ev.detail.id !== id) return;
    conn.removeEventListener("message", onReply);
    if (ev.detail.type === "ack") { state.faceChoices[String(trackId)] = value; card.classList.remove("refused"); }
    else { card.classList.add("refused"); notice(`Face ${trackId}: ${ev.detail.message}`); }
  };
  conn.addEventListener("message", onReply);
}

function escapeHtml(t) { return t.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`); }

function sourceLabel() {
  return state.sourceName === "demo" ? "the demo face" : "your uploaded photo";
}

// One line under the picker that always says whether faces are being fused, and if not, why.
function showSourceStatus(text, kind = "") {
  const line = $("source-status");
  if (text === undefined) {
    if (!state.consent) { text = "No face fusion: tick “I have the right to use this face” to use the selected face. Nothing is uploaded until you do."; kind = "warn"; }
    else if (state.source) { text = `Fusing ${sourceLabel()} into your camera.`; kind = "ok"; }
    else if (conn && conn.session) { text = `Sending ${sourceLabel()}…`; }
    else { text = `Ready: ${sourceLabel()} will be used when you start the camera.`; }
  }
  line.textContent = text;
  line.className = `small status ${kind}`;
}

async function sendSource() {
  showSourceStatus();
  if (!conn || !conn.session || !state.sourceBlob) return;
  if (!state.consent) {
    // without consent nothing is uploaded, and a source sent earlier stops being used
    if (state.source) { conn.setParams({ source_id: null }); state.source = null; }
    showSourceStatus();
    return;
  }
  try {
    state.source = await conn.uploadSource(state.sourceBlob, state.sourceName, { consent: true });
    if (state.source && !state.sources.includes(state.source.source_id)) state.sources.push(state.source.source_id);
    showSourceStatus();
  } catch (err) {
    state.source = null;
    state.sourceError = { status: err.status, code: err.code, message: err.message };
    showSourceStatus(`No face fusion: ${explain(err)}`, "bad");
  }
}

// ---- prompt: what the server understood, or why it refused ----------------------------------------
function showUnderstood(ev) {
  if (!ev.text) { $("prompt-understood").hidden = true; return; } // no prompt: nothing to explain
  state.understood = ev;
  state.promptRefused = null;
  const box = $("prompt-understood");
  box.hidden = false;
  box.classList.remove("refused");
  $("understood-line").textContent = `Understood as: ${formatEdits(ev.understood, state.vocabulary)}`;
  const notes = [];
  if (ev.translated) notes.push(`read as “${ev.translated}”`);
  if (ev.unknown) notes.push(`not understood: “${ev.unknown}”`);
  if (ev.truncated) notes.push(ev.message || "the prompt was cut to the encoder's limit");
  if (typeof ev.encode_ms === "number") notes.push(ev.cached ? "from cache" : `encoded in ${ev.encode_ms.toFixed(0)} ms`);
  $("understood-notes").textContent = notes.join(" · ");
}

function showRefused(reason) {
  state.promptRefused = reason || "refused by the server's policy";
  $("prompt-status").textContent = `Refused: ${state.promptRefused}. The previous prompt stays in effect.`;
  $("prompt-status").className = "small bad";
}

// ---- edit sliders ------------------------------------------------------------------------------------
// One slider per edit the server knows (GET /edits), in its order; a slider's position is the edit's value in hundredths.
async function loadEdits() {
  try {
    const resp = await fetch("/edits");
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    state.vocabulary = await resp.json();
  } catch (err) {
    notice(`Can't load the list of edits from the server (${err.message}); the sliders are unavailable.`);
    return;
  }
  buildEditSliders();
}

function buildEditSliders() {
  const box = $("edit-sliders");
  for (const { name, label, minus, plus, help, low, high } of state.vocabulary) {
    state.edits[name] = 0;
    const row = document.createElement("label");
    row.className = "edit";
    row.innerHTML = `<span class="edit-name"></span><input type="range" step="5" value="0"><output>0</output>`;
    row.querySelector(".edit-name").textContent = label;
    row.title = `${label}: left = ${minus}, right = ${plus} (${help})`;
    const input = row.querySelector("input");
    input.min = String(Math.round(low * 100));
    input.max = String(Math.round(high * 100));
    input.setAttribute("aria-label", `${label} (left ${minus}, right ${plus})`);
    input.dataset.edit = name;
    input.id = `edit-${name}`;
    input.addEventListener("input", () => {
      state.edits[name] = Number(input.value) / 100;
      row.querySelector("output").textContent = formatValue(state.edits[name]);
      editsChanged();
    });
    box.appendChild(row);
  }
}

function formatValue(v) { return v === 0 ? "0" : `${v > 0 ? "+" : "−"}${Math.abs(v).toFixed(2)}`; }

let editsTimer = null;
function editsChanged(now = false) {
  const changed = Object.values(state.edits).filter((v) => v !== 0).length;
  $("edits-summary").textContent = changed ? `${changed} changed` : "all at centre";
  clearTimeout(editsTimer);
  if (now) sendEdits();
  else editsTimer = setTimeout(sendEdits, 150);
}

function sendEdits() {
  if (conn) conn.setParams({ edits: { ...state.edits } });
}

function resetEdits() {
  document.querySelectorAll("#edit-sliders input").forEach((input) => {
    input.value = 0;
    state.edits[input.dataset.edit] = 0;
    input.closest(".edit").querySelector("output").textContent = "0";
  });
  editsChanged(true);
}

// Consent belongs to a face: picking another face shows (and uses) that face's own tick.
function pickSource(label) {
  document.querySelectorAll(".source").forEach((el) => el.classList.toggle("selected", el === label));
  state.consent = Boolean(label._consented);
  $("consent").checked = state.consent;
}

loadEdits();
showSourceStatus();
$("edits-reset").addEventListener("click", resetEdits);
$("consent").addEventListener("change", async (e) => {
  state.consent = e.target.checked;
  const selected = document.querySelector(".source.selected");
  if (selected) selected._consented = state.consent;
  await sendSource();
});
$("start").addEventListener("click", start);
$("stop").addEventListener("click", () => stop());
$("sources").addEventListener("click", async (e) => {
  const label = e.target.closest(".source");
  if (!label) return;
  pickSource(label);
  state.sourceName = label.dataset.id;
  state.sourceBlob = label.dataset.id === "demo" ? await demoBlob() : label._blob;
  await sendSource();
});
$("upload").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  if (!file) return;
  const label = document.createElement("label");
  label.className = "source";
  label.dataset.id = `upload${document.querySelectorAll(".source").length}`;
  label._blob = file;
  label.innerHTML = `<img alt="uploaded face"><span></span>`;
  label.querySelector("img").src = URL.createObjectURL(file);
  label.querySelector("span").textContent = file.name.slice(0, 12);
  $("sources").appendChild(label);
  pickSource(label);
  state.sourceName = label.dataset.id;
  state.sourceBlob = file;
  await sendSource();
});
$("prompt-form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (!conn) { $("prompt-status").textContent = "Start the camera first."; return; }
  const text = $("prompt").value;
  const id = conn.setPrompt(text);
  $("prompt-status").textContent = "sending…";
  $("prompt-status").className = "small";
  const onReply = (ev) => {
    if (ev.detail.id !== id) return;
    conn.removeEventListener("message", onReply);
    const result = ev.detail.result || {};
    if (ev.detail.type === "ack" && result.allowed === false) { showRefused(result.reason); return; }
    $("prompt-status").textContent = ev.detail.type === "ack" ? (text ? `Applied: “${text}”` : "Prompt cleared") : `Not applied: ${ev.detail.message}`;
    if (!text) $("prompt-understood").hidden = true;
  };
  conn.addEventListener("message", onReply);
});
let strengthTimer = null;
$("strength").addEventListener("input", (e) => {
  $("strength-value").textContent = `${e.target.value}%`;
  clearTimeout(strengthTimer);
  strengthTimer = setTimeout(() => conn && conn.setParams({ strength: e.target.value / 100 }), 80);
});
$("fusion").addEventListener("change", (e) => conn && conn.setParams({ fusion: e.target.value || null }));
