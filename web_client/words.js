// What the server's codes and numbers mean, in words a streamer reads at a glance.

// The edits themselves (names, labels, ranges, what each end does) come from the server: GET /edits.

// {smile: 0.41, brightness: -0.2} -> "smile +0.41, brightness −0.20" (largest first), each edit by its
// label in `vocabulary` (the GET /edits list) where it has one
export function formatEdits(understood, vocabulary = []) {
  const labels = Object.fromEntries(vocabulary.map((spec) => [spec.name, spec.label.toLowerCase()]));
  const items = Object.entries(understood || {}).filter(([, v]) => typeof v === "number" && Math.abs(v) >= 0.005);
  if (!items.length) return "no change (nothing in the prompt matched an edit)";
  items.sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]));
  return items.map(([k, v]) => `${labels[k] || k.replace(/_/g, " ")} ${v > 0 ? "+" : "−"}${Math.abs(v).toFixed(2)}`).join(", ");
}

// HTTP 422 from POST /sessions/{id}/source: {"error": message, "code": "source_<reason>"}
const SOURCE_REFUSALS = {
  source_no_consent: "the server needs your confirmation first: tick “I have the right to use this face”.",
  source_no_face: "no face was found in that photo. Pick one with a clear, front-facing face.",
  source_too_small: "the face in that photo is too small. Use a closer photo (the face at least 64 pixels wide).",
  source_too_turned: "the face in that photo is turned too far. Use one looking into the camera.",
  // the server's message names the part ("both eyes are covered (95% of it)"); sourceRefusalText shows it
  source_occluded: "too much of the face in that photo is covered. Use one where the face is mostly uncovered.",
  source_bad_image: "that file is not an image the server can read. Use a JPEG, PNG or WebP photo.",
  source_too_large: "that photo is too large. Use a smaller one.",
  source_protected_identity: "this face is on the server's protected list and cannot be used.",
  source_bad_index: "the face chosen in that photo does not exist.",
};

export function sourceRefusalText(code, message) {
  const words = SOURCE_REFUSALS[code];
  if (code === "source_occluded" && message) return `That photo can't be used: ${message.split(":")[0]}; ${words}`;
  return words ? `That photo can't be used: ${words}` : `That photo can't be used as a source face: ${message}`;
}

// A source accepted with parts masked (glasses, a hand, deep shadow), as the server words them: filled from
// the other side of the face, or left to your own skin.
export function sourceWarningText(warnings) {
  if (!warnings || !warnings.length) return "";
  return ` · ${warnings.join("; ")}`;
}
