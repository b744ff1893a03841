// Runs every lesson step that runs something on the in-browser Linux, under Node.js: the same
// emulator build and guest image the page boots (`cargo xtask build-vm` first), the steps sent
// one after the other to the guest's init as the page sends them (`RUN <id> <spec>`), each
// session file kept in target/vm-steps/ and summarized by the host's `ackscope show`.
//
//   cargo build --release -p ackscope-probe && node spike/in-browser/lesson-steps.mjs [LESSON...]
//
// docs/IN-BROWSER.md has what it measured. Node.js 18 or later.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const ackscope = path.join(root, "target/release/ackscope");
const site = path.join(root, "dist/vm");
const out = path.join(root, "target/vm-steps");
const { V86 } = await import(path.join(root, "target/vm/package/build/libv86.mjs"));

// Each step's spec as one line of JSON: its `spec:` line, or its `run:` preset's.
const only = process.argv.slice(2);
const steps = [];
for (const file of fs.readdirSync(path.join(root, "lessons")).sort()) {
  if (!file.endsWith(".lesson")) continue;
  const lesson = file.slice(0, -".lesson".length);
  if (only.length && !only.includes(lesson)) continue;
  let step = 0;
  for (const line of fs.readFileSync(path.join(root, "lessons", file), "utf8").split("\n")) {
    if (line.startsWith("step:")) step += 1;
    let spec = null;
    if (line.startsWith("spec:")) spec = line.slice(5);
    if (line.startsWith("run:")) {
      spec = execFileSync(ackscope, ["run", "--print-spec", line.slice(4).trim()], { encoding: "utf8" });
    }
    if (spec !== null) steps.push({ name: `${lesson}-step-${step}`, spec: JSON.stringify(JSON.parse(spec)) });
  }
}
fs.mkdirSync(out, { recursive: true });

const load = (file) => ({ buffer: new Uint8Array(fs.readFileSync(path.join(site, file))).buffer });
// The page's machine (vm/machine.js, a classic script that sets self.ackscopeMachine).
const machine = { self: {} };
vm.runInNewContext(fs.readFileSync(path.join(site, "machine.js"), "utf8"), machine);
const emulator = new V86({
  ...machine.self.ackscopeMachine,
  wasm_path: path.join(root, "target/vm/package/build/v86.wasm"),
  bios: load("bios.bin"),
  vga_bios: load("vgabios-stdvga.bin"),
  bzimage: load("bzImage"),
  initrd: load("initrd.gz"),
});

let next = 0;
let started = 0;
let received = [];
let sending = null;
let line = "";
function send() {
  if (next >= steps.length) {
    emulator.stop();
    process.exit(0);
  }
  started = Date.now();
  emulator.serial0_send(`RUN ${next} ${steps[next].spec}\n`);
}
function done(summary) {
  console.log(`== ${steps[next].name} (${((Date.now() - started) / 1000).toFixed(1)} s)\n${summary}`);
  next += 1;
  send();
}
function deliver() {
  if (!sending || received.length < sending) return;
  const file = path.join(out, `${steps[next].name}.ackscope`);
  fs.writeFileSync(file, Buffer.from(received.slice(0, sending)));
  received = received.slice(sending);
  sending = null;
  done(execFileSync(ackscope, ["show", file], { encoding: "utf8" }));
}
emulator.add_listener("serial1-output-byte", (byte) => {
  received.push(byte);
  deliver();
});
emulator.add_listener("serial0-output-byte", (byte) => {
  const c = String.fromCharCode(byte);
  if (c !== "\n") {
    if (c !== "\r") line += c;
    return;
  }
  const words = line.split(" ");
  line = "";
  if (words[0] !== "ACKSCOPE-VM") return;
  if (words[1] === "READY") send();
  if (words[1] === "SENDING") {
    sending = Number(words[3]);
    deliver();
  }
  if (words[1] === "FAILED") done(`failed: ${words.slice(3).join(" ")}`);
});
