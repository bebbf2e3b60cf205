// The page: camera, the watch link to share, source photos (each with its own consent), prompts, sliders,
// faces in view, stats, and a clear message for every failure.
//
// One source of truth: the page holds what the user asked for (photos and their ticks, the selected photo,
// the active prompts, strength, sliders, face choices, fusion mode) and sends all of it to every new
// session, so Stop / Start (or a dropped connection) changes nothing the user set. After each change it
// reads the session back (GET /sessions/{id}); the status line reports what the server applies, from that
// and from the stats' faces, never from what the page merely asked for.
import { LiveFuseConnection, RefusedError, UnreachableError } from "./connection.js";
import { formatEdits, sourceRefusalText, sourceWarningText } from "./words.js";

const $ = (id) => document.getElementById(id);
const store = (() => { try { return window.sessionStorage; } catch { return null; } })(); // this tab only
const state = {
  connected: false, session: null, stats: null, errors: [], messages: 0, sourceName: "demo",
  source: null, consent: false, understood: null, promptRefused: null, edits: {}, sourceError: null,
  colours: {},    // makeup shades the user picked, by coloured edit ("#rrggbb"); the prompt's words otherwise
  vocabulary: [], // the server's edits (GET /edits): one slider each
  sources: [],    // source ids this session holds (uploaded with consent)
  faces: [],      // the faces the server tracks now: {track_id, box, source_id}
  faceChoices: {}, // track id -> what the user picked ("" default, "keep", a source id)
  photos: [{ id: "demo", name: "Demo face", blob: null, consent: store?.getItem("livefuse.consent.demo") === "1", key: "demo" }],
  prompts: [],    // the active prompt phrases, in order; the session gets them joined with ", "
  strength: 100,  // identity strength, per cent
  shape: null,    // how far the face's proportions move toward the source's, per cent; null = the server's default
  enhance: null,  // face enhancer strength, per cent; null = the server's default
  // what goes behind the person: mode none / blur / color / image; a picture is uploaded to each session
  background: { mode: "none", strength: 70, color: "#00ff00", picture: null, imageId: null, imageSession: null },
  applied: null,  // the session's controls as the server reports them (GET /sessions/{id})
  syncs: 0,       // read-backs done in this session
  synced: false,  // everything the page holds was sent to this session and read back
  watch: null,    // {id, url}: this tab's watch link
  showStats: null,
};
window.livefuse = state; // read by the end-to-end test and handy in the console

let conn = null;
let uploadCount = 0;

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

function escapeHtml(t) { return String(t).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`); }

// ---- the watch link: one per tab (kept in sessionStorage), following the tab's sessions ------------------
async function loadWatchLink() {
  const kept = store?.getItem("livefuse.watch");
  if (kept) { showWatchLink(kept); return; }
  try {
    const resp = await fetch("/sessions/watch", { method: "POST" });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
    showWatchLink(body.watch);
  } catch (err) {
    $("share-status").textContent = `No watch link yet (${err.message}); it appears when you start the camera.`;
  }
}

function showWatchLink(id) {
  if (!id) return;
  store?.setItem("livefuse.watch", id);
  state.watch = { id, url: new URL(`/watch/${encodeURIComponent(id)}`, window.location.origin).href };
  $("watch-url").value = state.watch.url;
  $("copy-watch").disabled = false;
}

async function copyWatchLink() {
  if (!state.watch) return;
  let copied = false;
  try { await navigator.clipboard.writeText(state.watch.url); copied = true; } catch { /* below */ }
  if (!copied) { $("watch-url").select(); copied = document.execCommand && document.execCommand("copy"); }
  $("share-status").textContent = copied ? "Copied. Paste it into OBS (Browser source → URL) or a browser tab."
    : "Select the link above and copy it (Ctrl+C / ⌘C).";
}

// ---- start / stop ---------------------------------------------------------------------------------------
async function start() {
  clearMessages();
  $("start").disabled = true;
  setState("starting camera…", "busy");
  conn = new LiveFuseConnection({ watch: state.watch && state.watch.id });
  state.synced = false;
  state.syncs = 0;
  try {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) throw Object.assign(new Error("no mediaDevices"), { name: "SecurityError" });
    $("local").srcObject = await conn.openCamera();
    $("before").srcObject = $("local").srcObject;
    $("local-empty").hidden = true;
    setState("connecting…", "busy");
    conn.addEventListener("track", (e) => { $("remote").srcObject = e.detail; $("remote-empty").hidden = true; });
    conn.addEventListener("state", (e) => onConnectionState(e.detail));
    conn.addEventListener("stats", (e) => showStats(e.detail));
    conn.addEventListener("error", (e) => { state.errors.push(e.detail); if (e.detail.id === undefined) notice(`Server: ${e.detail.message}`, "info"); });
    conn.addEventListener("draining", (e) => { if (!e.detail.closing) notice("This server is shutting down; the stream goes on for now."); });
    conn.addEventListener("bye", (e) => { notice(`The server ended the session: ${e.detail.reason}`); stop(false); });
    conn.addEventListener("message", () => { state.messages += 1; });
    conn.addEventListener("prompt", (e) => showUnderstood(e.detail));
    conn.addEventListener("prompt_refused", (e) => showRefused(e.detail));
    conn.addEventListener("prompt_not_understood", (e) => showNotUnderstood(e.detail));
    conn.addEventListener("restream", (e) => showRestream(e.detail));
    conn.addEventListener("face_calibrating", () => { $("avatar-status").textContent = "Hold still: calibrating…"; });
    conn.addEventListener("face_calibrated", (e) => {   // kept for this browser: the next sessions start calibrated
      localStorage.setItem("livefuse.faceNeutral", JSON.stringify(e.detail.neutral));
      $("avatar-status").textContent = "Calibrated. Your avatar reads your face against this one (kept for next time).";
    });
    conn.addEventListener("output", (e) => {
      const o = e.detail;
      if (o.error || o.state === "denied") $("avatar-status").textContent = `${o.output}: ${o.state}${o.error ? ` (${o.error})` : ""}`;
      else if (o.output === "vtube_studio" && o.state === "live") $("avatar-status").textContent = "VTube Studio: connected.";
    });
    const body = await conn.connect();
    state.session = body.session;
    if (body.watch) showWatchLink(body.watch);
    $("stages-line").textContent = body.stages.length ? `Pipeline: ${body.stages.join(" → ")}` : "Pipeline: pass-through (no face stages installed yet)";
    $("fusion-box").hidden = !body.stages.includes("swap");   // the switch only where a swap model is loaded
    $("enhance-box").hidden = !body.stages.includes("enhance");   // the slider only where an enhancer is loaded
    $("shape-box").hidden = !body.stages.includes("fusion");      // shape is the geometric fusion stage's
    $("avatar-box").hidden = !body.stages.includes("face_out");   // calibration only where the face rig runs
    $("restream-box").hidden = false;
    $("stop").disabled = false;
    await syncAll();
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
  state.sources = [];          // a new session starts with none; the page sends its photos again
  state.applied = null;
  state.synced = false;
  state.stats = null;
  showFaces([]);
  showSourceStatus();
  showNow();
  $("start").disabled = false;
  $("stop").disabled = true;
  $("stats").hidden = true;
  $("local").srcObject = null;
  $("before").srcObject = null;
  $("remote").srcObject = null;
  $("local-empty").hidden = false;
  $("remote-empty").hidden = false;
  if (clearNotice) { clearMessages(); setState("not connected", "idle"); }
}

// what belonged to the last session: its notices and the replies to its prompt
function clearMessages() {
  notice("");
  state.understood = null;
  state.promptRefused = null;
  state.sourceError = null;
  $("prompt-status").textContent = "";
  $("prompt-status").className = "small";
  $("prompt-understood").hidden = true;
}

function onConnectionState(s) {
  if (s === "connected") { state.connected = true; setState("live", "live"); }
  else if (s === "failed") { notice("The connection to the server failed (network or firewall)."); stop(false); setState("disconnected", "error"); }
  else if (s === "disconnected") setState("reconnecting…", "busy");
}

// Everything the page holds, to a new session: consented photos, the selected one, strength, sliders, face
// choices and fusion mode in one set_params, the prompts; then the session is read back and compared.
async function syncAll() {
  const c = conn;
  await c.opened;
  if (c !== conn) return;
  for (const photo of state.photos.filter((p) => p.consent)) {
    await uploadPhoto(photo);
    if (c !== conn) return;
  }
  await c.call({ type: "set_params", ...wantedParams() });
  await restoreNeutral(c);
  await applyBackground();
  if (state.prompts.length) await sendPrompts(state.prompts, "resend");
  if (c !== conn) return;
  let diff = differences(await readBack());
  if (diff.length && c === conn) {         // once more, then the page shows what the server holds
    await c.call({ type: "set_params", ...wantedParams() });
    if (diff.includes("prompt")) await sendPrompts(state.prompts, "resend");
    diff = differences(await readBack());
  }
  if (c !== conn) return;
  if (diff.length) notice(`The server did not take: ${diff.join(", ")}. The controls show what it applies.`, "info");
  state.synced = true;
  showSourceStatus();
  showNow();
}

function selectedPhoto() { return state.photos.find((p) => p.id === state.sourceName) || state.photos[0]; }

function wantedParams() {
  const photo = selectedPhoto();
  const faceSources = {};
  for (const [track, choice] of Object.entries(state.faceChoices)) {
    if (choice && (choice === "keep" || state.sources.includes(choice))) faceSources[track] = choice;
  }
  const params = {
    strength: state.strength / 100, edits: { ...state.edits }, face_sources: faceSources, colours: { ...state.colours },
    source_id: photo.consent && state.sources.includes(photo.id) ? photo.id : null,
  };
  if (!$("fusion-box").hidden) params.fusion = $("fusion").value || null;
  if (!$("enhance-box").hidden && state.enhance !== null) params.enhance = state.enhance / 100;
  if (!$("shape-box").hidden && state.shape !== null) params.shape = state.shape / 100;
  return params;
}

function differences(info) {
  if (!info) return ["(the session could not be read back)"];
  const c = info.controls, want = wantedParams(), out = [];
  if (Math.abs(c.strength - want.strength) > 1e-6) out.push("identity strength");
  if ((c.source_id || null) !== want.source_id) out.push("source face");
  if (c.prompt !== state.prompts.join(", ")) out.push("prompt");
  const names = new Set([...Object.keys(want.edits), ...Object.keys(c.edits)]);
  if ([...names].some((n) => Math.abs((c.edits[n] || 0) - (want.edits[n] || 0)) > 1e-6)) out.push("edit sliders");
  if (Object.entries(want.colours).some(([n, hex]) => (c.colours || {})[n] !== hex)) out.push("makeup colours");
  if (JSON.stringify(sorted(c.face_sources || {})) !== JSON.stringify(sorted(want.face_sources))) out.push("face choices");
  return out;
}

function sorted(obj) { return Object.fromEntries(Object.entries(obj).sort()); }

// The session as the server holds it; the controls are set from it where they differ.
async function readBack() {
  const c = conn;
  if (!c || !c.session) return null;
  let info;
  try { info = await c.info(); } catch { return null; }
  if (c !== conn) return null;
  state.applied = info.controls;
  state.sources = info.sources;
  followBackground(info.controls.background);
  state.syncs += 1;
  showSourceStatus();
  showNow();
  return info;
}

let readBackTimer = null;
function readBackSoon() {
  clearTimeout(readBackTimer);
  readBackTimer = setTimeout(readBack, 250);
}

// ---- stats -------------------------------------------------------------------------------------------------
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
  showStatsPanel();
  $("s-fps").textContent = `${s.fps_in.toFixed(0)} / ${s.fps_out.toFixed(0)}`;
  $("s-delay").textContent = `≥ ${total.toFixed(0)} ms`;
  $("s-delay").parentElement.title = `lower bound: server ${server.toFixed(1)} ms + server receive buffer ${serverBuffer.toFixed(1)} ms` +
    ` + network ${(c.rttMs ?? 0).toFixed(1)} ms + browser jitter buffer ${(c.jitterMs ?? 0).toFixed(1)} ms`;
  const share = s.frames_in > 0 ? ` (${((100 * s.dropped) / s.frames_in).toFixed(0)} %)` : "";
  $("s-drops").textContent = `${s.dropped}${share}`;
  $("s-stages").innerHTML = Object.entries(s.stages_ms)
    .map(([name, ms]) => `<div><span>${escapeHtml(name)}</span><b>${ms.toFixed(1)} ms</b></div>`).join("");
  showFaces(s.faces || [], s.size);
  showSourceStatus();
  showNow();
}

function showStatsPanel() {
  if (state.showStats === null) {
    const kept = store?.getItem("livefuse.stats");
    state.showStats = kept !== null && kept !== undefined ? kept === "1" : !window.matchMedia("(max-width: 700px)").matches;
  }
  $("stats").hidden = !state.showStats || !state.stats;
  $("stats-toggle").textContent = state.showStats ? "Hide stats" : "Show stats";
  $("stats-toggle").setAttribute("aria-pressed", String(state.showStats));
}

function toggleStats() {
  state.showStats = !state.showStats;
  store?.setItem("livefuse.stats", state.showStats ? "1" : "0");
  showStatsPanel();
}

// ---- what the server applies now: fusion and edits, each on or off with the reason ------------------------
function photoName(id) {
  const photo = state.photos.find((p) => p.id === id);
  return photo ? photo.name : id;
}

function fusionNow() {
  const photo = selectedPhoto();
  const faces = state.faces;
  const applied = state.applied;
  if (!conn || !conn.session) return { on: false, text: "Fusion: off (camera not started)" };
  if (!applied) return { on: false, text: "Fusion: starting…" };
  const fused = faces.filter((f) => f.source_id);
  if (fused.length) {
    const names = [...new Set(fused.map((f) => photoName(f.source_id)))].join(", ");
    const into = fused.length === faces.length ? (faces.length === 1 ? "the face in view" : `all ${faces.length} faces in view`)
      : `${fused.length} of ${faces.length} faces in view`;
    return { on: true, text: `Fusion: on (${names} → ${fused.length} of ${faces.length} face${faces.length > 1 ? "s" : ""})`,
      sentence: `Fusing ${names} into ${into}.` };
  }
  if (applied.strength <= 0) return { on: false, text: "Fusion: off (identity strength 0 %)", reason: "Identity strength is at 0 %" };
  if (!applied.enabled) return { on: false, text: "Fusion: off (turned off)" };
  const kept = faces.filter((f) => (applied.face_sources || {})[String(f.track_id)] === "keep");
  if (faces.length && kept.length === faces.length) {
    const which = kept.map((f) => `face ${f.track_id}`).join(", ");
    return { on: false, text: `Fusion: off (${which}: leave unchanged)`, reason: `${which} ${kept.length > 1 ? "are" : "is"} set to “leave unchanged”` };
  }
  if (!applied.source_id && !Object.keys(applied.face_sources || {}).length) {
    return { on: false, text: "Fusion: off (no source face)", reason: photo.consent ? null : `tick “I have the right to use this face” to use ${photo.name}` };
  }
  if (!faces.length) return { on: false, text: "Fusion: waiting for a face in view" };
  return { on: false, text: "Fusion: starting…" };
}

function editsNow() {
  const applied = state.applied;
  if (!conn || !conn.session) return { on: false, text: "Edits: off (camera not started)" };
  if (!applied) return { on: false, text: "Edits: starting…" };
  const sliders = Object.entries(applied.edits || {}).filter(([, v]) => Math.abs(v) > 1e-6);
  const parts = [];
  if (applied.prompt) parts.push(`prompt “${applied.prompt}”`);
  if (sliders.length) parts.push(`${sliders.length} slider${sliders.length > 1 ? "s" : ""}`);
  if (!parts.length) return { on: false, text: "Edits: off (no prompt, sliders at centre)" };
  if (!state.faces.length) return { on: false, text: `Edits: waiting for a face in view (${parts.join(" + ")})` };
  return { on: true, text: `Edits: on (${parts.join(" + ")})` };
}

function showNow() {
  for (const [id, now] of [["now-fusion", fusionNow()], ["now-edits", editsNow()]]) {
    const chip = $(id);
    chip.textContent = now.text;
    chip.className = `chip ${now.on ? "on" : "off"}`;
  }
}

// One line under the picker that always says whether faces are being fused, and if not, why.
function showSourceStatus(text, kind = "") {
  const line = $("source-status");
  const photo = selectedPhoto();
  if (text === undefined) {
    const now = fusionNow();
    if (state.sourceError) { text = state.sourceError.text; kind = "bad"; }
    else if (!photo.consent) { text = `No face fusion: tick “I have the right to use this face” to use ${photo.name}. Nothing is uploaded until you do.`; kind = "warn"; }
    else if (!conn || !conn.session) { text = `Ready: ${photo.name} is used when you start the camera.`; }
    else if (!state.sources.includes(photo.id)) { text = `Sending ${photo.name}…`; }
    else if (now.on) { text = now.sentence + sourceWarningText(state.source && state.source.warnings); kind = "ok"; }
    else if (now.reason) { text = `No face fusion: ${now.reason}.`; kind = "warn"; }
    else if (!state.faces.length) { text = `Ready: ${photo.name} is fused as soon as a face is in view.`; }
    else { text = `Starting fusion of ${photo.name}…`; }
  }
  line.textContent = text;
  line.className = `small status ${kind}`;
  $("consent-for").textContent = state.photos.length > 1 ? `(${photo.name})` : "";
}

// ---- faces in view: a thumbnail per tracked face (cut from the local preview by the server's box) ----
function faceOptions(selected) {
  const uploaded = state.photos.filter((p) => state.sources.includes(p.id));
  const opts = [["", `the selected face (${selectedPhoto().name})`], ["keep", "leave unchanged"], ...uploaded.map((p) => [p.id, p.name])];
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
      card.innerHTML = `<canvas width="64" height="64"></canvas><span class="small">face ${key}</span><select aria-label="face ${key} becomes"></select>`;
      card.querySelector("select").addEventListener("change", (e) => chooseFace(f.track_id, e.target.value, card));
      box.appendChild(card);
    }
    const select = card.querySelector("select");
    const want = faceOptions(state.faceChoices[key] ?? "");
    if (select._options !== want) { select.innerHTML = want; select._options = want; }
    card.title = f.source_id ? `fused with ${photoName(f.source_id)}` : "unchanged";
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

async function chooseFace(trackId, value, card) {
  if (!conn) return;
  const reply = await conn.call({ type: "map_face", track_id: trackId, source_id: value === "" ? null : value });
  if (reply && reply.type === "ack") { state.faceChoices[String(trackId)] = value; card.classList.remove("refused"); }
  else { card.classList.add("refused"); notice(`Face ${trackId}: ${reply ? reply.message : "no answer from the server"}`); }
  readBackSoon();
}

// ---- source photos: each with its own tick, remembered for this tab ------------------------------------------
function photoKey(file) { return `${file.name}:${file.size}:${file.lastModified}`; }

function rememberConsent(photo) {
  if (photo.consent) store?.setItem(`livefuse.consent.${photo.key}`, "1");
  else store?.removeItem(`livefuse.consent.${photo.key}`);
}

function tileOf(photo) { return document.querySelector(`.source[data-id="${photo.id}"]`); }

function showTiles() {
  for (const photo of state.photos) {
    const tile = tileOf(photo);
    if (!tile) continue;
    tile.classList.toggle("selected", photo.id === state.sourceName);
    tile.querySelector(".badge").textContent = photo.checking ? "checking…" : photo.consent ? "" : "not ticked";
  }
}

async function photoBlob(photo) {
  if (!photo.blob && photo.id === "demo") photo.blob = await (await fetch("/assets/demo_source.jpg")).blob();
  return photo.blob;
}

// Upload one ticked photo to this session; a photo the server refuses is taken off the picker (its tile
// goes, the previous photo is selected again) and the reason is shown. True when the session holds it.
async function uploadPhoto(photo) {
  const c = conn;
  if (!c || !c.session || !photo.consent) return false;
  photo.checking = true;
  showTiles();
  try {
    const reply = await c.uploadSource(await photoBlob(photo), photo.id, { consent: true });
    if (c !== conn) return false;
    if (!state.sources.includes(reply.source_id)) state.sources.push(reply.source_id);
    if (photo.id === state.sourceName) state.source = reply;
    return true;
  } catch (err) {
    if (c !== conn) return false;
    const refusedPhoto = err instanceof RefusedError && err.status === 422 && photo.id !== "demo";
    state.sourceError = { status: err.status, code: err.code, message: err.message, photo: photo.id,
      text: refusedPhoto ? `${explain(err)} “${photo.name}” was not added.` : `No face fusion: ${explain(err)}` };
    if (refusedPhoto) dropPhoto(photo);
    else if (photo.id === state.sourceName) state.source = null;
    return false;
  } finally {
    photo.checking = false;
    showTiles();
    showSourceStatus();
  }
}

function dropPhoto(photo) {
  state.photos = state.photos.filter((p) => p !== photo);
  const tile = tileOf(photo);
  if (tile) { URL.revokeObjectURL(tile.querySelector("img").src); tile.remove(); }
  if (state.sourceName === photo.id) {
    const previous = state.photos.find((p) => p.id === state.previousSource) || state.photos[0];
    selectPhoto(previous, { keepError: true });
  }
}

// The selected photo becomes the session's source when it is ticked and held; otherwise fusion stops.
async function selectPhoto(photo, { keepError = false } = {}) {
  if (state.sourceName !== photo.id) state.previousSource = state.sourceName;
  state.sourceName = photo.id;
  state.consent = photo.consent;
  $("consent").checked = photo.consent;
  if (!keepError) state.sourceError = null;
  showTiles();
  showSourceStatus();
  await applySource();
}

async function applySource() {
  const photo = selectedPhoto();
  if (!conn || !conn.session) return;
  if (photo.consent && !state.sources.includes(photo.id)) {
    if (!(await uploadPhoto(photo))) { await conn.call({ type: "set_params", source_id: wantedParams().source_id }); readBackSoon(); return; }
  }
  state.source = photo.consent ? state.source : null;
  await conn.call({ type: "set_params", source_id: wantedParams().source_id });
  readBackSoon();
}

function addUploadedPhoto(file) {
  uploadCount += 1;
  const photo = { id: `upload${uploadCount}`, name: file.name, blob: file, key: photoKey(file) };
  photo.consent = store?.getItem(`livefuse.consent.${photo.key}`) === "1";
  state.photos.push(photo);
  const label = document.createElement("label");
  label.className = "source";
  label.dataset.id = photo.id;
  label.innerHTML = `<img alt="uploaded face"><span class="name"></span><em class="badge"></em>`;
  label.querySelector("img").src = URL.createObjectURL(file);
  label.querySelector(".name").textContent = file.name;
  label.title = file.name;
  $("sources").appendChild(label);
  return photo;
}

// ---- prompts: "Add to the look" keeps what is active, "Replace" starts over; the list says what is active ----
// ---- prompt: what the server understood, or why it refused ----------------------------------------
function showUnderstood(ev) {
  if (!ev.text) { $("prompt-understood").hidden = true; return; } // no prompt: nothing to explain
  state.understood = ev;
  state.promptRefused = null;
  const box = $("prompt-understood");
  box.hidden = false;
  box.classList.remove("refused");
  $("understood-line").textContent = `Understood as: ${formatEdits(ev.understood, state.vocabulary)}`;
  showPromptColours(ev.colours || {});
  markPromptEdits(ev.understood || {});
  const notes = [];
  if (ev.translated) notes.push(`read as “${ev.translated}”`);
  if (ev.unknown) notes.push(`not understood: “${ev.unknown}”`);
  if (ev.ignored && ev.ignored.length) notes.push(`not a face edit, left out: ${ev.ignored.map((c) => `“${c}”`).join(", ")}`);
  if (ev.truncated) notes.push(ev.message || "the prompt was cut to the encoder's limit");
  if (typeof ev.encode_ms === "number") notes.push(ev.cached ? "from cache" : `encoded in ${ev.encode_ms.toFixed(0)} ms`);
  $("understood-notes").textContent = notes.join(" · ");
}

// The shades the prompt named, as swatches after the understood line ("Lipstick: coral ■").
function showPromptColours(colours) {
  const box = $("understood-colours");
  box.replaceChildren();
  const labels = Object.fromEntries(state.vocabulary.map((spec) => [spec.name, spec.label]));
  for (const [name, { colour, hex }] of Object.entries(colours)) {
    const item = document.createElement("span");
    item.className = "swatch-item";
    item.dataset.edit = name;
    item.innerHTML = `<span class="swatch"></span><span></span>`;
    item.firstChild.style.background = hex;
    item.lastChild.textContent = `${labels[name] || name}: ${colour}`;
    box.appendChild(item);
  }
  box.hidden = !box.childElementCount;
  // a shade input the user has not picked shows what is painted: the prompt's shade, else the default
  document.querySelectorAll("#edit-sliders input[type=color]").forEach((input) => {
    const name = input.dataset.colourOf;
    if (!(name in state.colours)) input.value = colours[name] ? colours[name].hex : input.dataset.default;
  });
}

// Where the prompt puts each edit, as a mark on its slider's track: the slider adds to that.
function markPromptEdits(understood) {
  for (const spec of state.vocabulary) {
    const row = document.querySelector(`#edit-${spec.name}`)?.closest(".edit");
    if (!row) continue;
    const v = understood[spec.name] || 0;
    row.dataset.prompt = v ? v.toFixed(2) : "";
    row.style.setProperty("--prompt-at", `${((v - spec.low) / (spec.high - spec.low)) * 100}%`);
    row.classList.toggle("prompted", Math.abs(v) >= 0.005);
    row.title = row.title.replace(/ · the prompt sets .*$/, "") + (v ? ` · the prompt sets ${formatValue(v)}` : "");
  }
}

// A refusal says what LiveFuse doesn't make and which part of the prompt read that way, never that the
// user did something wrong; the previous look stays.
const DECIDED_BY = { term: "a word on the policy list", pattern: "a phrase on the policy list", classifier: "the safety classifier", length: "its length" };
function showRefused(r) {
  r = r || {};
  state.promptRefused = r.reason || "LiveFuse can't apply this prompt.";
  const part = r.clause ? ` (the part “${r.clause}”${r.method ? `, read by ${DECIDED_BY[r.method] || r.method}` : ""})` : "";
  $("prompt-status").textContent = `Not applied${part}: ${state.promptRefused} The previous look stays.`;
  $("prompt-status").className = "small bad";
}

// Nothing in the prompt asks for a face edit (gibberish, a question): the server applies nothing.
function showNotUnderstood(r) {
  $("prompt-status").textContent = `${(r && r.reason) || "Not understood: nothing was applied."} The previous look stays.`;
  $("prompt-status").className = "small bad";
}


function renderPrompts() {
  const list = $("active-prompts");
  list.innerHTML = "";
  state.prompts.forEach((text, i) => {
    const li = document.createElement("li");
    li.innerHTML = `<span></span><button type="button" class="remove" aria-label="remove">×</button>`;
    li.querySelector("span").textContent = text;
    li.querySelector("button").setAttribute("aria-label", `remove “${text}”`);
    li.querySelector("button").addEventListener("click", () => changePrompts(state.prompts.filter((_, j) => j !== i), "remove", text));
    list.appendChild(li);
  });
  $("no-prompts").hidden = state.prompts.length > 0;
}

// Send `list` (joined) as the session's prompt; the page's list changes only when the server takes it.
async function sendPrompts(list, how) {
  const text = list.join(", ");
  const reply = await conn.call({ type: "set_prompt", text });
  const result = (reply && reply.result) || {};
  if (!reply) { $("prompt-status").textContent = "Not applied: no answer from the server."; return false; }
  if (reply.type === "ack" && result.allowed === false) { showRefused(result); return false; }
  if (reply.type === "ack" && result.understood === false) { showNotUnderstood(result); return false; }
  if (reply.type !== "ack") { $("prompt-status").textContent = `Not applied: ${reply.message}`; $("prompt-status").className = "small bad"; return false; }
  state.prompts = list;
  renderPrompts();
  if (how !== "resend") {
    $("prompt-status").className = "small";
    $("prompt-status").textContent = list.length ? `Applied: ${how}; the look is now “${text}”.` : "Applied: prompt cleared.";
  }
  if (!text) $("prompt-understood").hidden = true;
  readBackSoon();
  return true;
}

async function changePrompts(list, how, phrase) {
  const words = { add: `“${phrase}” added`, replace: `“${phrase}” replaces what was there`, remove: `“${phrase}” removed` }[how];
  if (!conn || !conn.session) {   // kept, and sent when the camera starts
    state.prompts = list;
    renderPrompts();
    $("prompt-status").className = "small";
    $("prompt-status").textContent = `Kept: ${words}; applied when you start the camera.`;
    return true;
  }
  $("prompt-status").textContent = "sending…";
  $("prompt-status").className = "small";
  return sendPrompts(list, words);
}

async function submitPrompt(how) {
  const text = $("prompt").value.trim();
  if (!text && how === "add") { $("prompt-status").textContent = "Type what to add first."; return; }
  const list = how === "replace" ? (text ? [text] : []) : [...state.prompts, text];
  if (await changePrompts(list, how, text)) $("prompt").value = "";
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
  for (const { name, label, minus, plus, help, low, high, colour_hex: hex } of state.vocabulary) {
    state.edits[name] = 0;
    const row = document.createElement("label");
    row.className = "edit";
    row.innerHTML = `<span class="edit-name"></span><span class="track"><input type="range" step="5" value="0"></span><output>0</output>`;
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
    if (hex) box.appendChild(colourPicker(name, label, hex));
  }
}

// A makeup edit's shade: the colour input starts at the edit's default; a pick is sent at once and wins over
// a colour word in the prompt until "Reset all" gives the prompt's (or the default) shade back.
function colourPicker(name, label, hex) {
  const row = document.createElement("label");
  row.className = "edit-colour";
  row.innerHTML = `<span class="small"></span><input type="color">`;
  row.firstChild.textContent = `${label} colour`;
  const input = row.querySelector("input");
  input.value = hex;
  input.dataset.default = hex;
  input.dataset.colourOf = name;
  input.id = `colour-${name}`;
  input.addEventListener("change", async () => {
    state.colours[name] = input.value;
    if (conn) { await conn.call({ type: "set_params", colours: { [name]: input.value } }); readBackSoon(); }
  });
  return row;
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

async function sendEdits() {
  if (!conn) return;
  await conn.call({ type: "set_params", edits: { ...state.edits } });
  readBackSoon();
}

function resetEdits() {
  document.querySelectorAll("#edit-sliders input[type=range]").forEach((input) => {
    input.value = 0;
    state.edits[input.dataset.edit] = 0;
    input.closest(".edit").querySelector("output").textContent = "0";
  });
  const picked = Object.keys(state.colours);
  state.colours = {};
  showPromptColours((state.understood && state.understood.colours) || {});   // the prompt's shades, else the defaults
  if (picked.length && conn) conn.call({ type: "set_params", colours: Object.fromEntries(picked.map((n) => [n, null])) });
  editsChanged(true);
}

// ---- before / after: the camera over the output, cut at a divider the user drags ---------------------------
function showCompare(on) {
  $("compare-box").hidden = !on;
  $("before").hidden = !on;
  $("compare").setAttribute("aria-pressed", String(on));
  $("compare").textContent = on ? "Hide before / after" : "Before / after";
  setDivider();
}

function setDivider() {
  const at = Number($("divider").value);
  // the camera (before) covers the output's left part, up to the divider
  $("before").style.clipPath = `inset(0 ${100 - at}% 0 0)`;
  $("output-figure").style.setProperty("--divider", `${at}%`);
}

// ---- wiring -------------------------------------------------------------------------------------------------
loadEdits();
loadWatchLink();
renderPrompts();
showTiles();
$("consent").checked = state.photos[0].consent;
state.consent = state.photos[0].consent;
showSourceStatus();
showNow();
showStatsPanel();
$("edits-reset").addEventListener("click", resetEdits);
$("compare").addEventListener("click", () => showCompare($("compare-box").hidden));
$("divider").addEventListener("input", setDivider);
$("copy-watch").addEventListener("click", copyWatchLink);
$("watch-url").addEventListener("focus", (e) => e.target.select());
$("stats-toggle").addEventListener("click", toggleStats);
$("consent").addEventListener("change", async (e) => {
  const photo = selectedPhoto();
  photo.consent = e.target.checked;
  state.consent = photo.consent;
  state.sourceError = null;
  rememberConsent(photo);
  showTiles();
  await applySource();
  showSourceStatus();
});
$("start").addEventListener("click", start);
$("stop").addEventListener("click", () => stop());
$("sources").addEventListener("click", async (e) => {
  const label = e.target.closest(".source");
  if (!label) return;
  const photo = state.photos.find((p) => p.id === label.dataset.id);
  if (photo) await selectPhoto(photo);
});
$("upload").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  e.target.value = "";   // the same file can be picked again
  if (!file) return;
  await selectPhoto(addUploadedPhoto(file));
});
$("prompt-form").addEventListener("submit", (e) => { e.preventDefault(); submitPrompt("add"); });
$("prompt-replace").addEventListener("click", () => submitPrompt("replace"));
// a percent slider that sends its share as one set_params field, 80 ms after the last move
function percentSlider(name) {
  let timer = null;
  $(name).addEventListener("input", (e) => {
    state[name] = Number(e.target.value);
    $(`${name}-value`).textContent = `${e.target.value}%`;
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (!conn) return;
      await conn.call({ type: "set_params", [name]: state[name] / 100 });
      readBackSoon();
    }, 80);
  });
}
percentSlider("strength");
percentSlider("shape");
percentSlider("enhance");
// ---- the background: off, blur (with its strength), a colour, a picture -----------------------------------
function backgroundParams() {
  const bg = state.background;
  if (bg.mode === "blur") return { mode: "blur", strength: bg.strength / 100 };
  if (bg.mode === "color") return { mode: "color", color: bg.color };
  if (bg.mode === "image" && bg.imageId && conn && bg.imageSession === conn.session) return { mode: "image", image_id: bg.imageId };
  return null;
}

function backgroundWords() {
  const bg = state.background;
  if (bg.mode === "blur") return `Background blurred (${bg.strength} %); you stay sharp.`;
  if (bg.mode === "color") return `Background filled with ${bg.color}: key it out in OBS with a Chroma Key filter.`;
  if (bg.mode === "image") return "Your picture is behind you.";
  return "";
}

// The background the server applies (a prompt's words may have set it), shown by the control.
function followBackground(bg) {
  if (!bg) return;
  const mine = state.background;
  if (bg.mode === "blur") mine.strength = Math.round(bg.strength * 100);
  if (bg.mode === "color") mine.color = bg.color;
  if (bg.mode === "image") { mine.imageId = bg.image_id; mine.imageSession = conn && conn.session; }
  if (bg.mode !== mine.mode) { mine.mode = bg.mode; $("background-status").textContent = backgroundWords(); }
  $("background-strength").value = mine.strength;
  $("background-color").value = mine.color;
  showBackgroundControls();
}

function showBackgroundControls() {
  const mode = state.background.mode;
  $("background").value = mode;
  $("background-strength").hidden = mode !== "blur";
  $("background-color").hidden = mode !== "color";
  $("background-upload-label").hidden = mode !== "image";
}

// Sent with every session and on each change; a picture is uploaded to the session (its id is the session's).
async function applyBackground() {
  const c = conn, bg = state.background, status = $("background-status");
  showBackgroundControls();
  if (!c || !c.session) { status.textContent = backgroundWords(); return; }
  if (bg.mode === "image" && bg.imageSession !== c.session) {
    if (!bg.picture) { status.textContent = "Pick a picture to put behind you."; return; }
    status.textContent = "Uploading the picture…";
    try {
      const got = await c.uploadBackground(bg.picture);
      bg.imageId = got.image_id;
      bg.imageSession = c.session;
    } catch (err) {
      bg.picture = null;
      status.textContent = err instanceof RefusedError && err.status === 422 ? `That picture can't be used: ${err.message}`
        : explain(err);
      return;
    }
  }
  const reply = await c.call({ type: "set_params", background: backgroundParams() });
  status.textContent = reply && reply.type === "error" ? `Background not changed: ${reply.message}` : backgroundWords();
  readBackSoon();
}

$("background").addEventListener("change", async (e) => {
  state.background.mode = e.target.value;
  await applyBackground();
});
let backgroundTimer = null;
$("background-strength").addEventListener("input", (e) => {
  state.background.strength = Number(e.target.value);
  clearTimeout(backgroundTimer);
  backgroundTimer = setTimeout(applyBackground, 80);
});
$("background-color").addEventListener("input", (e) => {
  state.background.color = e.target.value;
  clearTimeout(backgroundTimer);
  backgroundTimer = setTimeout(applyBackground, 80);
});
$("background-upload").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  e.target.value = "";
  if (!file) return;
  Object.assign(state.background, { mode: "image", picture: file, imageId: null, imageSession: null });
  await applyBackground();
});

// The face rig's neutral face, calibrated in an earlier session of this browser, sent to the new one.
async function restoreNeutral(c) {
  const kept = localStorage.getItem("livefuse.faceNeutral");
  if (!kept || $("avatar-box").hidden) return;
  try {
    const reply = await c.call({ type: "set_params", face_neutral: JSON.parse(kept) });
    if (reply.type === "error") localStorage.removeItem("livefuse.faceNeutral");   // from another version: calibrate again
  } catch (err) { localStorage.removeItem("livefuse.faceNeutral"); }
}

// Restream: the address goes to the server once (set_params.outputs.restream); the page shows the server's
// own account of it, whose address hides the key.
function showRestream(r) {
  const words = { live: "live", reconnecting: "reconnecting…", stopped: "stopped", off: "off", error: "refused" };
  $("restream-status").textContent = `Restream ${r.url || ""}: ${words[r.state] || r.state}${r.error ? ` (${r.error})` : ""}`;
  $("restream-stop").disabled = !["live", "reconnecting", "connecting"].includes(r.state);
}

async function setRestream(urls) {
  if (!conn) return;
  const reply = await conn.call({ type: "set_params", outputs: { restream: urls } });
  if (reply.type === "error") $("restream-status").textContent = `Restream refused: ${reply.message}`;
  else if (urls.length) $("restream-status").textContent = "Restream: connecting…";
}

$("restream-go").addEventListener("click", () => {
  const url = $("restream-url").value.trim();
  if (!/^(rtmps?|https?):\/\/\S+$/.test(url)) { $("restream-status").textContent = "The address starts with rtmp://, rtmps:// or (WHIP) https://"; return; }
  setRestream([url]);
});
$("restream-stop").addEventListener("click", () => setRestream([]));

$("calibrate").addEventListener("click", async () => {
  if (!conn) return;
  const reply = await conn.call({ type: "set_params", calibrate: true });
  if (reply.type === "error") $("avatar-status").textContent = `Calibration refused: ${reply.message}`;
});

$("fusion").addEventListener("change", async (e) => {
  if (!conn) return;
  await conn.call({ type: "set_params", fusion: e.target.value || null });
  readBackSoon();
});
