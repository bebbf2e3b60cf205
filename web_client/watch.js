// The watch page (GET /watch/NAME): a stream's output over WHEP, full-window, no controls, for OBS's
// browser source and for viewers. NAME is either
//   a watch link (w-…, from the LiveFuse page's share panel): it follows the tab's sessions, so the page
//     keeps playing across Stop / Start; it long-polls the link's state (GET /sessions/watch/w-…) and
//     says "waiting for the stream" before the first Start and "this stream has ended" after Stop;
//   a session id: that one session, until it ends.
// Everything else it needs is in the URL fragment, which browsers never send to a server, so no token
// reaches a request line or a log:
//   #token=TOKEN                              a server that requires tokens (the session owner's token)
//   ...#server=https://host:port&session=NAME  the same page hosted on another origin (the server lists it
//                                             with --allow-origin)
//   ...&audio=1                               play the sender's audio too (OBS captures it; browsers may
//                                             refuse unmuted autoplay)
// A failure (no such link or session, server full or unreachable) is said on the page and retried after
// 1, 2, 4 … up to 30 s.
import { waitForGathering } from "./connection.js";

const FIRST_RETRY_MS = 1000;
const MAX_RETRY_MS = 30000;

export function watchSettings(location) {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  const fromPath = location.pathname.match(/^\/watch\/([^/]+)$/);
  return {
    server: (fragment.get("server") || location.origin).replace(/\/+$/, ""),
    session: fragment.get("session") || (fromPath ? decodeURIComponent(fromPath[1]) : ""),
    token: fragment.get("token") || "",
    audio: fragment.get("audio") === "1",
  };
}

export const isWatchLink = (name) => /^w-[A-Za-z0-9_-]{16}$/.test(name);

// One WHEP viewer: POST the offer, play the answer, DELETE the resource when the page goes.
export async function watch(video, { server, session, token }, report = () => {}) {
  const pc = new RTCPeerConnection({ iceServers: [] });
  pc.addTransceiver("video", { direction: "recvonly" });
  pc.addTransceiver("audio", { direction: "recvonly" });
  const stream = new MediaStream();
  pc.ontrack = (e) => { stream.addTrack(e.track); video.srcObject = stream; };
  await pc.setLocalDescription(await pc.createOffer());
  await waitForGathering(pc); // the server (aiortc) takes no trickled candidates
  const headers = { "Content-Type": "application/sdp" };
  if (token) headers.Authorization = `Bearer ${token}`;
  let resp;
  try {
    resp = await fetch(`${server}/whep/${encodeURIComponent(session)}`, {
      method: "POST", headers, body: pc.localDescription.sdp, referrerPolicy: "no-referrer",
    });
  } catch (err) {
    pc.close();
    throw Object.assign(new Error(`server unreachable: ${err.message}`), { status: 0 });
  }
  if (resp.status !== 201) {
    pc.close();
    const body = await resp.json().catch(() => ({}));
    throw Object.assign(new Error(body.error || resp.statusText), { status: resp.status });
  }
  const location = new URL(resp.headers.get("Location") || "", server).href;
  await pc.setRemoteDescription({ type: "answer", sdp: await resp.text() });
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    pc.close();
    video.srcObject = null;
    fetch(location, { method: "DELETE", headers: token ? { Authorization: `Bearer ${token}` } : {}, keepalive: true })
      .catch(() => {});
  };
  // resolves when the connection is gone (the session ended, the network dropped)
  const ended = new Promise((resolve) => {
    pc.addEventListener("connectionstatechange", () => {
      report({ state: pc.connectionState });
      if (["failed", "closed", "disconnected"].includes(pc.connectionState)) resolve();
    });
  });
  window.addEventListener("pagehide", stop, { once: true });
  report({ state: "connecting", location });
  return { pc, stop, ended };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function say(state, text, detail = "") {
  const box = document.getElementById("message");
  state.message = text;
  box.hidden = !text;
  box.innerHTML = "";
  if (!text) return;
  box.append(text);
  if (detail) { const small = document.createElement("small"); small.textContent = detail; box.append(small); }
}

function failureWords(err, what) {
  if (err.status === 404) return [`No stream at this ${what}.`, "It has ended, or the link is wrong: copy it again from the LiveFuse page."];
  if (err.status === 401 || err.status === 403) return ["This link needs the stream owner's token.", "Add #token=… to the address (docs/obs.md)."];
  if (err.status === 503 || err.status === 429) return ["The LiveFuse server is busy.", "Trying again shortly."];
  if (err.status === 0) return ["Can't reach the LiveFuse server.", "Is it running? Trying again shortly."];
  return [`The stream can't be shown (${err.message}).`, ""];
}

// The link's state: {state: waiting|live|ended, session, tag}; with `seen` the server answers when it changes.
async function linkState(settings, seen, signal) {
  const headers = settings.token ? { Authorization: `Bearer ${settings.token}` } : {};
  const query = seen ? `?seen=${encodeURIComponent(seen)}` : "";
  let resp;
  try {
    resp = await fetch(`${settings.server}/sessions/watch/${encodeURIComponent(settings.session)}${query}`,
      { headers, cache: "no-store", referrerPolicy: "no-referrer", signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw Object.assign(new Error(`server unreachable: ${err.message}`), { status: 0 });
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw Object.assign(new Error(body.error || resp.statusText), { status: resp.status });
  return body;
}

// A watch link: follow its state; play whatever session it points at, say what it is otherwise.
async function followLink(video, settings, state) {
  let seen = null, viewer = null, retryMs = FIRST_RETRY_MS;
  const stopViewer = () => { if (viewer) { viewer.stop(); viewer = null; state.playing = null; } };
  for (;;) {
    let info;
    try {
      const abort = new AbortController();
      const lost = viewer ? viewer.ended.then(() => "lost") : new Promise(() => {});
      info = await Promise.race([linkState(settings, seen, abort.signal), lost]);
      if (info === "lost") { abort.abort(); stopViewer(); seen = null; await sleep(FIRST_RETRY_MS); continue; }
    } catch (err) {
      stopViewer();
      Object.assign(state, { state: err.status === 404 ? "unknown" : "retrying", error: err.message, status: err.status || null });
      const [text, detail] = err.status === 404
        ? ["Waiting for the stream.", "Nothing plays at this link yet: it starts when the LiveFuse page that gave it presses Start camera."]
        : failureWords(err, "link");
      state.retryMs = retryMs;
      state.retries += 1;
      say(state, text, detail);
      seen = null;
      await sleep(retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
      continue;
    }
    retryMs = FIRST_RETRY_MS;
    seen = info.tag;
    state.link = info;
    state.error = null;
    state.status = null;
    if (info.state !== "live") {
      stopViewer();
      state.state = info.state;
      if (info.state === "ended") say(state, "This stream has ended.", "It comes back here when the streamer presses Start camera again.");
      else say(state, "Waiting for the stream…", "It starts when the streamer presses Start camera on the LiveFuse page.");
      continue;
    }
    if (viewer && state.playing === info.session) continue;
    stopViewer();
    try {
      viewer = await watch(video, { ...settings, session: info.session }, (r) => Object.assign(state, r));
      state.playing = info.session;
      state.state = "live";
      say(state, "");
    } catch (err) {
      Object.assign(state, { state: "retrying", error: err.message, status: err.status || null });
      const [text, detail] = failureWords(err, "link");
      say(state, text, detail);
      seen = null;
      state.retryMs = retryMs;
      state.retries += 1;
      await sleep(retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }
  }
}

// A session id: play it; when it is missing or ends, say so and retry with growing waits.
async function followSession(video, settings, state) {
  let retryMs = FIRST_RETRY_MS;
  for (;;) {
    try {
      const viewer = await watch(video, settings, (r) => Object.assign(state, r));
      state.state = "live";
      say(state, "");
      retryMs = FIRST_RETRY_MS;
      await viewer.ended;
      viewer.stop();
      state.state = "ended";
      say(state, "This stream has ended.", "The streamer's next Start makes a new one: use the page's watch link to follow it.");
    } catch (err) {
      Object.assign(state, { state: "retrying", error: err.message, status: err.status || null });
      const [text, detail] = failureWords(err, "address");
      say(state, text, detail);
    }
    state.retryMs = retryMs;
    state.retries += 1;
    await sleep(retryMs);
    retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
  }
}

async function main() {
  const video = document.getElementById("output");
  const settings = watchSettings(window.location);
  const state = { state: "starting", error: null, status: null, location: null, message: "", retries: 0, retryMs: 0, playing: null };
  window.livefuseWatch = state; // read by the end-to-end tests
  video.muted = !settings.audio;
  if (!settings.session) {
    state.state = "failed";
    state.error = "no session: open /watch/SESSION";
    say(state, "No stream named in this address.", "Copy the watch link from the LiveFuse page.");
    return;
  }
  say(state, "Connecting…");
  if (isWatchLink(settings.session)) await followLink(video, settings, state);
  else await followSession(video, settings, state);
}

main();
