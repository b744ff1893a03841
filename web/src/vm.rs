//! The Linux in this tab (docs/IN-BROWSER.md): a 32-bit Linux booted in v86, an x86 emulator
//! in a Web Worker, with ackscope's probe inside. A lesson step runs there when no probe is
//! around: the guest's own TCP stack does what the step shows, delayed ACK and Nagle included.
//!
//! `cargo xtask build-vm` puts it in `vm/` beside the page (the static site); a page without it
//! (a site built without it, or the probe's own page, which has a real kernel) offers nothing.
//! The worker (vm/worker.js) boots the guest when the first step asks, hands it each step's spec
//! as one line of JSON on its console, and hands back the session file the probe in the guest
//! recorded, which opens here as any file does, labelled as the emulated machine's.

use js_sys::{Reflect, Uint8Array};
use leptos::prelude::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;

use ackscope_shared::Scenario;

use crate::js::settle;
use crate::store::Store;

/// The worker's script, beside the page. `use-scheduling-api`: v86 gives its thread back
/// through `scheduler.postTask`, which kept story 1's NODELAY waits shortest in the spike.
const WORKER_URL: &str = "vm/worker.js?use-scheduling-api";
const MANIFEST_URL: &str = "vm/vm.json";

/// Where the Linux in this tab is.
#[derive(Clone, Debug, PartialEq)]
pub enum VmStatus {
    /// Not beside this page.
    Absent,
    /// Built and not started: its kernel's release.
    Available {
        kernel: String,
    },
    Booting {
        kernel: String,
    },
    Ready {
        kernel: String,
        boot_ms: u32,
    },
    /// A step's run is going on in it.
    Running {
        kernel: String,
        boot_ms: u32,
    },
    /// The emulator stopped (or never started): why. The next step asked boots it again.
    Failed {
        kernel: String,
        reason: String,
    },
}

impl VmStatus {
    /// Whether a step can be sent to it now (or to its boot).
    pub fn takes_runs(&self) -> bool {
        matches!(
            self,
            VmStatus::Available { .. } | VmStatus::Ready { .. } | VmStatus::Failed { .. }
        )
    }

    /// The guest kernel's release (empty while none was found).
    fn kernel(&self) -> String {
        match self {
            VmStatus::Absent => String::new(),
            VmStatus::Available { kernel }
            | VmStatus::Booting { kernel }
            | VmStatus::Ready { kernel, .. }
            | VmStatus::Running { kernel, .. }
            | VmStatus::Failed { kernel, .. } => kernel.clone(),
        }
    }

    /// For people, beside the button; `None` when there is nothing to say.
    pub fn sentence(&self) -> Option<String> {
        match self {
            VmStatus::Absent | VmStatus::Available { .. } => None,
            VmStatus::Booting { kernel } => {
                Some(format!("Booting Linux {kernel} in this tab (a few seconds)..."))
            }
            VmStatus::Ready { kernel, boot_ms } => Some(format!(
                "Linux {kernel} is running in this tab (booted in {:.1} s).",
                f64::from(*boot_ms) / 1000.0
            )),
            VmStatus::Running { kernel, .. } => {
                Some(format!("Running the step on Linux {kernel} in this tab..."))
            }
            VmStatus::Failed { reason, .. } => Some(format!(
                "The Linux in this tab stopped: {reason}. The next run boots it again."
            )),
        }
    }
}

/// What every run of the guest is labelled with: the machine was emulated.
pub fn emulated_label(kernel: &str) -> String {
    format!(
        "in-browser Linux {kernel}, emulated by v86 in this tab: the delayed-ACK timer is the \
         guest kernel's, the clock is the emulator's, and the one emulated CPU is shared by \
         both sides, the recorder and an emulated link's relay, so a transfer goes no faster \
         than that CPU allows"
    )
}

/// The Linux in this tab, for the page's lifetime: cheap to copy.
#[derive(Clone, Copy)]
pub struct Vm {
    pub status: RwSignal<VmStatus>,
    /// The last step's run that failed in the guest, and why.
    pub note: RwSignal<Option<String>>,
    inner: StoredValue<Inner, LocalStorage>,
}

#[derive(Default)]
struct Inner {
    worker: Option<web_sys::Worker>,
    /// Called with each of the worker's messages: kept as long as the worker.
    on_message: Option<Closure<dyn FnMut(web_sys::MessageEvent)>>,
    on_error: Option<Closure<dyn FnMut(web_sys::Event)>>,
    next_id: u32,
    /// The step asked before the guest was ready: its id, spec and file name.
    waiting: Option<(u32, String, String)>,
    /// The step's run going on: its id and file name.
    running: Option<(u32, String)>,
}

impl Vm {
    /// Looks for the Linux beside the page (its `vm/vm.json`), without starting it.
    pub fn beside_page() -> Vm {
        let vm = Vm {
            status: RwSignal::new(VmStatus::Absent),
            note: RwSignal::new(None),
            inner: StoredValue::new_local(Inner::default()),
        };
        spawn_local(async move {
            if let Some(kernel) = manifest_kernel().await {
                vm.status.try_set(VmStatus::Available { kernel });
            }
        });
        vm
    }

    /// Runs `scenario` in the guest, booting it first if need be; its session opens as a file
    /// named `name` once the run has ended.
    pub fn run(self, store: Store, scenario: &Scenario, name: String) {
        let status = self.status.get_untracked();
        if !status.takes_runs() {
            return;
        }
        let spec = scenario.to_json_line();
        let id = self.inner.try_update_value(|inner| {
            inner.next_id += 1;
            inner.next_id
        });
        let Some(id) = id else { return };
        self.note.set(None);
        match status {
            VmStatus::Available { kernel } | VmStatus::Failed { kernel, .. } => {
                self.inner.update_value(|inner| inner.waiting = Some((id, spec, name)));
                self.start(store, kernel);
            }
            VmStatus::Ready { kernel, boot_ms } => {
                self.send(id, &spec, name);
                self.status.set(VmStatus::Running { kernel, boot_ms });
            }
            _ => {}
        }
    }

    fn send(self, id: u32, spec: &str, name: String) {
        let message = js_sys::Object::new();
        let run = js_sys::Object::new();
        let _ = Reflect::set(&run, &"id".into(), &id.into());
        let _ = Reflect::set(&run, &"spec".into(), &spec.into());
        let _ = Reflect::set(&message, &"run".into(), &run);
        self.inner.update_value(|inner| {
            if let Some(worker) = &inner.worker {
                let _ = worker.post_message(&message);
            }
            inner.running = Some((id, name));
        });
    }

    fn start(self, store: Store, kernel: String) {
        let worker = match web_sys::Worker::new(WORKER_URL) {
            Ok(worker) => worker,
            Err(error) => {
                let reason = format!("no worker: {}", crate::js::describe(&error));
                self.status.set(VmStatus::Failed { kernel, reason });
                return;
            }
        };
        let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
            move |event: web_sys::MessageEvent| self.heard(store, &event.data()),
        );
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
            self.stop("its worker could not be loaded (vm/worker.js)".into());
        });
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        self.inner.update_value(|inner| {
            inner.worker = Some(worker);
            inner.on_message = Some(on_message);
            inner.on_error = Some(on_error);
        });
        self.status.set(VmStatus::Booting { kernel });
    }

    fn stop(self, reason: String) {
        self.inner.update_value(|inner| {
            if let Some(worker) = inner.worker.take() {
                worker.terminate();
            }
            inner.waiting = None;
            inner.running = None;
        });
        let kernel = self.status.with_untracked(VmStatus::kernel);
        self.status.try_set(VmStatus::Failed { kernel, reason });
    }

    /// One message of the worker's (vm/worker.js says which).
    fn heard(self, store: Store, data: &JsValue) {
        let field = |name: &str| Reflect::get(data, &name.into()).ok().filter(|v| v.is_object());
        let text = |value: &JsValue, name: &str| {
            Reflect::get(value, &name.into()).ok().and_then(|v| v.as_string()).unwrap_or_default()
        };
        let number = |value: &JsValue, name: &str| {
            Reflect::get(value, &name.into()).ok().and_then(|v| v.as_f64()).unwrap_or(0.0)
        };
        if let Some(ready) = field("ready") {
            let (kernel, boot_ms) = (text(&ready, "kernel"), number(&ready, "ms") as u32);
            let waiting = self.inner.try_update_value(|inner| inner.waiting.take()).flatten();
            match waiting {
                Some((id, spec, name)) => {
                    self.send(id, &spec, name);
                    self.status.set(VmStatus::Running { kernel, boot_ms });
                }
                None => self.status.set(VmStatus::Ready { kernel, boot_ms }),
            }
        } else if let Some(session) = field("session") {
            let id = number(&session, "id") as u32;
            let bytes = Reflect::get(&session, &"bytes".into()).unwrap_or(JsValue::UNDEFINED);
            let bytes = Uint8Array::new(&bytes).to_vec();
            if let Some((name, kernel)) = self.ended(id) {
                store.update(|state| {
                    state.open_emulated(&name, &bytes, emulated_label(&kernel));
                });
            }
        } else if let Some(failed) = field("failed") {
            let (id, reason) = (number(&failed, "id") as u32, text(&failed, "reason"));
            self.ended(id);
            self.note.set(Some(format!("The run in this tab failed: {reason}")));
        } else if let Ok(error) = Reflect::get(data, &"error".into()) {
            if let Some(reason) = error.as_string() {
                self.stop(reason);
            }
        }
    }

    /// The run `id` ended: its file's name and the guest's kernel, if it is the run going on
    /// (one the guest answers late is not shown as another's); the guest takes the next step.
    fn ended(self, id: u32) -> Option<(String, String)> {
        let running = self
            .inner
            .try_update_value(|inner| inner.running.take_if(|(running, _)| *running == id));
        let (_, name) = running.flatten()?;
        let VmStatus::Running { kernel, boot_ms } = self.status.get_untracked() else {
            return None;
        };
        self.status.set(VmStatus::Ready { kernel: kernel.clone(), boot_ms });
        Some((name, kernel))
    }
}

/// The kernel's release from `vm/vm.json`, if the Linux is there.
async fn manifest_kernel() -> Option<String> {
    let window = web_sys::window()?;
    let response: web_sys::Response =
        settle(&window.fetch_with_str(MANIFEST_URL)).await.ok()?.dyn_into().ok()?;
    if !response.ok() {
        return None;
    }
    let text = settle(&response.text().ok()?).await.ok()?.as_string()?;
    let manifest = js_sys::JSON::parse(&text).ok()?;
    Reflect::get(&manifest, &"kernel".into()).ok()?.as_string()
}
