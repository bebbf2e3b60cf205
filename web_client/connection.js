// One LiveFuse session: camera -> RTCPeerConnection -> server, processed video back, JSON control channel.

export class RefusedError extends Error {
  constructor(status, reason, retryAfter, code) {
    super(reason);
    this.status = status;
    this.retryAfter = retryAfter;
    this.code = code; // machine-readable refusal, e.g. "source_no_consent" (422 on source upload)
  }
}

export class UnreachableError extends Error {}

export class LiveFuseConnection extends EventTarget {
  // `watch`: the tab's watch link id (POST /sessions/watch); the new session becomes what that link plays
  constructor({ base = "", video = { width: 640, height: 480, frameRate: 30 }, watch = null } = {}) {
    super();
    this.base = base;
    this.watch = watch;
    this.videoConstraints = video;
    this.pc = null;
    this.channel = null;
    this.session = null;
    this.stream = null;
    this.nextId = 1;
  }

  async openCamera() {
    // NotFoundError / NotAllowedError / NotReadableError reach the caller as they are
    this.stream = await navigator.mediaDevices.getUserMedia({ video: this.videoConstraints, audio: false });
    return this.stream;
  }

  async connect() {
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    this.channel = pc.createDataChannel("control");
    this.channel.onmessage = (e) => this._message(e.data);
    // resolves once the control channel is open: messages sent before that would be lost
    this.opened = new Promise((resolve) => {
      this.channel.onopen = () => { this._send({ type: "hello", version: 1 }); resolve(); };
    });
    pc.ontrack = (e) => this.dispatchEvent(new CustomEvent("track", { detail: e.streams[0] || new MediaStream([e.track]) }));
    pc.onconnectionstatechange = () => this.dispatchEvent(new CustomEvent("state", { detail: pc.connectionState }));
    const track = this.stream.getVideoTracks()[0];
    const transceiver = pc.addTransceiver(track, { direction: "sendrecv", streams: [this.stream] });
    const params = transceiver.sender.getParameters();
    params.degradationPreference = "maintain-resolution"; // Chrome would otherwise halve 720p on "bandwidth"
    await transceiver.sender.setParameters(params).catch(() => {});
    await pc.setLocalDescription(await pc.createOffer());
    await waitForGathering(pc); // the server (aiortc) takes no trickled candidates
    let resp;
    try {
      resp = await fetch(`${this.base}/offer`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ sdp: pc.localDescription.sdp, type: pc.localDescription.type,
          ...(this.watch ? { watch: this.watch } : {}) }),
      });
    } catch (err) {
      throw new UnreachableError(`server unreachable: ${err.message}`);
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new RefusedError(resp.status, body.error || resp.statusText, resp.headers.get("Retry-After"));
    this.session = body.session;
    this.urls = body.urls || {}; // absolute on the replica that holds the session when it runs behind a balancer
    this.stages = body.stages || [];
    if (body.watch) this.watch = body.watch;
    await pc.setRemoteDescription({ type: "answer", sdp: body.sdp });
    return body;
  }

  // `fields`: extra form fields; the server refuses a source without `consent: true` (422 source_no_consent)
  async uploadSource(blob, sourceId, fields = {}) {
    const form = new FormData();
    form.append("image", blob, "source.jpg");
    if (sourceId) form.append("source_id", sourceId);
    for (const [k, v] of Object.entries(fields)) form.append(k, String(v));
    let resp;
    try {
      resp = await fetch(this.urls.source || `${this.base}/sessions/${this.session}/source`, { method: "POST", body: form });
    } catch (err) {
      throw new UnreachableError(`server unreachable: ${err.message}`);
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new RefusedError(resp.status, body.error || resp.statusText, null, body.code);
    return body;
  }

  // A picture to put behind the person (POST /sessions/{id}/background), applied at once: {image_id, ...}.
  async uploadBackground(blob) {
    const form = new FormData();
    form.append("image", blob, "background.jpg");
    let resp;
    try {
      resp = await fetch(`${this.base}/sessions/${this.session}/background`, { method: "POST", body: form });
    } catch (err) {
      throw new UnreachableError(`server unreachable: ${err.message}`);
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new RefusedError(resp.status, body.error || resp.statusText, null, body.code);
    return body;
  }

  // One message and its reply (ack or error with the same id); null when the channel is not open or no
  // reply came within `timeoutMs`.
  call(msg, timeoutMs = 10000) {
    return new Promise((resolve) => {
      const id = this._send(msg);
      if (!id) { resolve(null); return; }
      const timer = setTimeout(() => { this.removeEventListener("message", onReply); resolve(null); }, timeoutMs);
      const onReply = (ev) => {
        if (ev.detail.id !== id || !["ack", "error"].includes(ev.detail.type)) return;
        clearTimeout(timer);
        this.removeEventListener("message", onReply);
        resolve(ev.detail);
      };
      this.addEventListener("message", onReply);
    });
  }

  // The session as the server holds it: controls, sources, stages, stats (GET /sessions/{id}).
  async info() {
    const resp = await fetch(this.urls.session || `${this.base}/sessions/${this.session}`, { cache: "no-store" });
    if (!resp.ok) throw new RefusedError(resp.status, resp.statusText);
    return resp.json();
  }

  setPrompt(text) { return this._send({ type: "set_prompt", text }); }
  setParams(params) { return this._send({ type: "set_params", ...params }); }
  // one face's choice: a source id, "keep" (left unchanged) or null (the selected face, as every other)
  mapFace(trackId, sourceId) { return this._send({ type: "map_face", track_id: trackId, source_id: sourceId }); }

  _send(msg) {
    if (!this.channel || this.channel.readyState !== "open") return false;
    msg.id = this.nextId++;
    this.channel.send(JSON.stringify(msg));
    return msg.id;
  }

  _message(raw) {
    let msg;
    try { msg = JSON.parse(raw); } catch { return; }
    this.dispatchEvent(new CustomEvent(msg.type, { detail: msg }));
    this.dispatchEvent(new CustomEvent("message", { detail: msg }));
  }

  // What the browser adds to the server's delay: network round trip and the receiver's jitter buffer.
  async clientDelays() {
    if (!this.pc) return {};
    const report = await this.pc.getStats();
    const out = {};
    report.forEach((s) => {
      if (s.type === "candidate-pair" && s.nominated && s.currentRoundTripTime !== undefined) out.rttMs = s.currentRoundTripTime * 1000;
      if (s.type === "inbound-rtp" && s.kind === "video" && s.jitterBufferEmittedCount) {
        const prev = this._jb || { d: 0, n: 0 };
        const dn = s.jitterBufferEmittedCount - prev.n;
        if (dn > 0) out.jitterMs = ((s.jitterBufferDelay - prev.d) / dn) * 1000;
        this._jb = { d: s.jitterBufferDelay, n: s.jitterBufferEmittedCount };
        out.framesDecoded = s.framesDecoded;
      }
    });
    return out;
  }

  close() {
    if (this.pc) this.pc.close();
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    this.pc = null;
    this.channel = null;
    this.session = null;
  }
}

export function waitForGathering(pc, timeoutMs = 5000) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === "complete") { pc.removeEventListener("icegatheringstatechange", done); resolve(); } };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, timeoutMs);
  });
}
