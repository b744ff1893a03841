// The in-browser Linux (`cargo xtask build-vm`, docs/IN-BROWSER.md), run in a Web Worker so that
// the emulator never holds the page's thread. v86 boots the guest's kernel and initramfs; the
// guest's init (vm/init) says it is ready on the first serial port, runs each spec the page
// sends on that port with ackscope's probe, and sends the session file back over the second.
//
// From the page: {run: {id, spec}} (spec: one line of JSON, as `ackscope run --spec` reads).
// To the page: {booting: {ms}}, {ready: {kernel, ms}}, {session: {id, bytes}} (an ArrayBuffer,
// transferred), {failed: {id, reason}}, {error: reason}.
"use strict";
importScripts("libv86.js", "machine.js");

// A session of a lesson step's run is tens of kilobytes; this bounds what a confused guest can
// make the page hold.
const MAX_SESSION_BYTES = 64 * 1024 * 1024;
const t0 = performance.now();
const ms = () => Math.round(performance.now() - t0);

let emulator;
try {
  emulator = new V86({
    ...self.ackscopeMachine,
    wasm_path: "v86.wasm",
    bios: { url: "bios.bin" },
    vga_bios: { url: "vgabios-stdvga.bin" },
    bzimage: { url: "bzImage" },
    initrd: { url: "initrd.gz" },
  });
} catch (error) {
  postMessage({ error: `the emulator did not start: ${error}` });
  throw error;
}
postMessage({ booting: { ms: ms() } });

// The second port's bytes, kept until the console says whose they are and how many.
let received = new Uint8Array(64 * 1024);
let receivedLength = 0;
let sending = null; // {id, bytes}

emulator.add_listener("serial1-output-byte", (byte) => {
  if (receivedLength === received.length) {
    if (received.length >= MAX_SESSION_BYTES) {
      postMessage({ error: `the guest sent more than ${MAX_SESSION_BYTES} bytes` });
      receivedLength = 0;
      return;
    }
    const grown = new Uint8Array(received.length * 2);
    grown.set(received);
    received = grown;
  }
  received[receivedLength++] = byte;
  deliver();
});

function deliver() {
  if (!sending || receivedLength < sending.bytes) return;
  const session = received.slice(0, sending.bytes);
  received.copyWithin(0, sending.bytes, receivedLength);
  receivedLength -= sending.bytes;
  postMessage({ session: { id: sending.id, bytes: session.buffer } }, [session.buffer]);
  sending = null;
}

let line = "";
emulator.add_listener("serial0-output-byte", (byte) => {
  const c = String.fromCharCode(byte);
  if (c !== "\n") {
    if (c !== "\r" && line.length < 4096) line += c;
    return;
  }
  const words = line.split(" ");
  line = "";
  if (words[0] !== "ACKSCOPE-VM") return;
  if (words[1] === "READY") {
    const kernel = (words.find((w) => w.startsWith("kernel=")) || "kernel=").slice(7);
    postMessage({ ready: { kernel, ms: ms() } });
  } else if (words[1] === "SENDING") {
    const bytes = Number(words[3]);
    if (!(bytes > 0 && bytes <= MAX_SESSION_BYTES)) {
      postMessage({ failed: { id: Number(words[2]), reason: `a session of ${words[3]} bytes` } });
      return;
    }
    sending = { id: Number(words[2]), bytes };
    deliver();
  } else if (words[1] === "FAILED") {
    postMessage({ failed: { id: Number(words[2]), reason: words.slice(3).join(" ") } });
  }
});

onmessage = (event) => {
  const run = event.data && event.data.run;
  if (!run || !Number.isInteger(run.id) || typeof run.spec !== "string") return;
  if (run.spec.includes("\n") || run.spec.length > 3000) {
    postMessage({ failed: { id: run.id, reason: "a spec is one line of at most 3000 bytes" } });
    return;
  }
  emulator.serial0_send(`RUN ${run.id} ${run.spec}\n`);
};
