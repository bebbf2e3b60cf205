// The watch page (GET /watch/SESSION): one session's output over WHEP, full-window, no controls, for
// OBS's browser source and for viewers. Everything it needs is in the URL fragment, which browsers never
// send to a server, so no token reaches a request line or a log:
//   /watch/SESSION#token=TOKEN            a server that requires tokens (the session owner's token)
//   ...#server=https://host:port&session=ID  the same page hosted on another origin (the server lists it
//                                         with --allow-origin)
//   ...&audio=1                           play the sender's audio too (OBS captures it; browsers may
//                                         refuse unmuted autoplay)
// It retries every few seconds while the session is missing or the server is full or unreachable.
import { waitForGathering } from "./connection.js";

const RETRY_MS = 3000;

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
  const resp = await fetch(`${server}/whep/${encodeURIComponent(session)}`, {
    method: "POST", headers, body: pc.localDescription.sdp, referrerPolicy: "no-referrer",
  });
  if (resp.status !== 201) {
    pc.close();
    const body = await resp.json().catch(() => ({}));
    throw Object.assign(new Error(body.error || resp.statusText), { status: resp.status });
  }
  const location = new URL(resp.headers.get("Location") || "", server).href;
  await pc.setRemoteDescription({ type: "answer", sdp: await resp.text() });
  const stop = () => {
    pc.close();
    fetch(location, { method: "DELETE", headers: token ? { Authorization: `Bearer ${token}` } : {}, keepalive: true })
      .catch(() => {});
  };
  report({ state: "connecting", location });
  return { pc, stop };
}

async function main() {
  const video = document.getElementById("output");
  const settings = watchSettings(window.location);
  const state = { state: "starting", error: null, status: null, location: null };
  window.livefuseWatch = state; // read by the end-to-end tests
  video.muted = !settings.audio;
  if (!settings.session) {
    state.state = "failed";
    state.error = "no session: open /watch/SESSION";
    return;
  }
  for (;;) {
    let viewer = null;
    try {
      viewer = await watch(video, settings, (r) => Object.assign(state, r));
      const ended = new Promise((resolve) => {
        viewer.pc.onconnectionstatechange = () => {
          state.state = viewer.pc.connectionState;
          if (["failed", "closed", "disconnected"].includes(viewer.pc.connectionState)) resolve();
        };
      });
      window.addEventListener("pagehide", viewer.stop, { once: true });
      await ended;
      window.removeEventListener("pagehide", viewer.stop);
      viewer.stop();
    } catch (err) {
      state.error = err.message;
      state.status = err.status || null;
      state.state = "retrying";
    }
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}

main();
