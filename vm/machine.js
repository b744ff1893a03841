// The emulated machine the in-browser Linux boots (docs/IN-BROWSER.md): v86's options besides
// the files, one place for every host of the guest (vm/worker.js in the page, and
// spike/in-browser/lesson-steps.mjs under Node.js), so that what is measured is what the page
// boots. A classic script: the worker takes it with importScripts.
self.ackscopeMachine = {
  memory_size: 128 * 1024 * 1024,
  vga_memory_size: 2 * 1024 * 1024,
  // The guest's console is the first serial port; the second carries session files.
  cmdline: "console=ttyS0 quiet 8250.nr_uarts=2",
  autostart: true,
  uart1: true,
  fastboot: true,
  screen_dummy: true,
  disable_keyboard: true,
  disable_mouse: true,
  disable_speaker: true,
};
